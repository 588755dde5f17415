// Package turns keeps the requests that read the whole server — List pages
// and /metrics scrapes — from taking every processor, so that lock calls
// always find one.
//
// A List page of a thousand locks costs the server milliseconds of CPU
// (the plugin hop's decoding, the page's messages, their encoding) and a
// scrape a fraction of one; a client that lists or scrapes in a loop asks
// for them back to back. On two cores, a List loop and a scraper would
// each hold a processor, and every Acquire and Release would wait in the
// run queue behind them (and behind the plugin process doing the List's
// share). So these requests take turns: at most GOMAXPROCS−1 of them (at
// least one) run at once, the others wait for a turn (until their own
// context ends). Lock calls never take a turn and never wait for one.
//
// A turn is held for the whole request, the plugin hop included: while
// the server waits for a List page, the plugin process is working on it
// on the same machine. A turn is given back after MaxHold even if its
// request has not finished, so a client that reads its answer slowly (or
// a backend that answers slowly) delays the others by at most MaxHold,
// never for as long as it takes.
//
// A turn given back then rests before anyone can take it again: for Rest
// times as long as it was held (ForProcessors). Bounding how many run at
// once is not enough on its own: a client that lists in a loop takes the
// turn again the moment it is free, so its turn is busy all the time, and
// the work behind it (the plugin's share, the page's bytes on the
// loopback) keeps a processor of the machine busy as well. With the rest,
// background requests use at most 1/(1+Rest) of their turns' time: a
// dashboard paging through every lock gets its pages at that rate, and
// lock calls keep the rest of the machine.
package turns

import (
	"context"
	"net/http"
	"runtime"
	"sync"
	"time"
)

// MaxHold is the longest a request keeps its turn. A List page of a
// thousand locks takes a few milliseconds of CPU; one that takes longer is
// waiting (a slow reader, a slow backend), not using a processor.
const MaxHold = 50 * time.Millisecond

// Rest is how long, as a multiple of the time it was held, a turn of
// ForProcessors rests once given back: 1 keeps background requests to half
// of their turns' time.
const Rest = 1.0

// Turns is a bound on background requests running at once. The zero
// value is not usable; see New. It is safe for concurrent use.
type Turns struct {
	slots chan struct{}
	hold  time.Duration
	rest  float64
}

// New gives n turns (at least 1), each held for at most hold, free again
// as soon as it is given back.
func New(n int, hold time.Duration) *Turns {
	return Paced(n, hold, 0)
}

// Paced is New whose turns, once given back, rest for rest times as long
// as they were held before they can be taken again.
func Paced(n int, hold time.Duration, rest float64) *Turns {
	return &Turns{slots: make(chan struct{}, max(n, 1)), hold: hold, rest: max(rest, 0)}
}

// ForProcessors gives GOMAXPROCS−1 turns (at least one), held at most
// MaxHold and resting Rest times as long: one processor stays free of
// background requests, and the others are not theirs all the time.
func ForProcessors() *Turns {
	return Paced(runtime.GOMAXPROCS(0)-1, MaxHold, Rest)
}

// Take waits for a turn, or for ctx to end (its error). The release
// function gives the turn back (to rest first, when paced); it may be
// called more than once, and the turn goes back by itself after the hold.
func (t *Turns) Take(ctx context.Context) (release func(), err error) {
	select {
	case t.slots <- struct{}{}:
	default:
		select {
		case t.slots <- struct{}{}:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
	taken := time.Now()
	var once sync.Once
	give := func() {
		once.Do(func() {
			if rest := time.Duration(float64(time.Since(taken)) * t.rest); rest > 0 {
				time.AfterFunc(rest, func() { <-t.slots })
				return
			}
			<-t.slots
		})
	}
	timer := time.AfterFunc(t.hold, give)
	return func() {
		timer.Stop()
		give()
	}, nil
}

// Handler runs next's requests in turns. A request whose context ends
// while it waits is not served (its client has gone, or the server is
// stopping).
func (t *Turns) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		release, err := t.Take(r.Context())
		if err != nil {
			http.Error(w, "request ended while waiting for its turn", http.StatusServiceUnavailable)
			return
		}
		defer release()
		next.ServeHTTP(w, r)
	})
}
