package engine

import (
	"runtime"
	"time"
)

// deliverers bounds the processor time that watch fan-out may take. Every
// event is sent to every watcher it matches, each on a connection of its
// own: with hundreds of watchers of a busy prefix those sends are most of
// the server's work, and if all of them ran at once, every other client's
// requests would queue behind them for the processor. So watchers take
// turns to send, at most half of GOMAXPROCS (at least one) at a time; a
// send that blocks (its client reads slowly) gives its turn back after
// sendTurn, since it no longer uses the processor. When fan-out cannot keep
// up with the events, watchers' queues fill and a watcher that falls behind
// is ended (push): watchers are never waited on, and requests always have
// processors left.
type deliverers struct {
	turns chan struct{}
}

// sendTurn is how long a send holds its turn before it counts as blocked.
const sendTurn = time.Millisecond

func newDeliverers() *deliverers {
	return &deliverers{turns: make(chan struct{}, max(1, runtime.GOMAXPROCS(0)/2))}
}

// turn is one watcher's way into the deliverers' turns. Its timer is made
// once per watcher and reset for each send: a timer made per send was an
// allocation (and a timer added and deleted) per event per watcher.
type turn struct {
	d     *deliverers
	timer *time.Timer // gives the turn back after sendTurn; stopped between sends
}

func (d *deliverers) turn() *turn {
	t := &turn{d: d, timer: time.AfterFunc(time.Hour, d.release)}
	t.timer.Stop()
	return t
}

// take waits for a turn; give hands it back. Each take is given back once:
// by the timer when it fired (the send blocked), else by give.
func (t *turn) take() {
	t.d.turns <- struct{}{}
	// A turn handed from one watcher to the next runs at once (the Go
	// scheduler's next slot); yielding here puts it behind the requests
	// already waiting for a processor.
	runtime.Gosched()
	t.timer.Reset(sendTurn)
}

func (t *turn) give() {
	if t.timer.Stop() {
		t.d.release()
	}
}

func (d *deliverers) release() { <-d.turns }
