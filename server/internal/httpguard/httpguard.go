// Package httpguard keeps slow and abusive clients from holding the HTTP
// server's resources: connections, goroutines and the log.
//
//   - Listener caps open connections in total and per client address (an
//     IP, or an IPv6 /64); a connection over a cap is closed as soon as it
//     is accepted, so the process never reaches its file descriptor limit
//     and clients already connected are served on.
//   - Handler gives every request body a read deadline (a unary call's
//     request arrives whole within it, or the call answers
//     deadline_exceeded and the connection or stream is dropped) and every
//     response write a write deadline (a client that stops reading, such as
//     a Watch over HTTP/1.1 whose reader stalled, has its stream ended
//     instead of holding a goroutine forever). Deadlines are armed only
//     while a read or a write is outstanding, so an open Watch may stay
//     quiet for as long as nothing happens.
//   - Awaiting hands a connection to the server only once its first bytes
//     have arrived, and closes one that stays silent for the idle timeout:
//     net/http's header timeout would otherwise run from the accept and
//     close a connection a client dialed early and uses later.
//   - LogWriter lets a burst of the http.Server's own error lines (a TLS
//     handshake failure per connection from an unauthenticated peer) through
//     at a bounded rate and counts the rest.
//
// Header and idle timeouts are otherwise the http.Server's own
// (ReadHeaderTimeout, IdleTimeout), set by package httpserver.
package httpguard

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"time"

	"connectrpc.com/connect"
)

// ClientAddress is the part of a peer address ("IP:port") that names one
// client: the IP, or the /64 of an IPv6 address (one host owns a /64).
func ClientAddress(peer string) string {
	host, _, err := net.SplitHostPort(peer)
	if err != nil {
		host = peer
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// Listener caps the connections it hands out. Close a connection to give
// its place back.
type Listener struct {
	net.Listener
	total, perClient int // bounds; 0: unbounded
	onRefuse         func(client string, total bool)

	mu   sync.Mutex
	open int
	per  map[string]int
}

// Limit wraps ln: at most total open connections in all (0: unbounded), at
// most perClient from one client address (0: unbounded). onRefuse, when
// set, is told of each connection closed over a cap.
func Limit(ln net.Listener, total, perClient int, onRefuse func(client string, total bool)) *Listener {
	return &Listener{Listener: ln, total: total, perClient: perClient, onRefuse: onRefuse, per: map[string]int{}}
}

// Accept returns the next connection within the caps; connections over a
// cap are closed at once and not returned.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		client := ClientAddress(c.RemoteAddr().String())
		if over, total := l.take(client); over {
			_ = c.Close()
			if l.onRefuse != nil {
				l.onRefuse(client, total)
			}
			continue
		}
		return &conn{Conn: c, l: l, client: client}, nil
	}
}

// Open is the number of connections open now.
func (l *Listener) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

func (l *Listener) take(client string) (over, total bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total > 0 && l.open >= l.total {
		return true, true
	}
	if l.perClient > 0 && l.per[client] >= l.perClient {
		return true, false
	}
	l.open++
	l.per[client]++
	return false, false
}

func (l *Listener) give(client string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.per[client]--; l.per[client] <= 0 {
		delete(l.per, client)
	}
}

type conn struct {
	net.Conn
	l      *Listener
	client string
	once   sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.give(c.client) })
	return err
}

// Timeouts are Handler's deadlines; a zero field is no deadline.
type Timeouts struct {
	// Body: a request body must arrive whole within this, from the moment
	// its handler starts.
	Body time.Duration
	// Write: each write of a response (a message, a flush) must be taken
	// by the client within this.
	Write time.Duration
}

// Handler applies t to every request next serves.
func Handler(next http.Handler, t Timeouts) http.Handler {
	if t.Body <= 0 && t.Write <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if t.Body > 0 && r.Body != nil && r.Body != http.NoBody && canSetReadDeadline(w) {
			b := &body{ReadCloser: r.Body, rc: rc, limit: t.Body, deadline: time.Now().Add(t.Body)}
			if r.ProtoMajor == 1 {
				// The rest of a late body cannot be read: the
				// connection goes with the answer (HTTP/2 resets only
				// the stream).
				b.onTimeout = func() { w.Header().Set("Connection", "close") }
			}
			b.timer = time.AfterFunc(t.Body, b.expire)
			defer b.handlerDone()
			r.Body = b
		}
		if t.Write > 0 {
			gw := &writer{ResponseWriter: w, rc: rc, limit: t.Write}
			defer gw.handlerDone()
			w = gw
		}
		next.ServeHTTP(w, r)
	})
}

// canSetReadDeadline reports whether w (or a writer it wraps) takes read
// deadlines, as http.ResponseController would find.
func canSetReadDeadline(w http.ResponseWriter) bool {
	for {
		switch t := w.(type) {
		case interface{ SetReadDeadline(time.Time) error }:
			return true
		case interface{ Unwrap() http.ResponseWriter }:
			w = t.Unwrap()
		default:
			return false
		}
	}
}

// The states of a body's deadline.
const (
	bodyReading = iota // the timer runs
	bodyDone           // read whole, or its handler returned: nothing armed
	bodyExpired        // the deadline passed while it was being read
)

// body bounds the reading of a request body by its own timer, which sets
// a deadline in the past on the request only if it fires: a body that
// arrives in time (nearly all of them: a unary call's request comes whole
// with its headers) costs no deadline change on the connection. Over
// HTTP/2 every deadline change is a message to the connection's serve
// goroutine, two per request when the deadline was set at the start and
// cleared at the end; one connection's requests all queue on that
// goroutine. Nothing stays armed once the body has been read whole: a
// long call (a waiting Acquire, a Watch) must not be cut off afterwards.
// (Over HTTP/1.1 the server reads on in the background to notice a client
// that goes away; a deadline left armed would end the call.)
type body struct {
	io.ReadCloser
	rc        *http.ResponseController
	limit     time.Duration
	deadline  time.Time
	onTimeout func()
	timer     *time.Timer

	mu    sync.Mutex // the state, and the request's deadline changes
	state int
}

// expiredDeadline is a deadline long past: setting it fails the read in
// progress and every later one at once.
var expiredDeadline = time.Unix(1, 0)

// expire runs on the timer: the body is late.
func (b *body) expire() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != bodyReading {
		return // read whole, or its handler returned: rc is not ours any more
	}
	b.state = bodyExpired
	_ = b.rc.SetReadDeadline(expiredDeadline)
}

// handlerDone hands a body not read whole back to the server with the
// deadline it had (the server may read the rest after the handler), and
// stops the timer.
func (b *body) handlerDone() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.timer.Stop()
	if b.state == bodyReading {
		b.state = bodyDone
		_ = b.rc.SetReadDeadline(b.deadline)
	}
}

// readWhole ends the deadline once the body has been read whole.
func (b *body) readWhole() {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case bodyReading:
		b.timer.Stop()
	case bodyExpired:
		// It fired as the last bytes came: the body is whole after all,
		// and the call goes on without a deadline.
		_ = b.rc.SetReadDeadline(time.Time{})
	default:
		return
	}
	b.state = bodyDone
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		b.readWhole()
	case isTimeout(err):
		if b.onTimeout != nil {
			b.onTimeout()
		}
		// A *connect.Error passes through Connect's readers as it is.
		return n, connect.NewError(connect.CodeDeadlineExceeded,
			fmt.Errorf("request body: not received whole within %s (the server's --body-timeout)", b.limit))
	}
	return n, err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// writer bounds each write of a response by a timer of its own, armed at
// the first write after a flush and stopped by the next flush: a client that
// does not take a response within the limit loses its stream (HTTP/2) or
// connection (HTTP/1.1), while a Watch with nothing to send for a long while
// has nothing armed. Only a timer that fires touches the connection (a
// deadline in the past, as body does for reads). Setting and clearing a
// real write deadline per message instead would cost every Watch event two
// deadline changes, each over HTTP/2 a message to the connection's serve
// goroutine (and a timer it makes and stops): with watchers of every key
// that was a fifth of the fan-out's work.
type writer struct {
	http.ResponseWriter
	rc    *http.ResponseController
	limit time.Duration

	mu      sync.Mutex  // the fields below, and rc once the handler may have returned
	timer   *time.Timer // made at the first write
	pending bool        // written since the last flush: the timer runs
	expired bool        // a write timed out: the deadline stays in the past
	done    bool        // the handler returned: rc is the server's again
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *writer) arm() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pending || w.expired || w.done {
		return
	}
	w.pending = true
	if w.timer == nil {
		w.timer = time.AfterFunc(w.limit, w.expire)
		return
	}
	w.timer.Reset(w.limit)
}

// expire runs on the timer: a write or flush outstanding since it was
// armed has not been taken within the limit.
func (w *writer) expire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.pending || w.expired || w.done {
		return // flushed in time, or the handler returned
	}
	// Left expired: the write in progress and every later one (the
	// server's own flush of what is buffered) fail at once instead of
	// blocking for good.
	w.expired = true
	_ = w.rc.SetWriteDeadline(expiredDeadline)
}

func (w *writer) settle(err error, flushed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case err != nil && isTimeout(err):
		w.expired = true
	case flushed && w.pending && !w.expired:
		w.timer.Stop()
		w.pending = false
	}
}

func (w *writer) Write(p []byte) (int, error) {
	w.arm()
	n, err := w.ResponseWriter.Write(p)
	w.settle(err, false)
	return n, err
}

// Flush implements http.Flusher (Connect flushes every stream message).
func (w *writer) Flush() { _ = w.FlushError() }

// FlushError is what http.ResponseController calls.
func (w *writer) FlushError() error {
	w.arm()
	err := w.rc.Flush()
	w.settle(err, true)
	return err
}

// handlerDone hands the response back to the server with a real write
// deadline for what it writes after the handler returns (the rest of the
// response it buffered: all of a unary answer), and stops the timer, which
// must not touch rc from then on. A unary call costs one deadline change,
// as it did when its first write armed one.
func (w *writer) handlerDone() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
	if w.timer != nil {
		w.timer.Stop()
	}
	if !w.expired {
		_ = w.rc.SetWriteDeadline(time.Now().Add(w.limit))
	}
}

// LogWriter passes at most burst lines per interval to next and counts the
// others; the count is reported with the next line that passes. It is for
// http.Server.ErrorLog, whose lines come from clients (a failed TLS
// handshake per connection) and would otherwise let any peer fill the log.
type LogWriter struct {
	next     io.Writer
	burst    int
	interval time.Duration
	now      func() time.Time

	mu         sync.Mutex
	start      time.Time
	passed     int
	suppressed int
}

// NewLogWriter passes burst lines per interval to next.
func NewLogWriter(next io.Writer, burst int, interval time.Duration) *LogWriter {
	return &LogWriter{next: next, burst: burst, interval: interval, now: time.Now}
}

// Write implements io.Writer; each call is one line (log.Logger writes a
// line at a time).
func (w *LogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	if now.Sub(w.start) >= w.interval {
		w.start, w.passed = now, 0
	}
	if w.passed >= w.burst {
		w.suppressed++
		return len(p), nil
	}
	w.passed++
	if w.suppressed > 0 {
		if _, err := fmt.Fprintf(w.next, "%d similar lines suppressed (at most %d per %s)\n", w.suppressed, w.burst, w.interval); err != nil {
			return 0, err
		}
		w.suppressed = 0
	}
	return w.next.Write(p)
}

// Flush reports lines suppressed since the last one passed, if any.
func (w *LogWriter) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.suppressed == 0 {
		return nil
	}
	_, err := fmt.Fprintf(w.next, "%d similar lines suppressed (at most %d per %s)\n", w.suppressed, w.burst, w.interval)
	w.suppressed = 0
	return err
}
