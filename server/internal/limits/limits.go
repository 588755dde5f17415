// Package limits bounds what one caller can make the server hold: a
// deadline on every unary call, and the number of Watch streams per client
// connection and in total. Over a bound a call answers resource_exhausted
// at once; nothing is queued, so no bound grows memory.
//
// The other limits live where their data is: key, holder and owner token
// lengths, TTL and wait ranges, and waiters per key, per connection and in
// total in core/engine; the 1 MiB message cap in httpserver.
package limits

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"
)

// Config sets the bounds; a zero field is unbounded.
type Config struct {
	// MaxRequestDuration is the server's deadline on each unary call (a
	// caller's own earlier deadline still wins). It must exceed the longest
	// wait an Acquire may ask for.
	MaxRequestDuration time.Duration
	// MaxStreams and MaxStreamsPerConn bound open server streams (Watch).
	MaxStreams        int
	MaxStreamsPerConn int
}

// Interceptor enforces a Config. It is safe for concurrent use.
type Interceptor struct {
	cfg Config

	mu      sync.Mutex
	total   int
	perConn map[string]int // only connections with open streams: bounded by MaxStreams
}

var _ connect.Interceptor = (*Interceptor)(nil)

// New returns an Interceptor enforcing cfg.
func New(cfg Config) *Interceptor {
	return &Interceptor{cfg: cfg, perConn: map[string]int{}}
}

// Streams is the number of open streams.
func (i *Interceptor) Streams() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.total
}

// WrapUnary implements connect.Interceptor.
func (i *Interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	if i.cfg.MaxRequestDuration <= 0 {
		return next
	}
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		ctx, cancel := context.WithTimeout(ctx, i.cfg.MaxRequestDuration)
		defer cancel()
		return next(ctx, req)
	}
}

// WrapStreamingClient implements connect.Interceptor (nothing to do).
func (i *Interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler implements connect.Interceptor.
func (i *Interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		peer := conn.Peer().Addr
		if err := i.open(peer); err != nil {
			return err
		}
		defer i.close(peer)
		return next(ctx, conn)
	}
}

func (i *Interceptor) open(peer string) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.cfg.MaxStreams > 0 && i.total >= i.cfg.MaxStreams {
		return connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("watch: %d streams already open on this server (the maximum)", i.total))
	}
	if n := i.perConn[peer]; i.cfg.MaxStreamsPerConn > 0 && n >= i.cfg.MaxStreamsPerConn {
		return connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("watch: %d streams already open on this connection (the maximum per connection)", n))
	}
	i.total++
	i.perConn[peer]++
	return nil
}

func (i *Interceptor) close(peer string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.total--
	if i.perConn[peer]--; i.perConn[peer] <= 0 {
		delete(i.perConn, peer)
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
	if cfg.MaxStreams < 0 || cfg.MaxStreamsPerConn < 0 {
		return errors.New("stream limits must not be negative")
	}
	return nil
}
