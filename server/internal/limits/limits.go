// Package limits bounds what callers can make the server hold: a deadline
// on every unary call; per caller and in total, the locks it holds through
// this server, the Acquires it has waiting, and its open Watch streams. Over
// a bound a call answers resource_exhausted at once, naming the limit;
// nothing is queued, so no bound grows memory.
//
// # Callers
//
// A caller is a bearer token (by its name in the tokens file) when the
// server authenticates, and otherwise a client address: the IP, or for IPv6
// its /64, since one host owns a whole /64. Never a TCP connection: an
// HTTP/2 client opens another connection as soon as one is full of
// streams, so a per-connection bound bounds nothing. A token's max_locks,
// max_waiters and max_watch_streams (auth.Quota) replace the per-client
// defaults for that token.
//
// # What counts
//
//   - Locks: each key of a lease (a multi-key lease counts one lock per
//     key; each lease on a semaphore or rwlock key, one lock), from the moment an Acquire is received (a waiting one
//     included: it holds a place while it waits) until its lease is released
//     through this server, taken over by a later Acquire through this server,
//     or its TTL (as last renewed through this server) has run out. A lease
//     released or renewed through another server sharing the backend counts
//     here until its TTL runs out; this server cannot know of it earlier.
//   - Waiters: Acquires with a wait > 0 in progress.
//   - Watch streams: open Watch calls.
//
// The other limits live where their data is: key, holder and owner token
// lengths, TTL and wait ranges, and waiters per key and in total in
// core/engine; the message size cap and connection-level bounds in
// httpserver.
package limits

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// Config sets the bounds; a zero field is unbounded.
type Config struct {
	// MaxRequestDuration is the server's deadline on each unary call (a
	// caller's own earlier deadline still wins). It must exceed the longest
	// wait an Acquire may ask for.
	MaxRequestDuration time.Duration
	// MaxLocks bounds the locks held through this server (and Acquires in
	// progress), over every caller.
	MaxLocks int
	// MaxStreams bounds open server streams (Watch) over every caller.
	MaxStreams int
	// Per caller, unless a token's quota says otherwise.
	MaxLocksPerClient   int
	MaxWaitersPerClient int
	MaxStreamsPerClient int
}

// Interceptor enforces a Config. It is safe for concurrent use.
type Interceptor struct {
	cfg     Config
	locks   *leases
	waiters *counter
	streams *counter
}

var _ connect.Interceptor = (*Interceptor)(nil)

// New returns an Interceptor enforcing cfg.
func New(cfg Config) *Interceptor {
	return &Interceptor{
		cfg:     cfg,
		locks:   newLeases(cfg.MaxLocks),
		waiters: newCounter(0),
		streams: newCounter(cfg.MaxStreams),
	}
}

// Streams is the number of open streams.
func (i *Interceptor) Streams() int { return i.streams.Total() }

// Locks is the number of locks held through this server, with Acquires in
// progress.
func (i *Interceptor) Locks() int { return i.locks.Total(time.Now()) }

// WrapUnary implements connect.Interceptor.
func (i *Interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		if i.cfg.MaxRequestDuration > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, i.cfg.MaxRequestDuration)
			defer cancel()
		}
		switch r := req.Any().(type) {
		case *lockv1.AcquireRequest:
			return i.acquire(ctx, req, r, next)
		case *lockv1.ReleaseRequest:
			resp, err := next(ctx, req)
			if out, ok := answer[*lockv1.ReleaseResponse](resp, err); ok && out.GetReleased() {
				for _, k := range requestKeys(r.GetKey(), r.GetKeys()) {
					i.locks.released(k, r.GetOwnerToken())
				}
			}
			return resp, err
		case *lockv1.ExtendRequest:
			resp, err := next(ctx, req)
			if out, ok := answer[*lockv1.ExtendResponse](resp, err); ok && out.GetExtended() {
				until := time.Now().Add(out.GetLease().GetTtl().AsDuration())
				keys := requestKeys(r.GetKey(), r.GetKeys())
				renewed := make([]renewal, len(keys))
				for n, k := range keys {
					renewed[n] = renewal{key: k, token: r.GetOwnerToken(), until: until}
				}
				i.locks.extendedAll(renewed)
			}
			return resp, err
		case *lockv1.ExtendBatchRequest:
			// The SDKs' watchdogs renew through ExtendBatch: its renewed
			// leases must stay counted exactly as Extend's do.
			resp, err := next(ctx, req)
			if out, ok := answer[*lockv1.ExtendBatchResponse](resp, err); ok {
				now := time.Now()
				items := r.GetItems()
				renewed := make([]renewal, 0, len(items))
				for n, res := range out.GetResults() {
					if n < len(items) && res.GetExtended() {
						renewed = append(renewed, renewal{key: items[n].GetKey(), token: items[n].GetOwnerToken(),
							until: now.Add(res.GetLease().GetTtl().AsDuration())})
					}
				}
				i.locks.extendedAll(renewed)
			}
			return resp, err
		}
		return next(ctx, req)
	}
}

// requestKeys are the keys a request names: key, or the keys of a
// multi-key request. Each key of a set counts as a lock.
func requestKeys(key string, keys []string) []string {
	if len(keys) > 0 {
		return keys
	}
	return []string{key}
}

// answer is resp's message when the call succeeded.
func answer[T any](resp connect.AnyResponse, err error) (T, bool) {
	var zero T
	if err != nil || resp == nil {
		return zero, false
	}
	out, ok := resp.Any().(T)
	return out, ok
}

func (i *Interceptor) acquire(ctx context.Context, req connect.AnyRequest, r *lockv1.AcquireRequest, next connect.UnaryFunc) (connect.AnyResponse, error) {
	c := i.caller(ctx, req.Peer().Addr)
	if r.GetWait().AsDuration() > 0 {
		if err := i.waiters.add(c.id, c.waiters); err != nil {
			return nil, exhausted("wait: %d waiting Acquires already in progress for %s (%s)", err, c.who, c.waitersLimit)
		}
		defer i.waiters.remove(c.id)
	}
	keys := requestKeys(r.GetKey(), claimKeys(r.GetClaims()))
	if err := i.locks.reserve(c.id, c.locks, len(keys), time.Now()); err != nil {
		var over *overLimit
		if errors.As(err, &over) && over.total {
			return nil, connect.NewError(connect.CodeResourceExhausted,
				fmt.Errorf("acquire: %d locks held or being acquired through this server (the server's --max-locks)", over.n))
		}
		return nil, exhausted("acquire: %d locks held or being acquired by %s (%s)", err, c.who, c.locksLimit)
	}
	resp, err := next(ctx, req)
	if out, ok := answer[*lockv1.AcquireResponse](resp, err); ok && out.GetAcquired() {
		until := time.Now().Add(out.GetLease().GetTtl().AsDuration())
		// A key of several leases (a semaphore, an rwlock) counts each
		// lease; a mutex's new lease ends the one counted before it.
		shared := r.GetKind() != lockv1.Kind_KIND_UNSPECIFIED && r.GetKind() != lockv1.Kind_KIND_MUTEX
		for _, k := range keys {
			i.locks.granted(c.id, k, out.GetLease().GetOwnerToken(), shared, until)
		}
	} else {
		i.locks.unreserve(c.id, len(keys))
	}
	return resp, err
}

func claimKeys(claims []*lockv1.Claim) []string {
	keys := make([]string, len(claims))
	for i, c := range claims {
		keys[i] = c.GetKey()
	}
	return keys
}

// exhausted words a per-caller refusal; err is the counter's *overLimit.
func exhausted(format string, err error, who, limit string) error {
	n := 0
	var over *overLimit
	if errors.As(err, &over) {
		n = over.n
	}
	return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(format, n, who, limit))
}

// WrapStreamingClient implements connect.Interceptor (nothing to do).
func (i *Interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler implements connect.Interceptor.
func (i *Interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		c := i.caller(ctx, conn.Peer().Addr)
		if err := i.streams.add(c.id, c.streams); err != nil {
			var over *overLimit
			if errors.As(err, &over) && over.total {
				return connect.NewError(connect.CodeResourceExhausted,
					fmt.Errorf("watch: %d streams already open on this server (the server's --max-watch-streams)", over.n))
			}
			return exhausted("watch: %d streams already open for %s (%s)", err, c.who, c.streamsLimit)
		}
		defer i.streams.remove(c.id)
		return next(ctx, conn)
	}
}

// ErrWaitTooLong is returned by Check when a configuration would cut
// waits short.
var ErrWaitTooLong = errors.New("max request duration must exceed max wait")

// Check validates cfg against the longest wait an Acquire may ask for.
func Check(cfg Config, maxWait time.Duration) error {
	if cfg.MaxRequestDuration > 0 && cfg.MaxRequestDuration <= maxWait {
		return fmt.Errorf("%w: --max-request-duration %s is not above --max-wait %s", ErrWaitTooLong, cfg.MaxRequestDuration, maxWait)
	}
	for name, v := range map[string]int{
		"--max-locks": cfg.MaxLocks, "--max-watch-streams": cfg.MaxStreams, "--max-locks-per-client": cfg.MaxLocksPerClient,
		"--max-waiters-per-client": cfg.MaxWaitersPerClient, "--max-watch-streams-per-client": cfg.MaxStreamsPerClient,
	} {
		if v < 0 {
			return fmt.Errorf("%s: %d is negative (0 is unbounded)", name, v)
		}
	}
	return nil
}
