// Package combine carries concurrent calls of one kind in as few calls as
// possible, without ever making a call wait for company: group commit with
// no timer.
//
// A call that arrives while fewer than MaxInFlight batches are running, and
// nobody is queued, is sent at once, alone. A call that arrives while the
// slots are taken queues; when a batch finishes, the queue (up to MaxBatch
// calls with distinct keys) becomes the next batch, at once. So an idle
// caller pays nothing (its call goes out alone, as without this package),
// and under load each round trip carries everyone who arrived during the
// one before it.
//
// There is no goroutine of the package's own: a batch is run by one of the
// callers in it (the leader), who hands the next batch to a caller of that
// batch when its own is done. Every goroutine that runs a batch is a caller
// waiting for its own answer, so each has an owner and an exit.
package combine

import (
	"context"
	"slices"
	"sync"
)

// Config tunes a Combiner.
type Config[Req, Res any] struct {
	// Run makes one call carrying reqs and answers one result per request,
	// in order. It is never called with an empty batch, nor with two
	// requests of the same key. ctx is the caller's own when the batch is
	// that caller's request alone, sent at once (so an idle caller's call
	// is exactly what it would be without batching); otherwise it is the
	// running caller's context without its cancellation (its values, for
	// tracing), since the call is made on behalf of every caller in it.
	Run func(ctx context.Context, reqs []Req) []Result[Res]
	// Key is a request's key: one batch holds each key at most once.
	Key func(Req) string
	// MaxBatch bounds the requests in one batch (at least 1).
	MaxBatch int
	// MaxInFlight bounds the batches running at once (at least 1).
	MaxInFlight int
}

// Result is one request's answer.
type Result[Res any] struct {
	Value Res
	Err   error
}

// Combiner gathers concurrent calls into batches. It is safe for
// concurrent use.
type Combiner[Req, Res any] struct {
	cfg Config[Req, Res]

	mu       sync.Mutex
	inFlight int
	queue    []*call[Req, Res]
}

// New returns a Combiner.
func New[Req, Res any](cfg Config[Req, Res]) *Combiner[Req, Res] {
	cfg.MaxBatch = max(cfg.MaxBatch, 1)
	cfg.MaxInFlight = max(cfg.MaxInFlight, 1)
	return &Combiner[Req, Res]{cfg: cfg}
}

type call[Req, Res any] struct {
	req Req
	res Result[Res]
	// done is closed once res is set (nil for a call that runs alone on
	// its caller's goroutine, which reads res when run returns).
	done chan struct{}
	// lead receives the batch this call must run (it is in it). Buffered:
	// the handing-over leader never waits. leading is set, under the
	// Combiner's mutex, before the batch is sent.
	lead    chan []*call[Req, Res]
	leading bool
	queued  bool
}

// Do sends req, alone or in a batch, and returns its answer. When ctx ends
// while req is still queued, Do returns ctx's error and req is never sent;
// when it ends after req was sent in a batch someone else runs, Do returns
// ctx's error at once and the answer is dropped. A caller that must learn
// the outcome (say, of an Acquire) passes a context that does not end
// before the batch does.
func (c *Combiner[Req, Res]) Do(ctx context.Context, req Req) (Res, error) {
	c.mu.Lock()
	if c.inFlight < c.cfg.MaxInFlight && len(c.queue) == 0 {
		c.inFlight++
		c.mu.Unlock()
		// Alone, on the caller's goroutine: nobody waits on it, so it
		// needs no channels.
		me := &call[Req, Res]{req: req}
		c.run(ctx, []*call[Req, Res]{me})
		return me.res.Value, me.res.Err
	}
	me := &call[Req, Res]{req: req, done: make(chan struct{}), lead: make(chan []*call[Req, Res], 1), queued: true}
	c.queue = append(c.queue, me)
	c.mu.Unlock()

	select {
	case <-me.done:
	case batch := <-me.lead:
		c.run(context.WithoutCancel(ctx), batch)
	case <-ctx.Done():
		c.mu.Lock()
		switch {
		case me.queued:
			c.remove(me)
			c.mu.Unlock()
			var zero Res
			return zero, ctx.Err()
		case me.leading:
			// Handed a batch: others wait for it, so it runs.
			c.mu.Unlock()
			c.run(context.WithoutCancel(ctx), <-me.lead)
		default:
			c.mu.Unlock()
			var zero Res
			return zero, ctx.Err()
		}
	}
	return me.res.Value, me.res.Err
}

// run makes one batch call, hands the slot to the next batch (if any), and
// then answers the batch's callers.
func (c *Combiner[Req, Res]) run(ctx context.Context, batch []*call[Req, Res]) {
	reqs := make([]Req, len(batch))
	for i, b := range batch {
		reqs[i] = b.req
	}
	results := c.cfg.Run(ctx, reqs)

	c.mu.Lock()
	next := c.take()
	if len(next) == 0 {
		c.inFlight--
	} else {
		next[0].leading = true
	}
	c.mu.Unlock()
	if len(next) > 0 {
		next[0].lead <- next
	}

	for i, b := range batch {
		b.res = results[i]
		if b.done != nil { // nil: the caller runs its call alone
			close(b.done)
		}
	}
}

// take removes the next batch from the queue: its calls in arrival order,
// each key at most once, at most MaxBatch. c.mu must be held.
func (c *Combiner[Req, Res]) take() []*call[Req, Res] {
	if len(c.queue) == 0 {
		return nil
	}
	var batch []*call[Req, Res]
	keys := make(map[string]struct{}, min(len(c.queue), c.cfg.MaxBatch))
	kept := c.queue[:0]
	for _, q := range c.queue {
		k := c.cfg.Key(q.req)
		if _, dup := keys[k]; dup || len(batch) == c.cfg.MaxBatch {
			kept = append(kept, q)
			continue
		}
		keys[k] = struct{}{}
		q.queued = false
		batch = append(batch, q)
	}
	clear(c.queue[len(kept):])
	c.queue = kept
	return batch
}

// remove takes a queued call out of the queue. c.mu must be held.
func (c *Combiner[Req, Res]) remove(me *call[Req, Res]) {
	for i, q := range c.queue {
		if q == me {
			c.queue = slices.Delete(c.queue, i, i+1)
			me.queued = false
			return
		}
	}
}

// Queued is the number of calls waiting for a batch.
func (c *Combiner[Req, Res]) Queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}
