// Package engine is holdfast's lock engine: everything behind the public API
// that does not depend on the wire. It validates requests, keeps the server's
// Hybrid Logical Clock, mints owner tokens, calls the backend, queues waiting
// acquirers per key (package waitq) and wakes them on backend events, and
// fans the backend's events out to API watchers.
//
// The engine speaks the public API's messages (lockv1) but knows nothing of
// Connect: it returns errors wrapping the sentinels in errors.go, which the
// server maps to Connect codes.
//
// # Waiting
//
// Acquire with wait > 0 on a busy key joins the key's FIFO queue on this
// server. Only the head tries the backend. The head is woken by
//
//   - this engine's own successful Release of the key (immediate handoff),
//   - the backend feed's events released/expired for the key (see The
//     backend feed),
//   - a timer set for the holder's expiry (the Remaining the backend
//     reported, plus its TTL granularity) on the engine's monotonic clock,
//     which covers a lost event, and
//   - a resync of the backend feed (after a plugin restart every head is
//     woken, since events may have been missed).
//
// A head that became head because the waiter before it won the lock does
// not try the backend until that lock's release (or its expiry) is seen:
// a handoff costs one backend acquire, and release events of earlier locks
// on the key, which trail the handoff, wake nobody (waitq.Waiter.Won).
//
// There is no fixed-interval polling. No barging: while a key has waiters on
// this server, a new Acquire with wait > 0 queues behind them, and a try-once
// Acquire (wait = 0) answers acquired=false with the current holder (unset
// when the lock is between two waiters) without trying the backend. That
// keeps arrival order within a server; across servers sharing a backend,
// order is only as fair as the backend (BackendInfo.fair).
//
// A fair backend (Info.Fair, backend.FairBackend) also keeps a queue per key
// in the store, shared by every server: then the store's queue, not only
// this server's, says whose turn it is (see fairTurns). Both kinds of
// backend wait in one loop, acquireWaiting.
//
// Semaphores and read-write locks wait the same way, strictly in arrival
// order; a winner on such a key leaves the queue at once, so the next head
// tries beside it (see kinds.go).
//
// A waiter never waits longer than its wait nor past its caller's deadline,
// and it is never told "acquired" for a lease nobody will use: the backend
// call runs detached from the caller's cancellation (so its outcome is
// known) but the caller does not wait for it past its wait or deadline (a
// frozen backend included: see acquireDetached), and a lease won after the
// caller gave up, or whose TTL ran out before the answer came back, is
// released again at once.
//
// # The backend feed
//
// The engine reads the backend's changes on one feed (watch.go), and acts
// on each: a released or expired event wakes the key's head, an acquired
// one wakes rechecking repeats (waitq's Repeats) and is observed by the
// clock, every one is counted (Observer.BackendEvent) and fanned out to the
// API watchers it matches. For a backend.FollowBackend the feed is a
// Follow, and it carries only the keys the engine needs (follow.go): the
// keys of its waiters, which follow from when they are queued until their
// wait ends, and the keys and prefixes of its API watchers (Watch,
// Observe), which follow before they are sent EVENT_TYPE_SYNCED. A key
// nobody needs any more stays followed for a few seconds (followLinger),
// since a hot key's waiters come and go. An Acquire that wins at once,
// and its Release, cross no feed at all: most pairs on a busy server cost
// no event, and the clock observes only the followed keys' acquisitions
// (expiries come for every key: a Follow sends them all, so the metric of
// leases that ran out counts every one). Any other backend, and a plugin that does not
// serve Follow (errors.ErrUnsupported: the next re-established feed tries
// Follow again), is watched on every key, as before Follow.
//
// # Shutdown
//
// Close stops accepting requests, ends waiters and watchers with
// unavailable, and stops the backend feed. It releases no lease: a holder's
// critical section must survive a restart (or a rolling upgrade) of the
// server it happened to talk to, so leases stay held until released by
// their owner or until their TTL runs out. With a shared, durable backend the
// next server carries on; with the memory backend the locks die with its
// process, which is why that backend says it is neither shared nor durable.
package engine

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/core/waitq"
	"github.com/holdfast/holdfast/proto/hlc"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Defaults for Config fields left zero.
const (
	DefaultMaxTTL       = 24 * time.Hour
	DefaultMaxWait      = time.Hour
	DefaultCallTimeout  = 10 * time.Second
	DefaultMaxKeys      = 16
	DefaultMaxLockDelay = time.Minute
)

// NoLockDelay, as Config.MaxLockDelay, switches lock-delay off: every
// Acquire asking for one is refused, whatever the backend keeps.
const NoLockDelay time.Duration = -1

// Config tunes an Engine. The zero value is usable.
type Config struct {
	// Version is the server version reported by GetServerInfo.
	Version string
	// MaxTTL caps lease lengths below the backend's own maximum
	// (0: DefaultMaxTTL).
	MaxTTL time.Duration
	// MaxWait caps Acquire's wait (0: DefaultMaxWait).
	MaxWait time.Duration
	// MaxClockOffset: client stamps further ahead of the server's clock are
	// refused (0: hlc.DefaultMaxOffset; negative: unchecked). Ignored when
	// Clock is set.
	MaxClockOffset time.Duration
	// MaxWaitersPerKey and MaxWaiters bound the wait queues (0: waitq's
	// defaults). Over a bound Acquire answers resource_exhausted.
	MaxWaitersPerKey int
	MaxWaiters       int
	// CallTimeout bounds backend calls the engine makes detached from the
	// caller (0: DefaultCallTimeout).
	CallTimeout time.Duration
	// MaxKeys caps the keys of one multi-key request below the backend's
	// own maximum (0: DefaultMaxKeys).
	MaxKeys int
	// MaxLockDelay caps Acquire's lock_delay below the backend's own
	// maximum (0: DefaultMaxLockDelay; negative, as NoLockDelay: none).
	MaxLockDelay time.Duration
	// Clock is the server's HLC (nil: a new clock on the system time).
	Clock *hlc.Clock
	// Logger receives the engine's logs (nil: discarded).
	Logger *slog.Logger
	// Observer is told of outcomes, for metrics (nil: nobody).
	Observer Observer
	// Batch tunes how concurrent calls are carried to a backend that
	// batches (batch.go).
	Batch BatchConfig
}

// Engine serves the lock API on one backend. It is safe for concurrent use.
type Engine struct {
	b     backend.Backend
	calls *batcher // Acquire, Release and Extend on b, batched when b can
	cfg   Config
	clock *hlc.Clock
	q     *waitq.Queues
	log   *slog.Logger

	infoMu sync.RWMutex
	info   backend.Info

	done      chan struct{}   // closed by Close
	closing   context.Context // cancelled by Close
	cancelAll context.CancelFunc
	enqMu     [64]sync.Mutex // by key hash: a fair waiter joins both queues in one order
	waiterIDs waiterIDs      // a fair waiter's name in the store's queues (waitid.go)
	closeOnce sync.Once
	stopWatch context.CancelFunc
	wg        sync.WaitGroup
	bg        background    // calls that outlive their callers (detach.go)
	firstSync chan struct{} // closed at the first EventSynced

	watchMu  sync.Mutex
	synced   bool
	everSync bool
	subs     subscribers
	deliver  *deliverers // watchers take turns to send (deliver.go)

	// interest is what the backend feed must carry (follow.go); nil when
	// the backend has no Follow, and its Watch carries every key.
	interest *interest
}

// New starts an engine on b: it reads b's Info, starts the one backend feed
// (see the package doc) and returns once it is synced (or fails when ctx ends first). The
// caller keeps ownership of b; Close the engine before closing b.
func New(ctx context.Context, b backend.Backend, cfg Config) (*Engine, error) {
	if cfg.MaxTTL <= 0 {
		cfg.MaxTTL = DefaultMaxTTL
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = DefaultMaxWait
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	if cfg.MaxLockDelay == 0 {
		cfg.MaxLockDelay = DefaultMaxLockDelay
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.Clock == nil {
		cfg.Clock = hlc.NewClock(nil, cfg.MaxClockOffset)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	info, err := b.Info(ctx)
	if err != nil {
		return nil, backendErr(ctx, "backend info", err)
	}
	e := &Engine{
		b:         b,
		cfg:       cfg,
		clock:     cfg.Clock,
		q:         waitq.New(cfg.MaxWaitersPerKey, cfg.MaxWaiters),
		log:       cfg.Logger,
		info:      info,
		done:      make(chan struct{}),
		firstSync: make(chan struct{}),
		subs:      newSubscribers(),
		deliver:   newDeliverers(),
		waiterIDs: newWaiterIDs(),
	}
	if _, ok := b.(backend.FollowBackend); ok {
		e.interest = newInterest()
	}
	e.closing, e.cancelAll = context.WithCancel(context.Background())
	e.calls = newBatcher(e, cfg.Batch)
	watchCtx, stop := context.WithCancel(context.Background())
	e.stopWatch = stop
	e.wg.Add(1)
	go e.watchLoop(watchCtx)
	select {
	case <-e.firstSync:
		return e, nil
	case <-ctx.Done():
		e.Close()
		return nil, newErr(ErrUnavailable, "backend watch did not sync: %v", ctx.Err())
	}
}

// Close stops accepting requests, ends waiters and watchers with
// ErrUnavailable and stops the backend watch. It releases no lease (see the
// package doc). It is safe to call more than once.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() {
		close(e.done)
		e.cancelAll()
		e.stopWatch()
		e.watchMu.Lock()
		for s := range e.subs.all {
			e.endSub(s, newErr(ErrUnavailable, "watch: the server is shutting down"))
		}
		e.watchMu.Unlock()
	})
	e.wg.Wait()
	e.bg.Close()
	return nil
}

// Clock is the server's HLC.
func (e *Engine) Clock() *hlc.Clock { return e.clock }

// Info is the backend's Info as last read (at start and after every resync).
func (e *Engine) Info() backend.Info {
	e.infoMu.RLock()
	defer e.infoMu.RUnlock()
	return e.info
}

// Waiters is the number of callers queued for key on this server.
func (e *Engine) Waiters(key string) int { return e.q.Depth(key) }

func (e *Engine) enter() error {
	select {
	case <-e.done:
		return newErr(ErrUnavailable, "the server is shutting down")
	default:
		return nil
	}
}

// ttlRange is [max(backend MinTTL, 1ms), min(backend MaxTTL, server MaxTTL)].
func (e *Engine) ttlRange() (lo, hi time.Duration) {
	info := e.Info()
	lo, hi = max(info.MinTTL, MinTTL), e.cfg.MaxTTL
	if info.MaxTTL > 0 {
		hi = min(hi, info.MaxTTL)
	}
	return lo, hi
}

// merge passes a client stamp through the HLC.
func (e *Engine) merge(p *lockv1.HlcTimestamp) error {
	remote := hlc.FromProto(p)
	if _, err := e.clock.Update(remote); err != nil {
		if errors.Is(err, hlc.ErrTooFarAhead) {
			ahead := time.Duration(remote.WallTime - time.Now().UnixNano()).Round(time.Millisecond)
			return invalidf("client_stamp: %s ahead of the server's clock exceeds the maximum offset %s",
				fmtDur(ahead), fmtDur(e.clock.MaxOffset()))
		}
		return invalidf("client_stamp: %v", err)
	}
	return nil
}

// stamp is the server_stamp of a response, taken last.
func (e *Engine) stamp() *lockv1.HlcTimestamp { return e.clock.Now().ToProto() }

// detached is a context for a backend call whose outcome the engine must
// learn even when the caller gives up.
func (e *Engine) detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), e.cfg.CallTimeout)
}

// newOwnerToken mints 256 random bits, base64url without padding. A token
// never starts with '-': people paste tokens into command lines
// (`holdfast release KEY TOKEN`), where a leading dash reads as a flag.
// Drawing again costs nothing and keeps more than 255.9 bits of entropy.
func newOwnerToken() string {
	var b [32]byte
	for {
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (it crashes instead)
		if tok := base64.RawURLEncoding.EncodeToString(b[:]); tok[0] != '-' {
			return tok
		}
	}
}

// state is the API's view of a held key (ev set: as a watch event about
// one grant; see setHolders).
func (e *Engine) state(r backend.Record, ev backend.EventType) *lockv1.LockState {
	var m msgs
	return m.state(r, ev, e.q.Depth(r.Key))
}

// state is the API's view of r with waiters queued for its key.
func (m *msgs) state(r backend.Record, ev backend.EventType, waiters int) *lockv1.LockState {
	s := m.states.new()
	s.Key, s.FencingToken, s.Holder = r.Key, r.FencingToken, r.Holder
	s.Stamp, s.Waiters = m.stamp(r.Stamp), uint32(waiters)
	if !r.ExpiresAt.IsZero() {
		s.ExpiresAt = m.time(r.ExpiresAt)
	}
	if r.LockDelay > 0 {
		s.LockDelay = m.duration(r.LockDelay)
	}
	m.setHolders(s, r, ev)
	return s
}

// states is the API's view of a List page's records: state of each, its
// messages cut from a few slices (see arena), and the waiters of every key
// read under one hold of the queues' mutex.
func (e *Engine) states(recs []backend.Record) []*lockv1.LockState {
	keys := make([]string, len(recs))
	for i, r := range recs {
		keys[i] = r.Key
	}
	waiters := e.q.Depths(keys)
	m := pageMsgs(len(recs))
	out := make([]*lockv1.LockState, len(recs))
	for i, r := range recs {
		out[i] = m.state(r, 0, waiters[i])
	}
	return out
}

// delay describes a key in its lock-delay (rec.DelayRemaining > 0).
func delay(rec backend.Record) *lockv1.KeyDelay {
	return &lockv1.KeyDelay{
		Key:       rec.Key,
		Until:     timestamppb.New(time.Now().Add(rec.DelayRemaining)),
		Remaining: durationpb.New(rec.DelayRemaining),
	}
}

// lease is the answer for the locks recs (one per key of ks.keys, in that
// order) taken or renewed under token.
func lease(ks keySet, recs []backend.Record, token string, ttl time.Duration) *lockv1.Lease {
	l := &lockv1.Lease{OwnerToken: token, Ttl: durationpb.New(ttl)}
	var stamp hlc.Timestamp
	var expires time.Time
	for _, r := range recs {
		stamp = hlc.Max(stamp, r.Stamp)
		if !r.ExpiresAt.IsZero() && (expires.IsZero() || r.ExpiresAt.Before(expires)) {
			expires = r.ExpiresAt
		}
		if r.LockDelay > 0 {
			l.LockDelay = durationpb.New(r.LockDelay)
		}
	}
	l.Stamp = stamp.ToProto()
	if !expires.IsZero() {
		l.ExpiresAt = timestamppb.New(expires)
	}
	if !ks.multi {
		l.Key, l.FencingToken = recs[0].Key, recs[0].FencingToken
		setShape(l, recs[0])
		return l
	}
	setShape(l, backend.Record{}) // sets of keys are mutexes
	fence := make(map[string]uint64, len(recs))
	for _, r := range recs {
		fence[r.Key] = r.FencingToken
	}
	l.Keys = make([]*lockv1.LeasedKey, len(ks.asked))
	for i, k := range ks.asked {
		l.Keys[i] = &lockv1.LeasedKey{Key: k, FencingToken: fence[k]}
	}
	return l
}

func fences(recs []backend.Record) []uint64 {
	out := make([]uint64, len(recs))
	for i, r := range recs {
		out[i] = r.FencingToken
	}
	return out
}

// acquireSpec is a validated Acquire.
type acquireSpec struct {
	keys      keySet
	ttl       time.Duration
	wait      time.Duration
	holder    string
	lockDelay time.Duration
	shape     shape
	value     string // an election's
	rid       requestID
	// ident is what the backend keeps for the request id (zero without
	// one, or when the backend keeps none).
	ident backend.Request
}

// ident is the backend's identity of a request with id rid and arguments
// fp, when the backend keeps request identities.
func (e *Engine) ident(rid requestID, fp *fingerprint) backend.Request {
	if !rid.set() || !e.Info().RequestIDs {
		return backend.Request{}
	}
	return rid.identity(*fp)
}

func (e *Engine) acquireSpec(req *lockv1.AcquireRequest) (*acquireSpec, error) {
	ks, err := e.keysOf(req.GetKey(), claimKeys(req.GetClaims()), "claims")
	if err != nil {
		return nil, err
	}
	lo, hi := e.ttlRange()
	s := &acquireSpec{keys: ks, holder: req.GetHolder(), value: req.GetValue()}
	if s.ttl, err = checkTTL(req.GetTtl(), lo, hi); err != nil {
		return nil, err
	}
	if s.wait, err = checkWait(req.GetWait(), e.cfg.MaxWait); err != nil {
		return nil, err
	}
	if err := checkText("holder", req.GetHolder(), MaxHolderBytes); err != nil {
		return nil, err
	}
	// The kind first: a lock_delay on a semaphore is refused for what it
	// is, whether or not the backend keeps lock-delays.
	if s.shape, err = e.checkShape(req, ks); err != nil {
		return nil, err
	}
	if s.lockDelay, err = e.checkLockDelay(req.GetLockDelay()); err != nil {
		return nil, err
	}
	if s.rid, err = checkRequestID(req.GetRequestId()); err != nil {
		return nil, err
	}
	if !s.rid.set() {
		return s, nil // no identity: the fingerprint would be thrown away
	}
	fp := newFingerprint("acquire").strs(ks.keys).flag(ks.multi).dur(s.ttl).str(s.holder).dur(s.lockDelay)
	if s.shape != mutex {
		// A mutex's fingerprint is what it was before kinds, so a repeat
		// sent through a server of either version matches.
		fp.num(int64(s.shape.kind)).num(int64(s.shape.limit)).num(int64(s.shape.permits))
	}
	if s.shape.kind == backend.KindElection {
		fp.str(s.value)
	}
	s.ident = e.ident(s.rid, fp)
	return s, nil
}

// Acquire takes the lease on req.Key (or on every key of req.Claims),
// queueing for at most req.Wait.
func (e *Engine) Acquire(ctx context.Context, req *lockv1.AcquireRequest) (*lockv1.AcquireResponse, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	s, err := e.acquireSpec(req)
	if err != nil {
		return nil, err
	}
	if err := e.merge(req.GetClientStamp()); err != nil {
		return nil, err
	}
	start := time.Now()
	var resp *lockv1.AcquireResponse
	if s.wait == 0 {
		resp, err = e.tryOnce(ctx, s)
	} else {
		resp, err = e.acquireWaiting(ctx, s)
	}
	if err == nil {
		e.cfg.Observer.AcquireDone(resp.GetAcquired(), s.wait > 0, time.Since(start))
		if resp.GetAcquired() {
			e.cfg.Observer.Granted(s.shape.kind, resp.GetLease().GetMode())
		}
		if resp.GetAcquired() && s.keys.multi {
			e.cfg.Observer.SetAcquired(len(s.keys.keys))
		}
		if resp.GetDelayed() != nil {
			e.cfg.Observer.LockDelayed()
		}
	}
	return resp, err
}

// attempt is the outcome of one backend Acquire.
type attempt struct {
	acquired bool
	lease    *lockv1.Lease
	fences   []uint64        // per key of the set, when acquired
	current  *backend.Record // a holder, when not acquired and known
	delayed  *backend.Record // a key in its lock-delay, when not acquired
	// late, when set, says that the backend granted a lease too late to be
	// used (at or past its TTL), which was given back: the unavailable
	// error a try-once Acquire answers. A waiter just tries again.
	late error
}

// try makes one backend Acquire for a caller still interested in ctx.
func (e *Engine) try(ctx context.Context, s *acquireSpec) (attempt, error) {
	return e.tryAs(ctx, s, "", false)
}

// tryAs is try for a fair backend's queued waiter (waiterID set: acquire
// only as the head of the store's queues) or for a newcomer (empty: only
// when nobody is queued). replayOnly asks only whether the lease is already
// this request's (a repeat), never taking a free key: a repeat that finds
// others queued must not barge, but its own lease must not wait behind
// them either.
func (e *Engine) tryAs(ctx context.Context, s *acquireSpec, waiterID string, replayOnly bool) (attempt, error) {
	token := newOwnerToken()
	start := time.Now()
	out, err := e.acquireDetached(ctx, s, token, waiterID, replayOnly)
	if err != nil {
		if errors.Is(err, backend.ErrRequestConflict) && ctx.Err() == nil {
			return attempt{}, conflictErr("acquire", "key or claims", "ttl", "holder", "lock_delay", "kind", "limit", "permits")
		}
		return attempt{}, backendErr(ctx, "acquire", err)
	}
	// The backend's stamps are trusted: they order the keys' chains of
	// holders.
	for _, r := range out.records {
		e.clock.Observe(r.Stamp)
	}
	e.clock.Observe(out.blocker.Stamp)
	if !out.acquired {
		rec := out.blocker
		if err := s.refused(rec); err != nil {
			return attempt{}, err
		}
		switch {
		case rec.DelayRemaining > 0:
			return attempt{delayed: &rec}, nil
		case rec.Key == "":
			// No holder to report: the holder is unknown, or (on a fair
			// backend) the lock is free but another waiter has the turn.
			return attempt{}, nil
		default:
			return attempt{current: &rec}, nil
		}
	}
	if out.replayed {
		return e.replayed(ctx, s, out)
	}
	// The lease started no earlier than start, so it lasts at least until
	// start+ttl. Past that (a slow backend) it may already be someone
	// else's: never report it.
	if took := time.Since(start); ctx.Err() != nil || took >= s.ttl {
		e.abandon(ctx, s.keys, token)
		if ctx.Err() != nil {
			return attempt{}, ctxErr(ctx, "acquire")
		}
		return attempt{late: newErr(ErrUnavailable,
			"acquire: the backend granted the lease after %s, not within its ttl of %s; the lease was given back (retry, or ask for a longer ttl)",
			took.Round(time.Millisecond), s.ttl)}, nil
	}
	return attempt{acquired: true, lease: lease(s.keys, out.records, token, s.ttl), fences: fences(out.records)}, nil
}

// replayed answers a repeat of an Acquire whose lease is held: the lease
// the first attempt took, with its owner token (sealed under the request
// id). That lease began before this repeat was sent, so it is renewed from
// now first: the client counts the lease from the repeat's sending. A
// replay is never given back when its caller goes away: the lease is the
// first attempt's, which another repeat may be receiving.
func (e *Engine) replayed(ctx context.Context, s *acquireSpec, out outcome) (attempt, error) {
	token, err := s.rid.open(out.replay)
	if err != nil {
		return attempt{}, err
	}
	callCtx, cancel := e.detached(ctx)
	defer cancel()
	recs, ok, err := e.extendKeys(callCtx, s.keys, token, s.ttl, backend.Request{})
	switch {
	case ctx.Err() != nil:
		return attempt{}, ctxErr(ctx, "acquire")
	case err != nil:
		return attempt{}, backendErr(ctx, "acquire: renew the repeated lease", err)
	case !ok:
		return attempt{}, nil // it ended meanwhile: try again, as anyone would
	}
	e.cfg.Observer.Replayed("acquire")
	return attempt{acquired: true, lease: lease(s.keys, recs, token, s.ttl), fences: fences(recs)}, nil
}

// abandon gives back a lease that nobody will be told about, unless a
// repeat of its Acquire has been answered with it meanwhile.
func (e *Engine) abandon(ctx context.Context, ks keySet, token string) {
	callCtx, cancel := e.detached(ctx)
	defer cancel()
	ok, err := e.releaseKeys(callCtx, ks, token, backend.Request{}, true)
	if err != nil {
		e.log.Warn("could not release a lease the caller no longer wants; it will expire at its TTL",
			"keys", ks.keys, "err", err)
		return
	}
	if ok {
		for _, k := range ks.keys {
			e.q.Released(k, token)
		}
	}
}

// releaseKeys makes the backend Release (or ReleaseSet) of ks.
func (e *Engine) releaseKeys(ctx context.Context, ks keySet, token string, ident backend.Request, abandon bool) (bool, error) {
	if !ks.set() {
		return e.calls.Release(ctx, backend.ReleaseRequest{Key: ks.keys[0], OwnerToken: token, Stamp: e.clock.Now(), Request: ident, Abandon: abandon})
	}
	sb, _ := e.sets()
	return sb.ReleaseSet(ctx, backend.ReleaseSetRequest{Keys: ks.keys, OwnerToken: token, Stamp: e.clock.Now(), Request: ident, Abandon: abandon})
}

// extendKeys makes the backend Extend (or ExtendSet) of ks: the renewed
// locks, in the order of ks.keys, when extended.
func (e *Engine) extendKeys(ctx context.Context, ks keySet, token string, ttl time.Duration, ident backend.Request) ([]backend.Record, bool, error) {
	if !ks.set() {
		res, err := e.calls.Extend(ctx, backend.ExtendRequest{Key: ks.keys[0], OwnerToken: token, TTL: ttl, Stamp: e.clock.Now(), Request: ident})
		return []backend.Record{res.Record}, res.Extended, err
	}
	sb, _ := e.sets()
	res, err := sb.ExtendSet(ctx, backend.ExtendSetRequest{Keys: ks.keys, OwnerToken: token, TTL: ttl, Stamp: e.clock.Now(), Request: ident})
	return res.Records, res.Extended, err
}

func (e *Engine) acquired(a attempt) *lockv1.AcquireResponse {
	return &lockv1.AcquireResponse{Acquired: true, Lease: a.lease, ServerStamp: e.stamp()}
}

func (e *Engine) notAcquired(cur, delayed *backend.Record) *lockv1.AcquireResponse {
	resp := &lockv1.AcquireResponse{}
	if cur != nil {
		resp.Current = e.state(*cur, 0)
	}
	if delayed != nil {
		resp.Delayed = delay(*delayed)
	}
	resp.ServerStamp = e.stamp()
	return resp
}

// queued is the first key of ks that has waiters on this server, if any.
func (e *Engine) queued(ks keySet) (string, bool) {
	for _, k := range ks.keys {
		if e.q.Depth(k) > 0 {
			return k, true
		}
	}
	return "", false
}

func (e *Engine) tryOnce(ctx context.Context, s *acquireSpec) (*lockv1.AcquireResponse, error) {
	if key, busy := e.queued(s.keys); busy {
		// No barging past this server's waiters: report the holder, unless
		// the lease is already this request's (a repeat).
		if s.ident.ID != "" {
			a, err := e.tryAs(ctx, s, "", true)
			if err != nil || a.acquired {
				return e.answer(a, err)
			}
		}
		rec, held, err := e.b.Get(ctx, key)
		if err != nil {
			return nil, backendErr(ctx, "acquire", err)
		}
		if err := s.refused(rec); err != nil {
			return nil, err
		}
		switch {
		case held:
			return e.notAcquired(&rec, nil), nil
		case rec.DelayRemaining > 0:
			return e.notAcquired(nil, &rec), nil
		}
		return e.notAcquired(nil, nil), nil
	}
	return e.answer(e.try(ctx, s))
}

// answer is the response to a try-once Acquire. A lease that came back
// too late is unavailable, not "held by nobody": the key was free, and a
// caller told acquired=false would take it for contended. Unavailable is
// what the SDKs retry (with the same request id), and what a raw client
// should treat as transient.
func (e *Engine) answer(a attempt, err error) (*lockv1.AcquireResponse, error) {
	if err != nil {
		return nil, err
	}
	if a.late != nil {
		return nil, a.late
	}
	if a.acquired {
		return e.acquired(a), nil
	}
	return e.notAcquired(a.current, a.delayed), nil
}

// Release gives the lease up if req.OwnerToken holds it (on req.Key, or on
// every key of req.Keys).
func (e *Engine) Release(ctx context.Context, req *lockv1.ReleaseRequest) (*lockv1.ReleaseResponse, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	ks, err := e.keysOf(req.GetKey(), req.GetKeys(), "keys")
	if err != nil {
		return nil, err
	}
	token := req.GetOwnerToken()
	if err := checkToken(token); err != nil {
		return nil, err
	}
	rid, err := checkRequestID(req.GetRequestId())
	if err != nil {
		return nil, err
	}
	if err := e.merge(req.GetClientStamp()); err != nil {
		return nil, err
	}
	var ident backend.Request // none without a request id (ident's answer then)
	if rid.set() {
		ident = e.ident(rid, newFingerprint("release").strs(ks.keys).flag(ks.multi).str(token))
	}
	ok, err := e.releaseKeys(ctx, ks, token, ident, false)
	if err != nil {
		if errors.Is(err, backend.ErrRequestConflict) && ctx.Err() == nil {
			return nil, conflictErr("release", "key or keys", "owner_token")
		}
		return nil, backendErr(ctx, "release", err)
	}
	if ok {
		for _, k := range ks.keys {
			e.q.Released(k, token) // local handoff, before the watch event arrives
		}
	}
	e.cfg.Observer.ReleaseDone(ok)
	return &lockv1.ReleaseResponse{Released: ok, ServerStamp: e.stamp()}, nil
}

func checkToken(tok string) error {
	if tok == "" {
		return invalidf("owner_token: must not be empty (use the lease's owner_token)")
	}
	if len(tok) > MaxOwnerTokenBytes {
		return invalidf("owner_token: %d bytes exceeds the maximum %d bytes", len(tok), MaxOwnerTokenBytes)
	}
	return nil
}

// Extend renews the lease for req.Ttl from now if req.OwnerToken holds it
// (on req.Key, or on every key of req.Keys).
func (e *Engine) Extend(ctx context.Context, req *lockv1.ExtendRequest) (*lockv1.ExtendResponse, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	ks, err := e.keysOf(req.GetKey(), req.GetKeys(), "keys")
	if err != nil {
		return nil, err
	}
	token := req.GetOwnerToken()
	if err := checkToken(token); err != nil {
		return nil, err
	}
	lo, hi := e.ttlRange()
	ttl, err := checkTTL(req.GetTtl(), lo, hi)
	if err != nil {
		return nil, err
	}
	rid, err := checkRequestID(req.GetRequestId())
	if err != nil {
		return nil, err
	}
	if err := e.merge(req.GetClientStamp()); err != nil {
		return nil, err
	}
	ident := e.ident(rid, newFingerprint("extend").strs(ks.keys).flag(ks.multi).str(token).dur(ttl))
	recs, ok, err := e.extendKeys(ctx, ks, token, ttl, ident)
	if err != nil {
		if errors.Is(err, backend.ErrRequestConflict) && ctx.Err() == nil {
			return nil, conflictErr("extend", "key or keys", "owner_token", "ttl")
		}
		return nil, backendErr(ctx, "extend", err)
	}
	e.cfg.Observer.ExtendDone(ok)
	resp := &lockv1.ExtendResponse{Extended: ok}
	if ok {
		for _, r := range recs {
			e.clock.Observe(r.Stamp)
		}
		resp.Lease = lease(ks, recs, token, ttl)
	}
	resp.ServerStamp = e.stamp()
	return resp, nil
}

// Inspect reports who holds req.Key.
func (e *Engine) Inspect(ctx context.Context, req *lockv1.InspectRequest) (*lockv1.InspectResponse, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	if err := checkKey("key", req.GetKey()); err != nil {
		return nil, err
	}
	rec, held, err := e.b.Get(ctx, req.GetKey())
	if err != nil {
		return nil, backendErr(ctx, "inspect", err)
	}
	resp := &lockv1.InspectResponse{Held: held}
	switch {
	case held:
		resp.State = e.state(rec, 0)
	case rec.DelayRemaining > 0:
		resp.Delayed = delay(rec)
	}
	resp.ServerStamp = e.stamp()
	return resp, nil
}

// List reports held locks under req.Prefix, one page at a time.
func (e *Engine) List(ctx context.Context, req *lockv1.ListRequest) (*lockv1.ListResponse, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	if err := checkText("prefix", req.GetPrefix(), MaxKeyBytes); err != nil {
		return nil, err
	}
	if err := checkText("page_token", req.GetPageToken(), 4096); err != nil {
		return nil, err
	}
	size := int(req.GetPageSize())
	switch {
	case size == 0:
		size = DefaultPageSize
	case size > MaxPageSize:
		size = MaxPageSize
	}
	page, err := e.b.List(ctx, backend.ListRequest{Prefix: req.GetPrefix(), PageSize: size, PageToken: req.GetPageToken()})
	if err != nil {
		return nil, backendErr(ctx, "list", err)
	}
	return &lockv1.ListResponse{NextPageToken: page.NextPageToken, Locks: e.states(page.Records), ServerStamp: e.stamp()}, nil
}

// GetServerInfo reports the server's version and the backend's promises.
func (e *Engine) GetServerInfo(context.Context, *lockv1.GetServerInfoRequest) (*lockv1.GetServerInfoResponse, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	info := e.Info()
	lo, hi := e.ttlRange()
	return &lockv1.GetServerInfoResponse{
		Version: e.cfg.Version,
		Backend: &lockv1.BackendInfo{
			Name:           info.Name,
			Version:        info.Version,
			Shared:         info.Shared,
			Durable:        info.Durable,
			TtlGranularity: durationpb.New(info.TTLGranularity),
			// The range this server accepts: the backend's, narrowed by the
			// engine's 1ms floor and the server's MaxTTL.
			MinTtl:        durationpb.New(lo),
			MaxTtl:        durationpb.New(hi),
			Fair:          info.Fair,
			Capabilities:  e.capabilities(),
			MaxKeys:       uint32(e.maxKeys()),
			MaxLockDelay:  durationpb.New(e.maxLockDelay()),
			Kinds:         kinds(info),
			MaxLimit:      limitIf(info, backend.KindSemaphore),
			RwlockReaders: limitIf(info, backend.KindRWLock),
		},
		MaxClockOffset: durationpb.New(max(e.clock.MaxOffset(), 0)),
		MaxWait:        durationpb.New(e.cfg.MaxWait),
		ServerStamp:    e.stamp(),
	}, nil
}

// capabilities are what the backend does beyond single-key leases, as this
// server offers them.
func (e *Engine) capabilities() []lockv1.Capability {
	var caps []lockv1.Capability
	if e.maxKeys() > 1 {
		caps = append(caps, lockv1.Capability_CAPABILITY_MULTI_KEY)
	}
	if e.Info().RequestIDs {
		caps = append(caps, lockv1.Capability_CAPABILITY_REQUEST_ID)
	}
	if e.maxLockDelay() > 0 {
		caps = append(caps, lockv1.Capability_CAPABILITY_LOCK_DELAY)
	}
	return caps
}
