// Package engine is holdfast's lock engine: everything behind the public API
// that does not depend on the wire. It validates requests, keeps the server's
// Hybrid Logical Clock, mints owner tokens, calls the backend, queues waiting
// acquirers per key (package waitq) and wakes them on backend events, and
// fans the backend's watch out to API watchers.
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
//   - the backend's Watch events released/expired for the key,
//   - a timer set for the holder's expiry (the Remaining the backend
//     reported, plus its TTL granularity) on the engine's monotonic clock,
//     which covers a lost event, and
//   - a resync of the backend watch (after a plugin restart every head is
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
// A waiter never waits longer than its wait nor past its caller's deadline,
// and it is never told "acquired" for a lease nobody will use: the backend
// call runs detached from the caller's cancellation (so its outcome is
// known), and a lease won after the caller gave up, or whose TTL ran out
// before the answer came back, is released again at once.
//
// # Shutdown
//
// Close stops accepting requests, ends waiters and watchers with
// unavailable, and stops the backend watch. It releases no lease: a holder's
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
	DefaultMaxTTL      = 24 * time.Hour
	DefaultMaxWait     = time.Hour
	DefaultCallTimeout = 10 * time.Second

	DefaultMaxWaitersPerCaller = 1024
)

type callerKey struct{}

// WithCaller names the caller of the requests made with ctx (the server uses
// the client connection's address), so that its waiters can be bounded.
func WithCaller(ctx context.Context, caller string) context.Context {
	return context.WithValue(ctx, callerKey{}, caller)
}

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
	// MaxWaitersPerCaller bounds the waiters of one caller, as named by
	// WithCaller (the server uses the client's connection)
	// (0: DefaultMaxWaitersPerCaller).
	MaxWaitersPerCaller int
	// CallTimeout bounds backend calls the engine makes detached from the
	// caller (0: DefaultCallTimeout).
	CallTimeout time.Duration
	// Clock is the server's HLC (nil: a new clock on the system time).
	Clock *hlc.Clock
	// Logger receives the engine's logs (nil: discarded).
	Logger *slog.Logger
	// Observer is told of outcomes, for metrics (nil: nobody).
	Observer Observer
}

// Engine serves the lock API on one backend. It is safe for concurrent use.
type Engine struct {
	b     backend.Backend
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
	closeOnce sync.Once
	stopWatch context.CancelFunc
	wg        sync.WaitGroup
	firstSync chan struct{} // closed at the first EventSynced

	callersMu sync.Mutex
	callers   map[string]int // waiters per named caller

	watchMu  sync.Mutex
	synced   bool
	everSync bool
	subs     map[*subscriber]struct{}
}

// New starts an engine on b: it reads b's Info, starts the one backend watch
// and returns once that watch is synced (or fails when ctx ends first). The
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
	if cfg.MaxWaitersPerCaller <= 0 {
		cfg.MaxWaitersPerCaller = DefaultMaxWaitersPerCaller
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
		subs:      make(map[*subscriber]struct{}),
		callers:   make(map[string]int),
	}
	e.closing, e.cancelAll = context.WithCancel(context.Background())
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
		for s := range e.subs {
			e.endSub(s, newErr(ErrUnavailable, "watch: the server is shutting down"))
		}
		e.watchMu.Unlock()
	})
	e.wg.Wait()
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

// newOwnerToken mints 256 random bits, base64url without padding.
func newOwnerToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (it crashes instead)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func (e *Engine) state(r backend.Record) *lockv1.LockState {
	s := &lockv1.LockState{
		Key:          r.Key,
		FencingToken: r.FencingToken,
		Holder:       r.Holder,
		Stamp:        r.Stamp.ToProto(),
		Waiters:      uint32(e.q.Depth(r.Key)),
	}
	if !r.ExpiresAt.IsZero() {
		s.ExpiresAt = timestamppb.New(r.ExpiresAt)
	}
	return s
}

func lease(r backend.Record, token string, ttl time.Duration) *lockv1.Lease {
	l := &lockv1.Lease{
		Key:          r.Key,
		OwnerToken:   token,
		FencingToken: r.FencingToken,
		Ttl:          durationpb.New(ttl),
		Stamp:        r.Stamp.ToProto(),
	}
	if !r.ExpiresAt.IsZero() {
		l.ExpiresAt = timestamppb.New(r.ExpiresAt)
	}
	return l
}

// Acquire takes the lease on req.Key, queueing for at most req.Wait.
func (e *Engine) Acquire(ctx context.Context, req *lockv1.AcquireRequest) (*lockv1.AcquireResponse, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	key := req.GetKey()
	if err := checkKey("key", key); err != nil {
		return nil, err
	}
	lo, hi := e.ttlRange()
	ttl, err := checkTTL(req.GetTtl(), lo, hi)
	if err != nil {
		return nil, err
	}
	wait, err := checkWait(req.GetWait(), e.cfg.MaxWait)
	if err != nil {
		return nil, err
	}
	if err := checkText("holder", req.GetHolder(), MaxHolderBytes); err != nil {
		return nil, err
	}
	if err := e.merge(req.GetClientStamp()); err != nil {
		return nil, err
	}
	start := time.Now()
	var resp *lockv1.AcquireResponse
	if wait == 0 {
		resp, err = e.tryOnce(ctx, key, ttl, req.GetHolder())
	} else {
		resp, err = e.acquireWaiting(ctx, key, ttl, wait, req.GetHolder())
	}
	if err == nil {
		e.cfg.Observer.AcquireDone(resp.GetAcquired(), wait > 0, time.Since(start))
	}
	return resp, err
}

// attempt is the outcome of one backend Acquire.
type attempt struct {
	acquired bool
	lease    *lockv1.Lease
	current  *backend.Record // the holder, when not acquired and known
}

// try makes one backend Acquire for a caller still interested in ctx.
func (e *Engine) try(ctx context.Context, key string, ttl time.Duration, holder string) (attempt, error) {
	return e.tryAs(ctx, key, ttl, holder, "")
}

// tryAs is try for a fair backend's queued waiter (waiterID set: acquire
// only as the head of the store's queue) or for a newcomer (empty: only when
// nobody is queued).
func (e *Engine) tryAs(ctx context.Context, key string, ttl time.Duration, holder, waiterID string) (attempt, error) {
	token := newOwnerToken()
	callCtx, cancel := e.detached(ctx)
	defer cancel()
	start := time.Now()
	res, err := e.b.Acquire(callCtx, backend.AcquireRequest{
		Key: key, OwnerToken: token, TTL: ttl, Holder: holder, Stamp: e.clock.Now(), WaiterID: waiterID,
	})
	if err != nil {
		return attempt{}, backendErr(ctx, "acquire", err)
	}
	// The backend's stamp is trusted: it orders the key's chain of holders.
	e.clock.Observe(res.Record.Stamp)
	if !res.Acquired {
		if res.Record.Key == "" {
			// No holder to report: the holder is unknown, or (on a fair
			// backend) the lock is free but another waiter has the turn.
			return attempt{}, nil
		}
		rec := res.Record
		return attempt{current: &rec}, nil
	}
	// The lease started no earlier than start, so it lasts at least until
	// start+ttl. Past that (a slow backend) it may already be someone
	// else's: never report it.
	if ctx.Err() != nil || time.Since(start) >= ttl {
		e.releaseDetached(ctx, key, token)
		if ctx.Err() != nil {
			return attempt{}, ctxErr(ctx, "acquire")
		}
		return attempt{}, nil
	}
	return attempt{acquired: true, lease: lease(res.Record, token, ttl)}, nil
}

// releaseDetached gives back a lease that nobody will be told about.
func (e *Engine) releaseDetached(ctx context.Context, key, token string) {
	callCtx, cancel := e.detached(ctx)
	defer cancel()
	ok, err := e.b.Release(callCtx, backend.ReleaseRequest{Key: key, OwnerToken: token, Stamp: e.clock.Now()})
	if err != nil {
		e.log.Warn("could not release a lease the caller no longer wants; it will expire at its TTL",
			"key", key, "err", err)
		return
	}
	if ok {
		e.q.Released(key, token)
	}
}

func (e *Engine) acquired(a attempt) *lockv1.AcquireResponse {
	return &lockv1.AcquireResponse{Acquired: true, Lease: a.lease, ServerStamp: e.stamp()}
}

func (e *Engine) notAcquired(cur *backend.Record) *lockv1.AcquireResponse {
	resp := &lockv1.AcquireResponse{}
	if cur != nil {
		resp.Current = e.state(*cur)
	}
	resp.ServerStamp = e.stamp()
	return resp
}

func (e *Engine) tryOnce(ctx context.Context, key string, ttl time.Duration, holder string) (*lockv1.AcquireResponse, error) {
	if e.q.Depth(key) > 0 {
		// No barging past this server's waiters: report the holder.
		rec, held, err := e.b.Get(ctx, key)
		if err != nil {
			return nil, backendErr(ctx, "acquire", err)
		}
		if !held {
			return e.notAcquired(nil), nil
		}
		return e.notAcquired(&rec), nil
	}
	a, err := e.try(ctx, key, ttl, holder)
	if err != nil {
		return nil, err
	}
	if a.acquired {
		return e.acquired(a), nil
	}
	return e.notAcquired(a.current), nil
}

func (e *Engine) addCaller(caller string) error {
	e.callersMu.Lock()
	defer e.callersMu.Unlock()
	if n := e.callers[caller]; n >= e.cfg.MaxWaitersPerCaller {
		return newErr(ErrResourceExhausted, "wait: %d waiters already queued from this connection (the maximum per connection)", n)
	}
	e.callers[caller]++
	return nil
}

func (e *Engine) removeCaller(caller string) {
	e.callersMu.Lock()
	defer e.callersMu.Unlock()
	if e.callers[caller]--; e.callers[caller] <= 0 {
		delete(e.callers, caller)
	}
}

// Release gives the lease up if req.OwnerToken holds it.
func (e *Engine) Release(ctx context.Context, req *lockv1.ReleaseRequest) (*lockv1.ReleaseResponse, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	key := req.GetKey()
	if err := checkKey("key", key); err != nil {
		return nil, err
	}
	if err := checkToken(req.GetOwnerToken()); err != nil {
		return nil, err
	}
	if err := e.merge(req.GetClientStamp()); err != nil {
		return nil, err
	}
	ok, err := e.b.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: req.GetOwnerToken(), Stamp: e.clock.Now()})
	if err != nil {
		return nil, backendErr(ctx, "release", err)
	}
	if ok {
		e.q.Released(key, req.GetOwnerToken()) // local handoff, before the watch event arrives
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

// Extend renews the lease for req.Ttl from now if req.OwnerToken holds it.
func (e *Engine) Extend(ctx context.Context, req *lockv1.ExtendRequest) (*lockv1.ExtendResponse, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	key := req.GetKey()
	if err := checkKey("key", key); err != nil {
		return nil, err
	}
	if err := checkToken(req.GetOwnerToken()); err != nil {
		return nil, err
	}
	lo, hi := e.ttlRange()
	ttl, err := checkTTL(req.GetTtl(), lo, hi)
	if err != nil {
		return nil, err
	}
	if err := e.merge(req.GetClientStamp()); err != nil {
		return nil, err
	}
	res, err := e.b.Extend(ctx, backend.ExtendRequest{Key: key, OwnerToken: req.GetOwnerToken(), TTL: ttl, Stamp: e.clock.Now()})
	if err != nil {
		return nil, backendErr(ctx, "extend", err)
	}
	e.cfg.Observer.ExtendDone(res.Extended)
	resp := &lockv1.ExtendResponse{Extended: res.Extended}
	if res.Extended {
		e.clock.Observe(res.Record.Stamp)
		resp.Lease = lease(res.Record, req.GetOwnerToken(), ttl)
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
	if held {
		resp.State = e.state(rec)
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
	resp := &lockv1.ListResponse{NextPageToken: page.NextPageToken, Locks: make([]*lockv1.LockState, len(page.Records))}
	for i, r := range page.Records {
		resp.Locks[i] = e.state(r)
	}
	resp.ServerStamp = e.stamp()
	return resp, nil
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
			MinTtl: durationpb.New(lo),
			MaxTtl: durationpb.New(hi),
			Fair:   info.Fair,
		},
		MaxClockOffset: durationpb.New(max(e.clock.MaxOffset(), 0)),
		MaxWait:        durationpb.New(e.cfg.MaxWait),
		ServerStamp:    e.stamp(),
	}, nil
}
