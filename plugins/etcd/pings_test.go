package etcd_test

import (
	"context"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/plugins/etcd"
)

// pingConn counts the HTTP/2 PINGs the client writes to etcd (pings) and
// its acks of etcd's own PINGs (acks), by parsing a copy of what it
// writes after the connection preface.
type pingConn struct {
	net.Conn
	pw *io.PipeWriter
}

func countPings(c net.Conn, pings, acks *atomic.Int64) net.Conn {
	pr, pw := io.Pipe()
	go func() {
		if _, err := io.ReadFull(pr, make([]byte, len(http2.ClientPreface))); err != nil {
			return
		}
		fr := http2.NewFramer(nil, pr)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				_ = pr.CloseWithError(err)
				return
			}
			if p, ok := f.(*http2.PingFrame); ok {
				if p.IsAck() {
					acks.Add(1)
				} else {
					pings.Add(1)
				}
			}
		}
	}()
	return &pingConn{Conn: c, pw: pw}
}

func (c *pingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	_, _ = c.pw.Write(b[:n])
	return n, err
}

func (c *pingConn) Close() error {
	_ = c.pw.Close()
	return c.Conn.Close()
}

// The client's connection to etcd has fixed flow-control windows, so it
// sends etcd no PING beside each call (grpc-go's bandwidth-delay estimator,
// with dynamic windows, sends one for nearly every response at low load).
// The acks it writes to etcd's own PINGs show that the counting sees PING
// frames.
func TestNoPingPerCall(t *testing.T) {
	eps := requireEtcd(t)
	var pings, acks atomic.Int64
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	be, err := etcd.NewWithDialOptions(ctx, map[string]string{"endpoints": eps, "prefix": testPrefix(t)},
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			return countPings(c, &pings, &acks), nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	const calls = 50
	for i := range calls {
		key, tok := "pings/k", token()
		res, err := be.Acquire(ctx, backend.AcquireRequest{Key: key, OwnerToken: tok, TTL: 10 * time.Second, Stamp: clock.Now()})
		if err != nil || !res.Acquired {
			t.Fatalf("acquire %d: %v %+v", i, err, res)
		}
		if ok, err := be.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: tok, Stamp: clock.Now()}); err != nil || !ok {
			t.Fatalf("release %d: %v %v", i, ok, err)
		}
	}
	t.Logf("%d calls: the client sent %d PINGs and %d acks of etcd's", 2*calls, pings.Load(), acks.Load())
	if n := pings.Load(); n != 0 {
		t.Fatalf("the client sent etcd %d PINGs in %d calls; want none", n, 2*calls)
	}
	if acks.Load() == 0 {
		t.Fatal("no PING ack written in the whole run: the counting saw no PING frame (etcd pings beside nearly every request)")
	}
}
