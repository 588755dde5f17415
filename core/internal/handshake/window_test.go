package handshake_test

import (
	"context"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/holdfast/holdfast/core/internal/handshake"
)

// pingCounter wraps a connection and counts the HTTP/2 PINGs (not their
// acks) written on it, by parsing a copy of everything written.
type pingCounter struct {
	net.Conn
	pw    *io.PipeWriter
	pings *atomic.Int64
}

func countPings(c net.Conn, preface bool, pings *atomic.Int64) net.Conn {
	pr, pw := io.Pipe()
	go func() {
		if preface { // the client's connection preface precedes its frames
			if _, err := io.ReadFull(pr, make([]byte, len(http2.ClientPreface))); err != nil {
				return
			}
		}
		fr := http2.NewFramer(nil, pr)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				_ = pr.CloseWithError(err)
				return
			}
			if p, ok := f.(*http2.PingFrame); ok && !p.IsAck() {
				pings.Add(1)
			}
		}
	}()
	return &pingCounter{Conn: c, pw: pw, pings: pings}
}

func (c *pingCounter) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	_, _ = c.pw.Write(b[:n])
	return n, err
}

func (c *pingCounter) Close() error {
	_ = c.pw.Close()
	return c.Conn.Close()
}

type countingListener struct {
	net.Listener
	pings *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countPings(c, false, l.pings), nil
}

// pingsDuring makes calls unary calls, one at a time (as at concurrency 1),
// between a server and a client made with the given options, and returns
// the PINGs that each side sent meanwhile.
func pingsDuring(t *testing.T, calls int, sopts []grpc.ServerOption, dopts []grpc.DialOption) (server, client int64) {
	t.Helper()
	var fromServer, fromClient atomic.Int64
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(sopts...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(countingListener{lis, &fromServer}) }()
	defer srv.Stop()
	dopts = append(dopts, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			return countPings(c, true, &fromClient), nil
		}))
	conn, err := grpc.NewClient(lis.Addr().String(), dopts...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range calls {
		if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	return fromServer.Load(), fromClient.Load()
}

// TestFixedWindowsSendNoPings: calls one at a time on a connection with
// the plugin's flow-control options make no PING on either side, where
// grpc-go's default dynamic windows send one for nearly every call (the
// control, which shows that the counting sees them).
func TestFixedWindowsSendNoPings(t *testing.T) {
	const calls = 50
	s, c := pingsDuring(t, calls, nil, nil)
	if s+c < calls/2 {
		t.Fatalf("control (dynamic windows): %d PINGs from the server and %d from the client in %d calls; want about one a call", s, c, calls)
	}
	t.Logf("dynamic windows: %d PINGs from the server, %d from the client, in %d calls", s, c, calls)
	s, c = pingsDuring(t, calls, handshake.ServerOptions(), handshake.DialOptions())
	if s != 0 || c != 0 {
		t.Fatalf("fixed windows: %d PINGs from the server and %d from the client in %d calls; want none", s, c, calls)
	}
}
