// Package holdfasttest runs a holdfast server inside a Go test: the lock
// engine and the in-memory backend in the test's own process, behind an
// httptest server on 127.0.0.1. It starts in milliseconds, needs no
// holdfast binary, and is stopped when the test ends. Clients reach it with
// the Go SDK (or any client) at Server.URL.
//
// Its fault controls are what a test of loss handling needs: ExpireLease
// ends a lease behind its holder's back (the guard is poisoned at its next
// renewal), SetUnavailable makes every call answer `unavailable` (a
// restarting backend), SetUnreachable refuses connections (a partition).
//
//	func TestReportSkipsWhenTheLockIsLost(t *testing.T) {
//		srv := holdfasttest.NewServer(t)
//		client := srv.Client()
//		g, err := client.Lock("jobs/report").TryLock(t.Context())
//		...
//		srv.ExpireLease("jobs/report")
//		<-g.Done() // lost: the next renewal was refused
//	}
//
// The server is the real engine on the real memory backend, not a mock:
// waiting, fencing tokens, HLC stamps and the API's errors behave as they
// do in `holdfast serve`. What it leaves out is what the server adds around
// the API (TLS, tokens, limits, metrics).
package holdfasttest

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"

	"github.com/holdfast/holdfast/core/engine"
	"github.com/holdfast/holdfast/plugins/memory"
	holdfast "github.com/holdfast/holdfast/sdk-go"
	"github.com/holdfast/holdfast/server/lockservice"
)

// Server is a holdfast server running in the test's process.
type Server struct {
	// URL is the server's base URL ("http://127.0.0.1:PORT"), for
	// holdfast.Dial.
	URL string

	t           testing.TB
	backend     *memory.Backend
	engine      *engine.Engine
	http        *httptest.Server
	ln          *gate
	unavailable atomic.Bool
}

// NewServer starts a server for the test; it stops when the test ends
// (t.Cleanup). It speaks Connect, gRPC and gRPC-Web, over HTTP/1.1 and
// cleartext HTTP/2.
func NewServer(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, backend: memory.New()}
	e, err := engine.New(context.Background(), s.backend, engine.Config{Version: "holdfasttest"})
	if err != nil {
		_ = s.backend.Close()
		t.Fatalf("holdfasttest: starting the engine: %v", err)
	}
	s.engine = e
	mux := http.NewServeMux()
	mux.Handle(lockservice.NewHandler(e, connect.WithInterceptors(faults{s})))
	s.http = httptest.NewUnstartedServer(mux)
	protos := new(http.Protocols)
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	s.http.Config.Protocols = protos
	s.ln = &gate{Listener: s.http.Listener}
	s.http.Listener = s.ln
	s.http.Start()
	s.URL = s.http.URL
	t.Cleanup(s.close)
	return s
}

// close stops the HTTP server (ending waits and watches in flight), then
// the engine and the backend.
func (s *Server) close() {
	s.ln.setClosed(false)
	s.http.CloseClientConnections()
	s.http.Close()
	_ = s.engine.Close()
	_ = s.backend.Close()
}

// Client dials the server with the Go SDK; the client is closed when the
// test ends.
func (s *Server) Client(opts ...holdfast.Option) *holdfast.Client {
	s.t.Helper()
	c, err := holdfast.Dial(s.URL, opts...)
	if err != nil {
		s.t.Fatalf("holdfasttest: %v", err)
	}
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// ExpireLease ends the lease held on key now (every grant, for a
// semaphore or read-write lock key), as if its TTL had run out: waiters
// wake, anyone may take the key, and the holder's next renewal is refused,
// which poisons its guard (Done closes, the context is cancelled with a
// lease-lost cause of reason "rejected"). It reports whether a lease was
// held.
func (s *Server) ExpireLease(key string) bool { return s.backend.Expire(key) }

// SetUnavailable makes every call answer `unavailable` while on is true,
// as a server whose backend is restarting does: the SDK retries within its
// retry budget, a guard's watchdog until the lease's local expiry.
func (s *Server) SetUnavailable(on bool) { s.unavailable.Store(on) }

// SetUnreachable refuses connections while on is true, and cuts the open
// ones when it turns on, as a network partition or a stopped server does.
func (s *Server) SetUnreachable(on bool) {
	s.ln.setClosed(on)
	if on {
		s.http.CloseClientConnections()
	}
}

// faults answers `unavailable` while the server is set to.
type faults struct{ s *Server }

func (f faults) check() error {
	if f.s.unavailable.Load() {
		return connect.NewError(connect.CodeUnavailable, errors.New("holdfasttest: the server is set to answer unavailable"))
	}
	return nil
}

func (f faults) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := f.check(); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (f faults) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (f faults) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := f.check(); err != nil {
			return err
		}
		return next(ctx, conn)
	}
}

// gate is the server's listener; while closed it drops every connection it
// accepts, so clients see a refused (reset) connection.
type gate struct {
	net.Listener
	mu     sync.Mutex
	closed bool
}

func (g *gate) setClosed(closed bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = closed
}

func (g *gate) Accept() (net.Conn, error) {
	for {
		c, err := g.Listener.Accept()
		if err != nil {
			return nil, err
		}
		g.mu.Lock()
		closed := g.closed
		g.mu.Unlock()
		if !closed {
			return c, nil
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset, not a polite close
		}
		_ = c.Close()
	}
}
