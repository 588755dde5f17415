package engine

import (
	"context"
	"errors"
	"hash/maphash"
	"slices"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/core/internal/backoff"
	"github.com/holdfast/holdfast/core/waitq"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// Retry delays after a backend error, a lease that came back too late or a
// holder that outlives its expiry; errors are also retried on every
// wake-up.
const (
	minRetry = 10 * time.Millisecond
	maxRetry = 2 * time.Second
)

// A turnSource says when this server's head of a key's queue may try the
// backend, and as whom: localTurns when this server's FIFO is the only
// order (the head tries at once), fairTurns when a fair backend keeps the
// order across servers in the store.
type turnSource interface {
	// join puts the caller in this server's queue for key (and, for a fair
	// backend, in the store's). The caller must Leave the waiter.
	join(ctx context.Context) (*waitq.Waiter, error)
	// ready readies the head's next try. It answers stepTry with the waiter
	// ID to try as, or another step with the error to report should the
	// wait end before the next try (for stepAgain the last one stands).
	ready(waitCtx context.Context) (step, string, error)
	// failed is told that a try found the backend unavailable.
	failed()
	// missed is told that a try found the lock free but did not get it;
	// it answers when to look again.
	missed() step
	// leave is called once at the end of the wait (won: the caller got the
	// lock), before the waiter leaves this server's queue.
	leave(won bool)
	// outlived is told that the wait ended during a try, which may still
	// be on its way to the backend.
	outlived()
}

// step is what the head does next.
type step int

const (
	stepTry     step = iota // try the backend now
	stepAgain               // look again at once
	stepBackoff             // look again after the retry backoff
)

// acquireWaiting queues the caller for key for at most wait. Only the head
// of this server's queue looks at the lock: woken by a release or expiry
// event, by this server's own release, by a resync, or by a timer set for the
// holder's expiry (in case an event is lost) or for a retry. turns says
// whether it may try and as whom; the loop is the same for every backend.
func (e *Engine) acquireWaiting(ctx context.Context, s *acquireSpec) (*lockv1.AcquireResponse, error) {
	waitCtx, cancel := context.WithTimeout(ctx, s.wait)
	defer cancel()
	stopOnClose := context.AfterFunc(e.closing, cancel)
	defer stopOnClose()

	_, busy := e.queued(s.keys)
	f, fair := e.fair()
	// Nobody waits here: try as a newcomer first, on a fair backend and on
	// a Follow feed, so that an uncontended lock costs no queue entry and
	// follows nothing (a waiter's first try comes after its follow, which
	// on a Follow feed may wait for the backend). A fair backend refuses
	// when anyone is queued in the store, so this never jumps its queue;
	// on a local order nobody is queued here to jump. On a Watch feed with
	// a local order the head of an empty queue tries at once anyway, so a
	// newcomer's try would only add a call when the lock is held.
	// The try is bounded by the wait (a frozen backend holds nobody past
	// it).
	if !busy && (fair || e.interest != nil) {
		a, err := e.try(waitCtx, s)
		switch {
		case err == nil && a.acquired:
			return e.acquired(a), nil
		case waitCtx.Err() != nil:
			select {
			case <-e.done:
				return nil, newErr(ErrUnavailable, "acquire: the server is shutting down")
			default:
			}
			if ctx.Err() != nil {
				return nil, ctxErr(ctx, "acquire")
			}
			return e.notAcquired(a.current, a.delayed), nil
		case err != nil && !errors.Is(err, ErrUnavailable):
			return nil, err
		}
	}
	var turns turnSource = &localTurns{e: e, keys: s.keys.keys}
	if fair {
		turns = &fairTurns{e: e, f: f, ctx: ctx, keys: s.keys.keys, id: e.waiterIDs.get()}
	}
	w, err := turns.join(ctx)
	if err != nil {
		return nil, err
	}
	w.SetRequest(s.ident.ID)
	defer w.Leave()
	won := false
	defer func() { turns.leave(won) }()
	var (
		current *backend.Record
		delayed *backend.Record
		lastErr error
	)
	// ended answers the end of the wait (waitCtx is done).
	ended := func() (*lockv1.AcquireResponse, error) {
		select {
		case <-e.done:
			return nil, newErr(ErrUnavailable, "acquire: the server is shutting down")
		default:
		}
		if ctx.Err() != nil {
			return nil, ctxErr(ctx, "acquire")
		}
		if lastErr != nil {
			return nil, lastErr
		}
		w.Leave() // so that waiters counts the others only
		return e.notAcquired(current, delayed), nil
	}

	// Follow the keys once queued and before anything here tries the
	// backend (the recheck, the loop's first try): then no wake-up is
	// missed. follow returns once the feed carries every later change of
	// the keys, so a release that committed before that is found by the
	// first try after it, and one after it wakes us. That holds on every
	// path: for localTurns and fairTurns alike the first try (and the
	// recheck) comes after this line; a head that waits for the release of
	// the lock the waiter before it won (HeldUntil) was following the key
	// before that waiter won, so that release's event is carried; and when
	// the feed is down follow returns at once, and the resync, which
	// follows every key counted, wakes every waiter once it is applied.
	// On a Follow feed an Acquire that wins at once returned above (the
	// newcomer's try), and followed nothing.
	unfollow, err := e.follow(waitCtx, s.keys.keys, nil)
	if err != nil {
		return ended()
	}
	defer unfollow()

	// A repeat whose lease is held must not wait behind the waiters that
	// wait for that very lease: ask, taking nothing, once queued. When the
	// key was free, the request's first attempt may still be on its way to
	// the backend (here or on another server) and land behind this waiter:
	// then every acquisition of the key wakes it to ask again (waitq's
	// Repeats), until the key is seen held under another request.
	rechecking := busy && s.ident.ID != ""
	if rechecking {
		w.SetRecheck(true) // before asking: an acquisition seen meanwhile still wakes it
		resp, keep, err := e.recheck(waitCtx, s)
		if resp != nil || err != nil {
			return resp, err
		}
		if !keep {
			rechecking = false
			w.SetRecheck(false)
		}
	}

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	retry := backoff.New(minRetry, maxRetry)
	for {
		select {
		case <-w.Wake():
		case <-timer.C:
		case <-waitCtx.Done():
			return ended()
		}
		// Only the head tries. Only the head is woken or arms the timer, and
		// a head stays head until it leaves; the check keeps that invariant
		// local to this loop.
		if !w.IsHead() {
			if rechecking {
				resp, keep, err := e.recheck(waitCtx, s)
				if resp != nil || err != nil {
					return resp, err
				}
				if !keep {
					rechecking = false
					w.SetRecheck(false)
				}
			}
			continue
		}
		// The waiter before us won the lock and its release has not been
		// seen: trying now would fail. Wait for the release, or for that
		// lock's expiry (in case its expiry event is lost).
		if until, held := w.HeldUntil(); held {
			if d := time.Until(until) + e.Info().TTLGranularity; d > 0 {
				timer.Reset(d)
				continue
			}
		}
		next, id, err := turns.ready(waitCtx)
		switch next {
		case stepAgain:
			timer.Reset(0) // the select above also reports the wait's end
			continue
		case stepBackoff:
			lastErr = err
			timer.Reset(retry.Next())
			continue
		}
		a, err := e.tryAs(waitCtx, s, id, false)
		if waitCtx.Err() != nil {
			turns.outlived()
			continue // the wait ended during the try: the select above says how
		}
		if err == nil && !a.acquired {
			current, delayed = nil, nil
		}
		switch {
		case err != nil && !errors.Is(err, ErrUnavailable):
			return nil, err
		case err != nil:
			// The backend is down or restarting: a resync wakes us, and so
			// does this backoff, in case the outage never broke the watch.
			lastErr = err
			turns.failed()
			e.log.Debug("waiting acquire: backend call failed", "keys", s.keys.keys, "err", err)
			timer.Reset(retry.Next())
		case a.acquired:
			won = true
			if s.shape.kind != backend.KindMutex {
				// The next waiter may fit beside this grant: leaving makes
				// it the head, and it tries at once.
				return e.acquired(a), nil
			}
			// The lease lasts at most ttl from now: the backend started it
			// after this call began.
			w.Won(a.fences, a.lease.GetOwnerToken(), time.Now().Add(s.ttl))
			return e.acquired(a), nil
		case a.delayed != nil:
			// Free, but in its lock-delay: wait through it. Nothing
			// announces its end, so the timer does.
			lastErr = nil
			delayed = a.delayed
			retry.Reset()
			timer.Reset(max(a.delayed.DelayRemaining+e.Info().TTLGranularity, time.Millisecond))
		case a.current == nil:
			// Not ours, and no holder to wait for: a lease that came back
			// too late to be used (and was given back), a holder the
			// backend does not know, or, on a fair backend, a free lock
			// that is another waiter's turn.
			lastErr = nil
			if turns.missed() == stepAgain {
				timer.Reset(0)
			} else {
				timer.Reset(retry.Next())
			}
		default:
			lastErr = nil
			// Wake at the holder's expiry on our monotonic clock, in case
			// the expiry event is lost. Extensions push it on: the next try
			// learns the new remaining time.
			d := a.current.Remaining + e.Info().TTLGranularity
			if current != nil && current.FencingToken == a.current.FencingToken && d < retry.Peek() {
				// The same holder, still there at its expected expiry: the
				// backend expires late. Back off instead of retrying at
				// once, so a lagging backend is never polled in a loop.
				d = retry.Next()
			} else {
				retry.Reset()
			}
			current = a.current
			timer.Reset(max(d, time.Millisecond))
		}
	}
}

// recheck asks whether s's lease is already its request's (a repeat's),
// taking nothing: it answers that lease, or whether the request's first
// attempt may still land (keep: the key was free or the answer unknown).
// An error is the caller's to return; one from a wait that ended is not
// (the wait loop reports that end).
func (e *Engine) recheck(waitCtx context.Context, s *acquireSpec) (resp *lockv1.AcquireResponse, keep bool, err error) {
	a, err := e.tryAs(waitCtx, s, "", true)
	var fatal error
	if err != nil && waitCtx.Err() == nil && !errors.Is(err, ErrUnavailable) {
		fatal = err
	}
	switch {
	case fatal != nil:
		return nil, false, fatal
	case err == nil && a.acquired:
		return e.acquired(a), false, nil
	default:
		// The wait's end is the loop's to report; an unavailable backend
		// is asked again at the next acquisition.
		return nil, err != nil || a.current == nil, fatal
	}
}

// localTurns: this server's FIFO is the order; its head tries at once, as
// nobody in particular.
type localTurns struct {
	e    *Engine
	keys []string
}

func (t *localTurns) join(context.Context) (*waitq.Waiter, error) {
	w, err := t.e.q.JoinSet(t.keys)
	if err != nil {
		return nil, newErr(ErrResourceExhausted, "wait: %v", err)
	}
	return w, nil
}

func (*localTurns) ready(context.Context) (step, string, error) { return stepTry, "", nil }
func (*localTurns) failed()                                     {}
func (*localTurns) missed() step                                { return stepBackoff }
func (*localTurns) leave(bool)                                  {}
func (*localTurns) outlived()                                   {}

// fair returns the backend's queue when it promises order across servers.
func (e *Engine) fair() (backend.FairBackend, bool) {
	if !e.Info().Fair {
		return nil, false
	}
	f, ok := e.b.(backend.FairBackend)
	return f, ok
}

var enqSeed = maphash.MakeSeed()

// fairTurns: the store keeps the order, across all servers. Every waiter has
// an entry in the store's queue for each of its keys (in the store's order),
// and the backend's Acquire lets only the head of those queues win, and a
// newcomer only when they are empty. Each waiter also joins this server's
// queues, in the same order (enqMu), so the store's head among this
// server's waiters is always the local head: only the local head asks the
// store for its turn, and the others sleep in this server's queues. A set's
// entries go into the store's queues in one step (EnqueueSet), so a set
// stands in the same place, relative to every other waiter, in each of
// them.
//
// The head learns its turn from the backend (WaitTurn, woken by the store
// when the entry before it goes), then tries; while the lock is held it is
// woken as every waiter is (release and expiry events, the holder's expiry
// timer). A waiter that gives up, or whose caller goes away, removes its
// entry at once.
type fairTurns struct {
	e    *Engine
	f    backend.FairBackend
	ctx  context.Context // the caller's: bounds the store calls (detached)
	keys []string
	id   string // the waiter's entry in the store's queues (e.waiterIDs)
	// dropped: the id must not be reused (waiterIDs): a store call for it
	// failed, or a try of it may still be on its way.
	dropped bool

	queued bool // the entry is in the store's queue (as far as we know)
	atHead bool // the entry is the head of the store's queue
	// guessed: the first try is made without asking for the turn. A new
	// local head tries at once: the backend's Acquire checks the turn
	// anyway, and on a handoff it usually is ours, so asking first would put
	// a read on every handoff's path. Only when the try finds the lock free
	// but not ours does the head wait for its turn.
	guessed bool
	// verified: the last try was made after the store said it was our turn.
	verified bool
}

// join puts the waiter in the store's queues and then in this server's, in
// one step of the enqueue locks (so both orders agree). The store first: a
// waiter that Inspect counts is in the store's queue, so a caller that saw
// it counted and then queues elsewhere stands behind it.
func (t *fairTurns) join(ctx context.Context) (*waitq.Waiter, error) {
	unlock := t.e.lockEnqueue(t.keys)
	defer unlock()
	if err := t.e.enqueue(ctx, t.f, t.keys, t.id); err != nil {
		t.dropped = true
		// Fail now rather than queue again later: a later entry would sit
		// behind this server's later waiters, which wait for this one. The
		// outcome is unknown (the store may have queued the entry and the
		// answer been lost), so take the entry back: left there, it would
		// block the key for as long as the store keeps it. Dequeue of an
		// absent entry is a no-op.
		t.leave(false)
		return nil, err
	}
	w, err := t.e.q.JoinSet(t.keys)
	if err != nil {
		t.leave(false) // this server takes no more waiters: the store's entry goes too
		return nil, newErr(ErrResourceExhausted, "wait: %v", err)
	}
	t.queued, t.guessed = true, true
	return w, nil
}

func (t *fairTurns) ready(waitCtx context.Context) (step, string, error) {
	if !t.queued {
		// An entry is gone (the plugin restarted, or its session
		// lapsed): queue again, at the tail. A set takes its other
		// entries out first: put back beside their old places they would
		// keep those, and the set would not stand at one place in all of
		// its queues.
		if len(t.keys) > 1 {
			t.dequeue()
		}
		if err := t.e.enqueue(t.ctx, t.f, t.keys, t.id); err != nil {
			t.dropped = true
			return stepBackoff, "", err
		}
		t.queued, t.atHead = true, false
	}
	t.verified = false
	switch {
	case t.atHead:
	case t.guessed:
		t.atHead, t.guessed = true, false
	default:
		t.verified = true
		// The head of every queue: a waiter only moves up, so once at the
		// head of one queue it stays there while it waits for the next.
		for _, key := range t.keys {
			ok, err := t.e.waitTurn(waitCtx, t.f, key, t.id)
			switch {
			case waitCtx.Err() != nil:
				return stepAgain, "", nil //nolint:nilerr // the wait ended: the loop reports that, not WaitTurn's cancellation
			case err != nil:
				return stepBackoff, "", backendErr(t.ctx, "acquire: wait for turn", err)
			case !ok:
				t.queued = false
				return stepAgain, "", nil
			}
		}
		t.atHead = true
	}
	return stepTry, t.id, nil
}

func (t *fairTurns) failed() { t.atHead = false }

func (t *fairTurns) missed() step {
	t.atHead = false
	if !t.verified {
		return stepAgain // not our turn yet: wait for it
	}
	// Our turn, and still not ours: the entry went, or the lease came
	// back too late (and took the entry with it). Ask again, after a while.
	return stepBackoff
}

// leave removes the entry from the store's queue unless the winning Acquire
// took it. It runs before the waiter leaves this server's queue, so the next
// local head finds the entry gone. The waiter's id goes back for reuse when
// its entries are surely gone.
func (t *fairTurns) leave(won bool) {
	if !won {
		t.dequeue()
	}
	if !t.dropped {
		t.e.waiterIDs.put(t.id)
	}
}

func (t *fairTurns) outlived() { t.dropped = true }

// dequeue removes the waiter's entries from the store's queues.
func (t *fairTurns) dequeue() {
	callCtx, cancel := t.e.detached(t.ctx)
	defer cancel()
	for _, key := range t.keys {
		if err := t.f.Dequeue(callCtx, key, t.id); err != nil {
			t.dropped = true
			t.e.log.Warn("could not leave the fair queue; the backend deletes the entry when it can, or it goes with the backend's session", "key", key, "err", err)
		}
	}
}

// lockEnqueue takes the enqueue locks of keys (by key hash, in stripe
// order: two sets that share stripes take them in one order) and returns
// their unlock.
func (e *Engine) lockEnqueue(keys []string) (unlock func()) {
	stripes := make([]int, 0, len(keys))
	for _, k := range keys {
		stripes = append(stripes, int(maphash.String(enqSeed, k)%uint64(len(e.enqMu))))
	}
	slices.Sort(stripes)
	stripes = slices.Compact(stripes)
	for _, i := range stripes {
		e.enqMu[i].Lock()
	}
	return func() {
		for _, i := range stripes {
			e.enqMu[i].Unlock()
		}
	}
}

func (e *Engine) enqueue(ctx context.Context, f backend.FairBackend, keys []string, id string) error {
	callCtx, cancel := e.detached(ctx)
	defer cancel()
	var err error
	if len(keys) == 1 {
		err = f.Enqueue(callCtx, keys[0], id)
	} else if fs, ok := f.(backend.FairSetBackend); ok {
		err = fs.EnqueueSet(callCtx, keys, id)
	} else {
		return newErr(ErrUnimplemented, "acquire: the backend keeps no fair queue for sets of keys")
	}
	if err != nil {
		return backendErr(ctx, "acquire: enqueue", err)
	}
	return nil
}

// waitTurn asks for the turn until waitCtx ends. The call carries no
// deadline (it is cancelled instead), so the end of the wait always reads as
// the end of the wait here, never as a backend's timeout.
func (e *Engine) waitTurn(waitCtx context.Context, f backend.FairBackend, key, id string) (bool, error) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(waitCtx))
	defer cancel()
	stop := context.AfterFunc(waitCtx, cancel)
	defer stop()
	return f.WaitTurn(ctx, key, id)
}
