// Package workers runs functions on goroutines that outlive them, so that
// a request's goroutine starts with a stack an earlier request has already
// grown.
//
// A new goroutine starts with the runtime's starting stack (the average
// in-use size of the stacks the last GC scanned, most of them parked and
// shallow), and a request that goes deeper grows it: runtime.newstack
// allocates one twice the size and copystack moves every frame over,
// looking up each frame's stack map. A holdfast request runs 20 to 40
// frames deep (net/http, Connect, the engine, a gRPC call to the plugin), so
// it grew its stack twice, for about a tenth of the server's CPU at
// concurrency 32 (docs/capacity.md). A worker of a Pool keeps its stack
// between calls (until a GC finds it using under a quarter of it while
// parked and halves it), so most calls grow none.
//
// The Pool keeps at most its maxIdle workers parked; a call that finds none
// idle gets a goroutine of its own, which then stays as a worker if there
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
