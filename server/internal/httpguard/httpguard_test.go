package httpguard

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestClientAddress(t *testing.T) {
	for peer, want := range map[string]string{
		"127.0.0.2:5000":               "127.0.0.2",
		"[::ffff:10.0.0.1]:80":         "10.0.0.1",
		"[2001:db8:1:2:3:4:5:6]:443":   "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff::1]:443":   "2001:db8:1:2::/64",
		"[fe80::1%eth0]:1":             "fe80::/64",
		"not an address":               "not an address",
		"unix-socket-peer:not-a-port:": "unix-socket-peer:not-a-port:",
	} {
		if got := ClientAddress(peer); got != want {
			t.Errorf("ClientAddress(%q) = %q, want %q", peer, got, want)
		}
	}
}

// dialFrom dials addr from the local IP from.
func dialFrom(t *testing.T, addr, from string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByPeer reports whether c is closed by the other side (a read ends
// in EOF or a reset) within 5s.
func closedByPeer(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && (!errors.As(err, &ne) || !ne.Timeout())
}

func TestListenerCaps(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := make(chan string, 10)
	ln := Limit(raw, 3, 2, func(client string, total bool) { refused <- fmt.Sprint(client, " total=", total) })
	accepted := make(chan net.Conn, 10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	defer func() { ln.Close(); <-done }()
	addr := ln.Addr().String()

	var held []net.Conn
	for _, from := range []string{"127.0.0.1", "127.0.0.1", "127.0.0.2"} {
		dialFrom(t, addr, from)
		held = append(held, <-accepted)
	}
	if ln.Open() != 3 {
		t.Fatalf("%d open, want 3", ln.Open())
	}
	if c := dialFrom(t, addr, "127.0.0.1"); !closedByPeer(c) {
		t.Fatal("a third connection from one client was kept")
	}
	if got := <-refused; got != "127.0.0.1 total=true" && got != "127.0.0.1 total=false" {
		t.Fatalf("refused %q", got)
	}
	if c := dialFrom(t, addr, "127.0.0.3"); !closedByPeer(c) {
		t.Fatal("a fourth connection on the server was kept")
	}
	if got := <-refused; got != "127.0.0.3 total=true" {
		t.Fatalf("refused %q, want the total", got)
	}
	// A closed connection gives its place back (once, however often it is
	// closed).
	held[0].Close()
	held[0].Close()
	dialFrom(t, addr, "127.0.0.3")
	held = append(held, <-accepted)
	if ln.Open() != 3 {
		t.Fatalf("%d open, want 3", ln.Open())
	}
	for _, c := range held {
		c.Close()
	}
	if ln.Open() != 0 {
		t.Fatalf("%d open after closing all, want 0", ln.Open())
	}
}

// serve runs h on a real HTTP/1.1 server on loopback.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	return ln.Addr().String()
}

func TestBodyDeadline(t *testing.T) {
	const limit = 300 * time.Millisecond
	type result struct {
		err       error
		ctxEnded  bool
		readWhole bool
	}
	results := make(chan result, 2)
	addr := serve(t, Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		res := result{err: err, readWhole: err == nil}
		if err == nil {
			// A long call after its body: the deadline must not end it.
			select {
			case <-r.Context().Done():
				res.ctxEnded = true
			case <-time.After(3 * limit):
			}
		}
		results <- res
		w.WriteHeader(http.StatusNoContent)
	}), Timeouts{Body: limit}))

	// A body sent whole at once; the call then runs past the deadline.
	resp, err := http.Post("http://"+addr, "text/plain", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if r := <-results; !r.readWhole || r.ctxEnded {
		t.Fatalf("a whole body: %+v, want read and the call not ended", r)
	}
	http.DefaultClient.CloseIdleConnections()

	// A body that trickles: its read fails with deadline_exceeded.
	c := dialFrom(t, addr, "127.0.0.1")
	start := time.Now()
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nx")
	r := <-results
	if connect.CodeOf(r.err) != connect.CodeDeadlineExceeded || !strings.Contains(r.err.Error(), "--body-timeout") {
		t.Fatalf("a trickling body: %v, want deadline_exceeded naming --body-timeout", r.err)
	}
	if took := time.Since(start); took < limit || took > limit+5*time.Second {
		t.Fatalf("the read failed after %s, want about %s", took, limit)
	}
	// The answer is the connection's last: the rest of the body is not
	// read as another request.
	resp, err = http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || !resp.Close {
		t.Fatalf("the answer to a late body: %v %v, want one that closes the connection", resp, err)
	}
	resp.Body.Close()
	if !closedByPeer(c) {
		t.Fatal("the connection of a late body stayed open")
	}
}

// serveH2C runs h on a real server on loopback that speaks cleartext
// HTTP/2, and returns a client that speaks it too.
func serveH2C(t *testing.T, h http.Handler) (string, *http.Client) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(func() { tr.CloseIdleConnections(); _ = srv.Close(); <-done })
	return "http://" + ln.Addr().String(), &http.Client{Transport: tr}
}

// The body deadline over HTTP/2, where it is the handler's own timer, not
// a deadline on the stream: a whole body leaves nothing armed, a late one
// fails its read.
func TestBodyDeadlineHTTP2(t *testing.T) {
	const limit = 300 * time.Millisecond
	type result struct {
		err      error
		proto    int
		ctxEnded bool
	}
	results := make(chan result, 1)
	url, client := serveH2C(t, Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		res := result{err: err, proto: r.ProtoMajor}
		if err == nil {
			select {
			case <-r.Context().Done():
				res.ctxEnded = true
			case <-time.After(3 * limit):
			}
		}
		results <- res
		w.WriteHeader(http.StatusNoContent)
	}), Timeouts{Body: limit}))

	resp, err := client.Post(url, "text/plain", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if r := <-results; r.err != nil || r.proto != 2 || r.ctxEnded {
		t.Fatalf("a whole body: %+v, want read over HTTP/2 and the call not ended", r)
	}

	// A body that stops after its first byte.
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() { _, _ = pw.Write([]byte("x")) }()
	start := time.Now()
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		if resp, err := client.Post(url, "text/plain", pr); err == nil {
			resp.Body.Close()
		}
	}()
	r := <-results
	if connect.CodeOf(r.err) != connect.CodeDeadlineExceeded || !strings.Contains(r.err.Error(), "--body-timeout") {
		t.Fatalf("a stalled body: %v, want deadline_exceeded naming --body-timeout", r.err)
	}
	if took := time.Since(start); took < limit || took > limit+5*time.Second {
		t.Fatalf("the read failed after %s, want about %s", took, limit)
	}
	pw.Close()
	<-answered
}

func TestWriteDeadline(t *testing.T) {
	const limit = 300 * time.Millisecond
	writeErr := make(chan error, 1)
	addr := serve(t, Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := []byte(strings.Repeat("x", 64<<10))
		for {
			if _, err := w.Write(chunk); err != nil {
				writeErr <- err
				return
			}
			if err := http.NewResponseController(w).Flush(); err != nil {
				writeErr <- err
				return
			}
		}
	}), Timeouts{Write: limit}))
	// A client that asks and then never reads.
	d := net.Dialer{Control: nil}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.(*net.TCPConn).SetReadBuffer(4 << 10)
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	select {
	case err := <-writeErr:
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("the stalled write: %v, want a timeout", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a write to a client that does not read never ended")
	}
	// A client that reads gets everything, however long the gaps between
	// writes.
	addr = serve(t, Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := range 3 {
			fmt.Fprintf(w, "line %d\n", i)
			http.NewResponseController(w).Flush()
			if i < 2 {
				time.Sleep(2 * limit) // quiet between messages, like a Watch
			}
		}
	}), Timeouts{Write: limit}))
	c2 := dialFrom(t, addr, "127.0.0.1")
	fmt.Fprintf(c2, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c2), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(b) != "line 0\nline 1\nline 2\n" {
		t.Fatalf("a quiet stream: %q %v", b, err)
	}
}

// deadlineCounter is a response writer that counts the write deadlines
// set on it (found by http.ResponseController through Unwrap).
type deadlineCounter struct {
	http.ResponseWriter
	set int
}

func (d *deadlineCounter) SetWriteDeadline(time.Time) error { d.set++; return nil }
func (d *deadlineCounter) FlushError() error                { return nil }

// A streamed response's messages, each written and flushed in time, change
// no deadline on the connection: over HTTP/2 every change is a message to
// the connection's serve goroutine, and a Watch event used to cost two.
// The one deadline is set when the handler returns, for what the server
// writes after it.
func TestWriteDeadlineCostsNothingPerMessage(t *testing.T) {
	const messages = 100
	d := &deadlineCounter{ResponseWriter: httptest.NewRecorder()}
	h := Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		for i := range messages {
			fmt.Fprintf(w, "event %d\n", i)
			if err := rc.Flush(); err != nil {
				t.Errorf("flush %d: %v", i, err)
				return
			}
		}
	}), Timeouts{Write: time.Minute})
	h.ServeHTTP(d, httptest.NewRequest(http.MethodGet, "/", nil))
	if d.set != 1 {
		t.Fatalf("%d write deadlines set for %d messages, want 1 (when the handler returned)", d.set, messages)
	}
}

// Over HTTP/2 a stream whose client stops reading is ended once a write has
// waited for the limit (the writer's own timer), not held for good.
func TestWriteDeadlineHTTP2(t *testing.T) {
	const limit = 300 * time.Millisecond
	writeErr := make(chan error, 1)
	url, client := serveH2C(t, Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		chunk := []byte(strings.Repeat("x", 64<<10))
		for {
			if _, err := w.Write(chunk); err != nil {
				writeErr <- err
				return
			}
			if err := rc.Flush(); err != nil {
				writeErr <- err
				return
			}
		}
	}), Timeouts{Write: limit}))
	resp, err := client.Get(url) // and never read the body
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("served over HTTP/%d, want 2", resp.ProtoMajor)
	}
	select {
	case err := <-writeErr:
		if err == nil {
			t.Fatal("the stalled write ended without an error")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a write to an HTTP/2 client that does not read never ended")
	}
}

func TestLogWriter(t *testing.T) {
	var out strings.Builder
	w := NewLogWriter(&out, 2, time.Minute)
	now := time.Unix(1000, 0)
	w.now = func() time.Time { return now }
	for i := range 5 {
		fmt.Fprintf(w, "line %d\n", i)
	}
	now = now.Add(time.Minute)
	fmt.Fprintf(w, "line 5\n")
	fmt.Fprintf(w, "line 6\n")
	fmt.Fprintf(w, "line 7\n")
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	want := "line 0\nline 1\n3 similar lines suppressed (at most 2 per 1m0s)\nline 5\nline 6\n1 similar lines suppressed (at most 2 per 1m0s)\n"
	if out.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", out.String(), want)
	}
}
