package holdfast

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/proto/hlc"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// Guard is a held lease. The client's watchdog renews it at about a third of
// its TTL until Unlock, the loss of the lease, or Client.Close, together
// with the client's other guards that are due about then (one ExtendBatch
// for all of them: see renewer.go), each with its own outcome.
//
// The guard measures its lease on the local monotonic clock, conservatively:
// the lease ends TTL after the moment the last successful renewal (or the
// acquire) was sent, because the server may have started counting any time
// after that moment, minus the client's expiry margin (WithExpiryMargin,
// default TTL/100 + 20ms) for a timer that fires late or a clock that runs
// slow against the store's. When no renewal has succeeded by then, or when the
// server answers that the owner token no longer holds, the guard is
// poisoned: Context() is cancelled with a *LeaseLostError cause
// (errors.Is(cause, ErrLeaseLost)), Done() is closed, FencingToken, Extend and
// Unlock return that error. Poisoning is driven by a timer, not by the
// renewal RPC, so a renewal that hangs cannot keep a guard alive.
// FencingToken, Err and Extend also read the clock themselves, so they report
// the loss at once even if this process was paused past the expiry and the
// timer has not run yet.
//
// A Guard is safe for concurrent use.
type Guard struct {
	c       *Client
	key     string   // the (first) key
	keys    []string // every key of a multi-key lease; nil for one key
	fences  []uint64 // the fencing token of each of keys
	owner   string   // the owner token; never leaves the SDK
	holder  string
	fencing uint64 // of key
	stamp   hlc.Timestamp
	grant   grant // what the lease holds of its key: kind, limit, permits, mode

	ctx    context.Context
	cancel context.CancelCauseFunc

	// sem serialises the RPCs on this lease (renewals, Extend, Release), so
	// that the local expiry always follows the server's order of events.
	sem chan struct{}
	// unlockSem serialises Unlock and Close.
	unlockSem chan struct{}

	// ren is the guard's place in the client's renewer (under its mutex).
	ren renewal

	mu        sync.Mutex
	ttl       time.Duration
	renewals  int
	expiry    time.Time   // local, monotonic: send time of the last success + its TTL - margin
	lastSent  time.Time   // send time of the last successful acquire/renewal
	lossTimer *time.Timer // poisons at expiry, independently of any RPC
	lastErr   error       // last renewal error since the last success
	err       error       // nil while held; *LeaseLostError or ErrReleased after
	value     string      // an election leadership's value (Proclaim replaces it)
}

func newGuard(c *Client, holder string, lease *lockv1.Lease, gr grant, sent time.Time, ttl time.Duration) *Guard {
	g := &Guard{
		c:         c,
		grant:     gr,
		key:       lease.GetKey(),
		owner:     lease.GetOwnerToken(),
		holder:    holder,
		fencing:   lease.GetFencingToken(),
		stamp:     hlc.FromProto(lease.GetStamp()),
		sem:       make(chan struct{}, 1),
		unlockSem: make(chan struct{}, 1),
		ttl:       ttl,
		expiry:    c.localExpiry(sent, ttl),
		lastSent:  sent,
		value:     lease.GetValue(),
	}
	for _, k := range lease.GetKeys() {
		g.keys = append(g.keys, k.GetKey())
		g.fences = append(g.fences, k.GetFencingToken())
	}
	if len(g.keys) > 0 {
		g.key, g.fencing = g.keys[0], g.fences[0]
	}
	return g
}

// extendRequest is an Extend of the guard's lease for ttl.
func (g *Guard) extendRequest(ttl time.Duration, rid string) *lockv1.ExtendRequest {
	req := &lockv1.ExtendRequest{OwnerToken: g.owner, Ttl: durationpb.New(ttl), ClientStamp: g.c.stamp(), RequestId: rid}
	if g.keys == nil {
		req.Key = g.key
	} else {
		req.Keys = g.keys
	}
	return req
}

// releaseRequest is a Release of the guard's lease.
func (g *Guard) releaseRequest(rid string) *lockv1.ReleaseRequest {
	req := &lockv1.ReleaseRequest{OwnerToken: g.owner, ClientStamp: g.c.stamp(), RequestId: rid}
	if g.keys == nil {
		req.Key = g.key
	} else {
		req.Keys = g.keys
	}
	return req
}

// localExpiry is when a lease of ttl whose acquire or renewal was sent at
// sent ends on this client's clock: sent + ttl - the expiry margin.
func (c *Client) localExpiry(sent time.Time, ttl time.Duration) time.Time {
	return sent.Add(ttl - c.opts.margin.For(ttl))
}

// confirm renews a lease whose Acquire answer came late (after a long
// server-side wait) before the guard is handed out. The lease started on
// the server somewhere between sent and now; counting from sent, little or
// none of it may be left, so one Extend sent now establishes a fresh local
// expiry. ok=false with a nil error means the lease was lost before use.
func (g *Guard) confirm(ctx context.Context, sent time.Time) (ok bool, err error) {
	if time.Since(sent) < g.ttl/3 {
		return true, nil
	}
	// Bounded by the lease: it started on the server by now at the latest,
	// so a renewal that comes back after now+TTL is of no use.
	now := time.Now()
	ctx, cancel := context.WithDeadline(ctx, earliest(g.c.localExpiry(now, g.ttl), now.Add(g.c.opts.requestTimeout)))
	defer cancel()
	resp, err := g.c.rpc.Extend(ctx, g.extendRequest(g.ttl, newRequestID()))
	if err != nil {
		if time.Now().Before(g.expiry) {
			return true, nil // still valid on the safe clock; the watchdog renews at once
		}
		return false, mapError(ctx, "Extend", err)
	}
	g.c.merge(resp.GetServerStamp(), resp.GetLease().GetStamp())
	if !resp.GetExtended() {
		return false, nil
	}
	g.lastSent, g.expiry = now, g.c.localExpiry(now, g.ttl)
	return true, nil
}

// start arms the loss timer and hands the guard to the client's watchdog.
// base supplies the values (not the cancellation) of the guard's context.
func (g *Guard) start(base context.Context) {
	g.ctx, g.cancel = context.WithCancelCause(context.WithValue(context.WithoutCancel(base), guardKey{}, g))
	g.mu.Lock()
	g.lossTimer = time.AfterFunc(time.Until(g.expiry), g.onLossTimer)
	g.mu.Unlock()
	// The lost or released event goes out once the guard's context ends,
	// whichever call or timer ended it, from a goroutine of its own (the
	// listener may be slow; the caller that ended the guard is not). Close
	// waits for those goroutines, so none is added once it has begun (a
	// guard taken as the client closes is given straight back, unreported).
	if g.c.addEventWaiter() {
		context.AfterFunc(g.ctx, func() {
			defer g.c.events.Done()
			g.c.emitEnd(g)
		})
	}
	g.c.renewer.add(g) // false once the client closes: the caller gives the lease back
}

type guardKey struct{}

// GuardFromContext returns the guard whose Context (or a context derived
// from it, such as the one WithLock passes to its function) ctx is, so that
// code running under a lock can reach its fencing token.
func GuardFromContext(ctx context.Context) (*Guard, bool) {
	g, ok := ctx.Value(guardKey{}).(*Guard)
	return g, ok
}

// Key is the locked key (the first key of a multi-key lease).
func (g *Guard) Key() string { return g.key }

// Keys are every locked key, in the order given to Client.Lock.
func (g *Guard) Keys() []string {
	if g.keys == nil {
		return []string{g.key}
	}
	return slices.Clone(g.keys)
}

// Kind is what the key is: KindMutex (Client.Lock), KindSemaphore or
// KindRWLock.
func (g *Guard) Kind() Kind { return g.grant.kind }

// Limit is the key's limit: a semaphore's, 1 for a mutex, the server's
// reader capacity for a read-write lock (BackendInfo.RWLockReaders).
func (g *Guard) Limit() int { return g.grant.limit }

// Permits is the share of the key's limit the lease holds: a semaphore
// grant's permits, 1 for a mutex or a reader, the whole limit for a
// writer.
func (g *Guard) Permits() int { return g.grant.permits }

// Mode is ModeShared for a read-write lock's reader, ModeExclusive for
// everything else.
func (g *Guard) Mode() Mode { return g.grant.mode }

// Holder is the holder label the lease was taken with.
func (g *Guard) Holder() string { return g.holder }

// Stamp is the HLC stamp of the acquisition; stamps strictly increase along
// a key's chain of holders.
func (g *Guard) Stamp() hlc.Timestamp { return g.stamp }

// TTL is the lease length the guard currently renews with.
func (g *Guard) TTL() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ttl
}

// Remaining is the time left to the guard's local expiry (see Guard), as
// the watchdog counts it: 0 once the guard no longer holds.
func (g *Guard) Remaining() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.checkLocked() != nil {
		return 0
	}
	return max(time.Until(g.expiry), 0)
}

// Renewals is the number of successful renewals of the lease so far (by
// the watchdog or Extend).
func (g *Guard) Renewals() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.renewals
}

// FencingToken returns the lease's fencing token, or the loss (or
// ErrReleased) once the guard no longer holds. Pass the token to the
// resource you protect and have it reject tokens older than the newest it
// has seen (see Fence and ValidateWrite). A multi-key lease has a token per
// key: use FencingTokenFor.
func (g *Guard) FencingToken() (uint64, error) {
	if len(g.keys) > 1 {
		return 0, invalidArgument("fencing token: the lease holds %d keys, each with its own fencing token: use FencingTokenFor(key)", len(g.keys))
	}
	return g.FencingTokenFor(g.key)
}

// FencingTokenFor returns the fencing token of key, one of the guard's
// keys, or the loss (or ErrReleased) once the guard no longer holds.
func (g *Guard) FencingTokenFor(key string) (uint64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.checkLocked(); err != nil {
		return 0, err
	}
	if key == g.key {
		return g.fencing, nil
	}
	if i := slices.Index(g.keys, key); i >= 0 {
		return g.fences[i], nil
	}
	return 0, invalidArgument("fencing token: %q is not a key of this lease (%q)", key, g.Keys())
}

// Context is cancelled when the guard stops holding: with a *LeaseLostError
// cause when the lease is lost, with ErrReleased after Unlock. It carries the
// values (not the cancellation) of the context given to Lock/TryLock. Run
// the protected work under it.
func (g *Guard) Context() context.Context { return g.ctx }

// Done is closed when the guard stops holding (lost or released).
func (g *Guard) Done() <-chan struct{} { return g.ctx.Done() }

// Err is nil while the guard holds; afterwards the *LeaseLostError
// (errors.Is(err, ErrLeaseLost)) or ErrReleased.
func (g *Guard) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.checkLocked()
}

// checkLocked returns the guard's terminal error, first poisoning it if the
// local expiry has passed (the loss timer may not have run yet).
func (g *Guard) checkLocked() error {
	if g.err == nil && !time.Now().Before(g.expiry) {
		g.poisonLocked(LossExpired)
	}
	return g.err
}

func (g *Guard) lossError(reason LossReason) *LeaseLostError {
	e := &LeaseLostError{Key: g.key, Keys: g.keys, FencingToken: g.fencing, Reason: reason}
	if reason == LossExpired {
		e.LastErr = g.lastErr
	}
	return e
}

// poisonLocked ends the guard with a loss. Idempotent: the first end wins.
func (g *Guard) poisonLocked(reason LossReason) {
	if g.err != nil {
		return
	}
	e := g.lossError(reason)
	g.err = e
	if g.lossTimer != nil {
		g.lossTimer.Stop()
	}
	g.cancel(e)
}

// onLossTimer runs when the local expiry is reached. A renewal may have
// moved the expiry between the timer firing and this taking the lock; then
// it re-arms instead.
func (g *Guard) onLossTimer() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return
	}
	if left := time.Until(g.expiry); left > 0 {
		g.lossTimer.Reset(left)
		return
	}
	g.poisonLocked(LossExpired)
}

// renewed records a successful renewal sent at sent with ttl. It reports
// false when the guard ended meanwhile (the answer came too late: the loss
// stands, since the work may already have stopped).
func (g *Guard) renewed(sent time.Time, ttl time.Duration) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return false
	}
	if !time.Now().Before(g.expiry) {
		// The answer arrived after the local expiry: the guard was already
		// lost on our clock, whether or not the timer has run yet.
		g.poisonLocked(LossExpired)
		return false
	}
	g.ttl = ttl
	g.lastSent = sent
	g.expiry = g.c.localExpiry(sent, ttl)
	g.lastErr = nil
	g.renewals++
	g.lossTimer.Reset(time.Until(g.expiry))
	return true
}

// acquireSem takes the lease-RPC slot, giving up when ctx ends or the guard
// stops holding.
func (g *Guard) acquireSem(ctx context.Context) error {
	select {
	case g.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-g.ctx.Done():
		return g.Err()
	}
}

func (g *Guard) releaseSem() { <-g.sem }

// extendResult is the outcome of one Extend RPC.
type extendResult int

const (
	extendOK extendResult = iota
	extendRejected
	extendFailed
)

// extendRPC sends one Extend (request id rid: the same on every retry of
// one renewal) and applies its answer to the guard. A failed RPC returns
// the RPC's own error (callers map it).
func (g *Guard) extendRPC(ctx context.Context, ttl time.Duration, rid string) (extendResult, error) {
	sent := time.Now()
	resp, err := g.c.rpc.Extend(ctx, g.extendRequest(ttl, rid))
	if err != nil {
		return extendFailed, err
	}
	g.c.merge(resp.GetServerStamp(), resp.GetLease().GetStamp())
	if !resp.GetExtended() {
		g.mu.Lock()
		g.poisonLocked(LossRejected)
		g.mu.Unlock()
		return extendRejected, g.Err()
	}
	if !g.renewed(sent, ttl) {
		return extendRejected, g.Err()
	}
	g.c.emit(LeaseEvent{Type: LeaseRenewed, Key: g.key, Keys: g.keys, FencingToken: g.fencing, TTL: ttl, Renewals: g.Renewals(), Latency: time.Since(sent)})
	return extendOK, nil
}

// Extend renews the lease now for ttl (0 keeps the current TTL) and makes
// ttl the length the watchdog renews with from then on. `unavailable`
// answers and transport failures are retried within the retry budget and
// the lease's local expiry; the guard holds until that expiry whatever
// Extend returns (the watchdog keeps trying). A server answer that the token
// no longer holds poisons it and returns the *LeaseLostError.
func (g *Guard) Extend(ctx context.Context, ttl time.Duration) error {
	if ttl < 0 {
		return invalidArgument("ttl: %s is negative (0 keeps the current TTL)", ttl)
	}
	if ttl != 0 {
		if err := checkTTL("ttl", ttl, g.c.opts.margin); err != nil {
			return err
		}
	}
	if err := g.Err(); err != nil {
		return err
	}
	if err := g.acquireSem(ctx); err != nil {
		return err
	}
	defer g.releaseSem()
	g.mu.Lock()
	err := g.checkLocked()
	expiry := g.expiry
	if ttl == 0 {
		ttl = g.ttl
	}
	g.mu.Unlock()
	if err != nil {
		return err
	}
	var res extendResult
	var answer error // the server's answer when it was not a failure
	rid := newRequestID()
	err = g.c.retrying(ctx, "Extend", expiry, func(actx context.Context) error {
		var err error
		res, err = g.extendRPC(actx, ttl, rid)
		if res != extendFailed {
			answer = err
			return nil
		}
		return err
	})
	switch {
	case err != nil:
		if lost := g.Err(); lost != nil {
			return lost // the local expiry passed meanwhile
		}
		return err
	case res == extendOK:
		g.c.renewer.reschedule(g)
	}
	return answer
}

// stop stops renewing the guard. A renewal of it in flight lets go of it
// (its answer is ignored), so the release that follows goes at once.
func (g *Guard) stop() { g.c.renewer.remove(g) }

// Unlock stops the watchdog and releases the lease. It returns nil only when
// the server confirmed the release. When the lease was already lost, or the
// server answers released=false, it returns the *LeaseLostError
// (errors.Is(err, ErrLeaseLost)) — never a silent success. Transient errors
// are retried with backoff until ctx ends or the lease's local expiry passes
// (after which the server frees the key by itself and Unlock reports the
// loss). Unlock after a successful Unlock returns nil; after a failed one
// (for example ctx ended) it may be called again.
func (g *Guard) Unlock(ctx context.Context) error {
	select {
	case g.unlockSem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-g.unlockSem }()
	g.stop()
	g.mu.Lock()
	err := g.checkLocked()
	g.mu.Unlock()
	switch {
	case errors.Is(err, ErrReleased):
		return nil
	case err != nil:
		g.releaseAfterLoss(ctx, err)
		return err
	}
	return g.release(ctx)
}

// releaseAfterLoss tidies up after a loss the server did not confirm (local
// expiry, client closed): the lease may still be held on the server, and
// releasing it frees the key for others before its TTL. One attempt, bounded
// by ctx and the lease's TTL; compare-on-release makes it harmless if a
// successor holds the key.
func (g *Guard) releaseAfterLoss(ctx context.Context, err error) {
	var lost *LeaseLostError
	if !errors.As(err, &lost) || lost.Reason == LossRejected {
		g.c.untrack(g)
		return
	}
	if g.c.isClosed() {
		return // Close already tried
	}
	actx, cancel := context.WithTimeout(ctx, g.TTL())
	defer cancel()
	_, _ = g.c.rpc.Release(actx, g.releaseRequest(newRequestID()))
	g.c.untrack(g)
}

// release sends Release until the server answers, ctx ends, the retry
// budget runs out or the lease's local expiry passes. The watchdog is
// already stopped.
func (g *Guard) release(ctx context.Context) error {
	if err := g.acquireSem(ctx); err != nil {
		return err
	}
	defer g.releaseSem()
	// inDoubt: an earlier attempt failed in transit and may have reached
	// the server; a later released=false then does not prove a loss. (Every
	// attempt carries one request id: a server whose backend keeps request
	// ids answers a repeat of a release it did true, so this is left for
	// backends that keep none.)
	inDoubt := false
	rid := newRequestID()
	start := time.Now()
	budgetEnd := start.Add(g.c.opts.retryBudget)
	for attempt := 0; ; attempt++ {
		g.mu.Lock()
		err := g.checkLocked()
		expiry := g.expiry
		g.mu.Unlock()
		if err != nil {
			g.c.untrack(g)
			return err
		}
		// A release after the local expiry is moot: the key frees itself.
		actx, cancel := context.WithDeadline(ctx, earliest(expiry, budgetEnd, time.Now().Add(g.c.opts.requestTimeout)))
		resp, rerr := g.c.rpc.Release(actx, g.releaseRequest(rid))
		if rerr == nil {
			cancel()
			g.c.merge(resp.GetServerStamp())
			g.mu.Lock()
			if resp.GetReleased() {
				if g.err == nil {
					g.err = ErrReleased
					g.lossTimer.Stop()
					g.cancel(ErrReleased)
				}
			} else if inDoubt {
				g.poisonLocked(LossReleaseUnconfirmed)
			} else {
				g.poisonLocked(LossRejected)
			}
			err := g.err
			g.mu.Unlock()
			g.c.untrack(g)
			if errors.Is(err, ErrReleased) {
				return nil
			}
			return err
		}
		retry, rerr := attemptError(ctx, actx, "Release", rerr)
		cancel()
		if ctx.Err() != nil {
			return fmt.Errorf("holdfast: release %q: %w", g.key, rerr)
		}
		if !retry {
			return rerr
		}
		inDoubt = true
		g.mu.Lock()
		g.lastErr = rerr
		g.mu.Unlock()
		if !sleep(ctx, g.c.opts.backoff.delay(attempt), earliest(expiry, budgetEnd)) && ctx.Err() == nil && !time.Now().Before(budgetEnd) && time.Now().Before(expiry) {
			// Still ours until the local expiry, but the server stayed out
			// of reach for the whole budget: say so; Unlock may be called
			// again.
			return outOfBudget(rerr, time.Since(start))
		}
	}
}

// closeForClient ends the guard because its Client is closing: release the
// lease if possible, else poison it with LossClientClosed.
func (g *Guard) closeForClient(ctx context.Context) error {
	select {
	case g.unlockSem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-g.unlockSem }()
	g.stop()
	g.mu.Lock()
	err := g.checkLocked()
	g.mu.Unlock()
	if err != nil {
		return nil
	}
	err = g.release(ctx)
	g.mu.Lock()
	g.poisonLocked(LossClientClosed)
	g.mu.Unlock()
	return err
}

// String describes the guard for logs; it never shows the owner token.
func (g *Guard) String() string {
	if g.keys != nil {
		return fmt.Sprintf("holdfast.Guard(%q, fencing tokens %d)", g.keys, g.fences)
	}
	switch g.grant.kind {
	case KindSemaphore:
		return fmt.Sprintf("holdfast.Guard(%q, semaphore, %d of %d permits, fencing token %d)", g.key, g.grant.permits, g.grant.limit, g.fencing)
	case KindRWLock:
		return fmt.Sprintf("holdfast.Guard(%q, rwlock, %s, fencing token %d)", g.key, g.grant.mode, g.fencing)
	case KindElection:
		return fmt.Sprintf("holdfast.Leadership(%q, term %d)", g.key, g.fencing)
	}
	return fmt.Sprintf("holdfast.Guard(%q, fencing token %d)", g.key, g.fencing)
}
