// Package workers runs functions on goroutines that outlive them, so that
// a call starts on a stack an earlier call has already grown.
//
// A new goroutine starts with the runtime's starting stack (about the
// average in use among the stacks the last GC scanned, most of them parked
// and shallow), and a call that goes deeper grows it: runtime.newstack
// allocates a larger one and copystack moves every frame over, looking up
// each frame's stack map. The engine's detached Acquire (core/engine)
// runs down through the batcher and the plugin host to a gRPC call, 10 to
// 30 frames, and grew a new goroutine's stack on every Acquire (3% of the
// server's CPU at memory c32). A worker keeps its stack between calls
// (until a GC finds it parked using under a quarter of it, and halves it),
// and handing a call to a parked worker costs what starting a goroutine
// did.
//
// The Pool keeps at most its maxIdle workers parked; a call that finds none
// parked gets a goroutine of its own, which then stays as a worker if there
// is room. Close lets the parked workers go.
package workers

import (
	"sync"
	"sync/atomic"
)

// Pool runs functions on its worker goroutines.
type Pool struct {
	work    chan func() // unbuffered: a send succeeds only into a parked worker
	done    chan struct{}
	close   sync.Once
	idle    atomic.Int32
	live    atomic.Int32 // workers started and not ended (for the tests)
	maxIdle int32
}

// New is a Pool that keeps up to maxIdle workers parked between calls.
func New(maxIdle int) *Pool {
	return &Pool{work: make(chan func()), done: make(chan struct{}), maxIdle: int32(maxIdle)}
}

// Go runs f on a parked worker, or on a new goroutine when none is parked.
// It does not wait for f. After Close, f still runs, on a goroutine that
// then exits.
func (p *Pool) Go(f func()) {
	select {
	case p.work <- f:
	default:
		p.live.Add(1)
		go p.run(f)
	}
}

// run runs f, then the calls Go hands it, until there are maxIdle workers
// parked already or the Pool is closed.
func (p *Pool) run(f func()) {
	defer p.live.Add(-1)
	for {
		f()
		if p.idle.Add(1) > p.maxIdle {
			p.idle.Add(-1)
			return
		}
		select {
		case f = <-p.work:
			p.idle.Add(-1)
		case <-p.done:
			p.idle.Add(-1)
			return
		}
	}
}

// Close ends the parked workers (and each busy one when its call returns).
// Go still runs calls after it, each on a goroutine of its own.
func (p *Pool) Close() {
	p.close.Do(func() { close(p.done) })
}
