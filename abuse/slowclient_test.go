package abuse

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/harness"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// rawConns dials n connections from the local IP from and runs each in
// talk, in its own goroutine; closed receives, per connection, how long
// after talk began the server closed it (or -1 if it did not within
// within). The returned wait blocks until every connection is done.
func rawConns(ctx context.Context, t *testing.T, s *harness.Server, from string, n int, within time.Duration,
	talk func(ctx context.Context, c net.Conn)) (closed chan time.Duration, wait func()) {
	t.Helper()
	closed = make(chan time.Duration, n)
	var wg sync.WaitGroup
	for range n {
		c, err := dialer(from).DialContext(ctx, "tcp", s.Addr)
		if err != nil {
			t.Fatalf("dial %d connections from %s: %v", n, from, err)
		}
		wg.Go(func() {
			start := time.Now()
			tctx, cancel := context.WithTimeout(ctx, within)
			var talking sync.WaitGroup
			talking.Go(func() { talk(tctx, c) })
			_ = c.SetReadDeadline(start.Add(within))
			_, err := io.Copy(io.Discard, c)
			took := time.Since(start)
			cancel()
			c.Close()
			talking.Wait()
			if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
				took = -1
			}
			closed <- took
		})
	}
	return closed, wg.Wait
}

// trickle writes head, then one byte of tail every gap until ctx ends.
func trickle(head, tail string, gap time.Duration) func(ctx context.Context, c net.Conn) {
	return func(ctx context.Context, c net.Conn) {
		if _, err := io.WriteString(c, head); err != nil {
			return
		}
		t := time.NewTicker(gap)
		defer t.Stop()
		for i := 0; i < len(tail); i++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if _, err := c.Write([]byte{tail[i]}); err != nil {
				return
			}
		}
	}
}

// Issue 13, item 3: headers, then one body byte every 500ms (and headers
// sent a byte at a time) no longer hold connections: the server closes
// them at --body-timeout / --header-timeout. --max-connections-per-client
// and --max-connections close connections over the caps at once, and the
// normal client keeps its latency throughout.
func TestSlowClientsAndConnectionCaps(t *testing.T) {
	s := serve(t, hardened("--body-timeout", "2s", "--header-timeout", "2s", "--idle-timeout", "5s",
		"--max-connections", "300", "--max-connections-per-client", "150")...)
	ctx := t.Context()
	p := newProbe(t, s, clientOpts{}, "probe/")
	idle := p.p50(t)

	const within = 12 * time.Second
	body := "POST /holdfast.lock.v1.LockService/Acquire HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
	slowBodies, waitBodies := rawConns(ctx, t, s, "127.0.0.2", 120, within, trickle(body, strings.Repeat(" ", 999), 500*time.Millisecond))
	slowHeaders, waitHeaders := rawConns(ctx, t, s, "127.0.0.3", 60, within, trickle("POST /holdfast.lock.v1.LockService/Acquire HTTP/1.1\r\n", strings.Repeat("X-Slow: x\r\n", 100), 500*time.Millisecond))
	attacked := p.p50(t)
	waitBodies()
	waitHeaders()
	close(slowBodies)
	close(slowHeaders)
	check := func(what string, closed chan time.Duration, bound time.Duration) {
		n, worst := 0, time.Duration(0)
		for d := range closed {
			if d < 0 {
				n++
				continue
			}
			worst = max(worst, d)
		}
		expect(t, n == 0 && worst <= bound, "%s: %d connections still open after %s, the others closed within %s (want all within %s)", what, n, within, worst, bound)
		t.Logf("%s: %d still open after %s; the others closed within %s", what, n, within, worst.Round(time.Millisecond))
	}
	check("slow bodies", slowBodies, 8*time.Second)
	check("slow headers", slowHeaders, 8*time.Second)
	unaffected(t, "3 slow bodies and headers", idle, attacked, 10)

	// Keep-alive connections that each made one request: a client's 151st
	// is closed at once, another client still connects; past 300 in all,
	// anyone's are; an idle one is closed after --idle-timeout.
	request := func(ctx context.Context, c net.Conn) {
		fmt.Fprintf(c, "GET /ui/ HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	idleConn, waitIdle := rawConns(ctx, t, s, "127.0.0.7", 1, 15*time.Second, request)
	held, waitHeld := rawConns(ctx, t, s, "127.0.0.4", 150, 4*time.Second, request)
	over, waitOver := rawConns(ctx, t, s, "127.0.0.4", 1, 4*time.Second, request)
	fresh := client(t, s, clientOpts{}) // a new connection of the normal client
	if _, err := fresh.GetServerInfo(ctx, &lockv1.GetServerInfoRequest{}); err != nil {
		t.Fatalf("a new connection of another client: %v", err)
	}
	crowd, waitCrowd := rawConns(ctx, t, s, "127.0.0.5", 160, 4*time.Second, request)
	atOnce := func(closed chan time.Duration) (refused, kept int) {
		for d := range closed {
			switch {
			case d < 0:
				kept++
			case d < time.Second:
				refused++
			}
		}
		return refused, kept
	}
	waitOver()
	close(over)
	refused, _ := atOnce(over)
	expect(t, refused == 1, "a client's connection over --max-connections-per-client was not closed at once")
	waitCrowd()
	close(crowd)
	refused, kept := atOnce(crowd)
	expect(t, refused > 0 && refused+kept == 160 && strings.Contains(s.Logs(), "(the server's --max-connections)"),
		"another client's 160 connections with 150 open already: %d closed at once, %d kept; want those past --max-connections 300 closed (and logged)", refused, kept)
	t.Logf("past --max-connections: %d of 160 closed at once", refused)
	// The 150 were kept (each answered, then idle until the read deadline).
	waitHeld()
	close(held)
	if _, kept := atOnce(held); kept != 150 {
		t.Fatalf("%d of a client's 150 keep-alive connections kept, want 150", kept)
	}
	waitIdle()
	close(idleConn)
	d := <-idleConn
	expect(t, d >= 4*time.Second && d <= 12*time.Second, "an idle keep-alive connection was closed after %s, want about --idle-timeout 5s", d)
}

// envelope frames one message of a Connect or gRPC stream.
func envelope(flags byte, msg []byte) []byte {
	b := make([]byte, 5, 5+len(msg))
	b[0] = flags
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// Issue 13, item 5: a Watch over HTTP/1.1 whose client stops reading is
// ended once a write has waited --write-timeout, like one over HTTP/2; the
// acquire path does not wait for it.
func TestStalledHTTP1WatcherIsEnded(t *testing.T) {
	s := serve(t, append([]string{"--metrics-addr", "127.0.0.1:0"}, hardened("--write-timeout", "2s")...)...)
	metrics := logged(t, s, metricsURLLine)
	ctx := t.Context()
	p := newProbe(t, s, clientOpts{}, "probe/")
	idle := p.p50(t)

	c, err := dialer("127.0.0.2").DialContext(ctx, "tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.(*net.TCPConn).SetReadBuffer(4 << 10)
	req := envelope(0, []byte(`{"prefix": "storm/"}`))
	fmt.Fprintf(c, "POST /holdfast.lock.v1.LockService/Watch HTTP/1.1\r\nHost: x\r\nContent-Type: application/connect+json\r\nContent-Length: %d\r\n\r\n%s", len(req), req)
	watchers := func() float64 {
		v, _, err := scrape(ctx, metrics, `holdfast_rpc_streams{method="Watch"}`)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if !eventually(10*time.Second, func() bool { return watchers() == 1 }) {
		t.Fatalf("the watch never opened (%v streams)", watchers())
	}

	// Events the watcher does not read: 8 writers acquire and release keys
	// with long holders until the server has ended the stream.
	storm := client(t, s, clientOpts{from: "127.0.0.3"})
	stop := during(t, func(ctx context.Context) {
		loop(ctx, 8, func(ctx context.Context, w int) {
			r, err := storm.Acquire(ctx, &lockv1.AcquireRequest{Key: fmt.Sprintf("storm/%d", w), Ttl: durationpb.New(time.Minute), Holder: strings.Repeat("h", 256)})
			if err == nil && r.GetAcquired() {
				_, _ = storm.Release(ctx, &lockv1.ReleaseRequest{Key: r.GetLease().GetKey(), OwnerToken: r.GetLease().GetOwnerToken()})
			}
		})
	})
	attacked := p.p50(t)
	start := time.Now()
	ended := eventually(30*time.Second, func() bool { return watchers() == 0 })
	stop()
	expect(t, ended, "the stalled HTTP/1.1 watcher is still open %s into the event storm", time.Since(start).Round(time.Second))
	t.Logf("stalled watcher ended: %t, %s after the probe", ended, time.Since(start).Round(time.Millisecond))
	unaffected(t, "5 stalled HTTP/1.1 watcher", idle, attacked, 10)
}
