package httpguard

import (
	"errors"
	"net"
	"sync"
	"time"
)

// firstReadBytes is how much of a connection's first bytes Awaiting reads
// at once: net/http's own read buffer, so that a request's headers that
// arrived together are handed on together.
const firstReadBytes = 4 << 10

// Awaiting hands out a connection only once its first bytes have arrived,
// and closes one that sends nothing within its wait.
//
// net/http times a connection's first request from the accept: its header
// timeout (ReadHeaderTimeout) also bounds how long a new connection may
// stay unused, while between later requests the connection is idle,
// bounded by IdleTimeout, and the header timeout counts from the next
// request's first byte. Clients do keep new connections unused: Go's
// http.Transport dials for a request that another connection then serves
// and parks the new one in its pool (for up to 90s by default), so with a
// 10s header timeout a request sent on it later met a connection the
// server was closing. It lost the connection (the client saw EOF), or,
// when net/http had read the first 14 bytes (its h2c preface check)
// before the deadline and the rest after, was answered a plain-text
// "400 Bad Request" (a timed-out read ends a partial request line without
// its error, golang/go#56390) that Connect clients read as internal.
// Behind Awaiting a new connection is idle until it speaks, as between
// requests, and the header timeout starts when the request is there.
//
// Below TLS the first bytes are the ClientHello, which clients send when
// they dial; the wait after the handshake is net/http's again (Go clients
// negotiate HTTP/2 there, which has no header timeout).
type Awaiting struct {
	net.Listener
	wait time.Duration // 0: no bound

	ready   chan net.Conn // connections whose first bytes arrived
	errs    chan error    // the inner Accept's errors, for Accept
	done    chan struct{} // closed by Close
	stopped chan struct{} // closed when the accept loop has ended
	err     error         // why it ended, set before stopped is closed
	once    sync.Once
	workers sync.WaitGroup // the accept loop and each connection's wait

	mu      sync.Mutex
	waiting map[net.Conn]struct{} // closed by Close to end their waits
}

// Await wraps ln: a connection is handed out by Accept once its first
// bytes arrive, or closed when none arrive within wait (0: no bound).
// Close ends every wait; it must be called to stop the goroutines.
func Await(ln net.Listener, wait time.Duration) *Awaiting {
	a := &Awaiting{
		Listener: ln,
		wait:     wait,
		ready:    make(chan net.Conn),
		errs:     make(chan error),
		done:     make(chan struct{}),
		stopped:  make(chan struct{}),
		waiting:  map[net.Conn]struct{}{},
	}
	a.workers.Add(1)
	go a.acceptLoop()
	return a
}

// Accept returns the next connection whose first bytes have arrived, or
// an error of the inner listener's Accept (net.ErrClosed after Close).
func (a *Awaiting) Accept() (net.Conn, error) {
	select {
	case c := <-a.ready:
		return c, nil
	case err := <-a.errs:
		return nil, err
	case <-a.stopped:
		return nil, a.err
	case <-a.done:
		return nil, net.ErrClosed
	}
}

// Close closes the inner listener and every connection still waiting for
// its first bytes, and waits for the goroutines to end.
func (a *Awaiting) Close() error {
	var err error
	a.once.Do(func() {
		close(a.done)
		err = a.Listener.Close()
		a.mu.Lock()
		for c := range a.waiting {
			_ = c.Close()
		}
		a.mu.Unlock()
	})
	a.workers.Wait()
	return err
}

// acceptLoop accepts connections and starts each one's wait. The inner
// Accept's errors go to Accept one by one, so that a caller that backs off
// on a temporary error (http.Server on EMFILE) paces the loop; the loop
// ends at Close, or when the inner listener was closed under it (Accept
// then reports that error).
func (a *Awaiting) acceptLoop() {
	defer a.workers.Done()
	defer close(a.stopped)
	for {
		c, err := a.Listener.Accept()
		if errors.Is(err, net.ErrClosed) {
			a.err = err
			return
		}
		if err != nil {
			select {
			case a.errs <- err:
				continue
			case <-a.done:
				return
			}
		}
		if !a.track(c) {
			_ = c.Close()
			return
		}
		a.workers.Add(1)
		go a.awaitFirstBytes(c)
	}
}

// track records c as waiting; false once Close began.
func (a *Awaiting) track(c net.Conn) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	select {
	case <-a.done:
		return false
	default:
	}
	a.waiting[c] = struct{}{}
	return true
}

func (a *Awaiting) untrack(c net.Conn) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.waiting, c)
}

// awaitFirstBytes reads what c sends first and hands c, those bytes in
// front, to Accept; a connection that sends nothing within the wait, or
// that its client closed, is closed.
func (a *Awaiting) awaitFirstBytes(c net.Conn) {
	defer a.workers.Done()
	if a.wait > 0 {
		_ = c.SetReadDeadline(time.Now().Add(a.wait))
	}
	buf := make([]byte, firstReadBytes)
	n, _ := c.Read(buf) // an error with no bytes ends the connection; with bytes, the next read returns it again
	a.untrack(c)
	if n == 0 {
		_ = c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	select {
	case a.ready <- &prefixed{Conn: c, first: buf[:n]}:
	case <-a.done:
		_ = c.Close()
	}
}

// prefixed is a connection whose first bytes were already read.
type prefixed struct {
	net.Conn
	first []byte // not yet returned by Read
}

func (c *prefixed) Read(p []byte) (int, error) {
	if len(c.first) == 0 {
		return c.Conn.Read(p)
	}
	n := copy(p, c.first)
	c.first = c.first[n:]
	if len(c.first) == 0 {
		c.first = nil // the buffer goes with the last of its bytes
	}
	return n, nil
}
