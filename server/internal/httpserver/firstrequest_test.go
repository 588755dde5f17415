package httpserver

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/holdfast/holdfast/core/engine"
	"github.com/holdfast/holdfast/plugins/memory"
	holdfast "github.com/holdfast/holdfast/sdk-go"
)

// agedDialer hands its HTTP transport one connection dialed before the
// first request, as Go's http.Transport does with a connection it dialed
// for a request that another connection served first: it goes to the idle
// pool, and a later request is its first. A second dial is refused, so a
// call fails unless it is served on that connection.
type agedDialer struct {
	mu   sync.Mutex
	conn net.Conn
	used bool
}

func (d *agedDialer) DialContext(context.Context, string, string) (net.Conn, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.used {
		return nil, errors.New("test: only the connection dialed in advance may be used")
	}
	d.used = true
	return d.conn, nil
}

// A connection that a client dialed in advance and first uses after the
// header timeout is served: until its first request starts it is idle,
// bounded by the idle timeout, and the header timeout counts from the
// request's first byte (as net/http does for a keep-alive connection's
// later requests). Before, the header timeout ran from the accept: the
// server closed such a connection at 10s, and a request sent on it just
// then lost its connection, or, when the server had read its first 14
// bytes (net/http's h2c preface check) before the deadline and the rest
// after it, was answered "400 Bad Request" in plain text, which a Connect
// client reads as internal (seen by 100 Go SDK clients over HTTP/1.1).
func TestConnectionFirstUsedAfterHeaderTimeoutIsServed(t *testing.T) {
	b := memory.New()
	defer b.Close()
	e, err := engine.New(context.Background(), b, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	limits := DefaultLimits()
	limits.HeaderTimeout = 100 * time.Millisecond
	limits.IdleTimeout = time.Minute
	srv, err := Start("127.0.0.1:0", e, slog.New(slog.DiscardHandler), WithLimits(limits))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()

	conn, err := net.Dial("tcp", srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The connection's age is what is under test: it waits, unused, for
	// several header timeouts (well within the idle timeout).
	time.Sleep(5 * limits.HeaderTimeout)

	d := &agedDialer{conn: conn}
	tr := &http.Transport{DialContext: d.DialContext, Protocols: new(http.Protocols)}
	tr.Protocols.SetHTTP1(true) // the Go SDK's transport for an http:// address
	defer tr.CloseIdleConnections()
	c, err := holdfast.Dial("http://"+srv.Addr().String(),
		holdfast.WithHTTPClient(&http.Client{Transport: tr}),
		holdfast.WithRetryBudget(time.Second), holdfast.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g, err := c.Lock("first-request/aged-connection").TTL(time.Minute).TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock on a connection dialed %s before its first request (header timeout %s, idle timeout %s): %v",
			5*limits.HeaderTimeout, limits.HeaderTimeout, limits.IdleTimeout, err)
	}
	if err := g.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
