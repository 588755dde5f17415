package httpguard

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// awaitOn listens on loopback behind Await(wait); Close runs at cleanup.
func awaitOn(t *testing.T, wait time.Duration) *Awaiting {
	t.Helper()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := Await(raw, wait)
	t.Cleanup(func() { _ = a.Close() })
	return a
}

// accepted is one Accept's outcome.
type accepted struct {
	c   net.Conn
	err error
}

func acceptAsync(a *Awaiting) <-chan accepted {
	ch := make(chan accepted, 1)
	go func() {
		c, err := a.Accept()
		ch <- accepted{c, err}
	}()
	return ch
}

// readN reads n bytes from c within 5s.
func readN(t *testing.T, c net.Conn, n int) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("reading %d bytes: %v", n, err)
	}
	return string(b)
}

// A connection is handed out once it has sent something, with what it
// sent, whatever the order of the dials; a silent one waits.
func TestAwaitHandsOutConnectionsOnceTheySpeak(t *testing.T) {
	a := awaitOn(t, time.Minute)
	addr := a.Addr().String()
	silent := dialFrom(t, addr, "127.0.0.1")
	speaking := dialFrom(t, addr, "127.0.0.1")
	if _, err := io.WriteString(speaking, "first"); err != nil {
		t.Fatal(err)
	}
	got := <-acceptAsync(a)
	if got.err != nil {
		t.Fatal(got.err)
	}
	defer got.c.Close()
	if got.c.RemoteAddr().String() != speaking.LocalAddr().String() {
		t.Fatalf("Accept returned %s, want the connection that spoke (%s), not the silent one (%s)",
			got.c.RemoteAddr(), speaking.LocalAddr(), silent.LocalAddr())
	}
	if _, err := io.WriteString(speaking, " then more"); err != nil {
		t.Fatal(err)
	}
	if s := readN(t, got.c, len("first then more")); s != "first then more" {
		t.Fatalf("the server read %q", s)
	}

	// The silent one is handed out when it speaks, and its bytes go both
	// ways.
	if _, err := io.WriteString(silent, "late"); err != nil {
		t.Fatal(err)
	}
	late := <-acceptAsync(a)
	if late.err != nil {
		t.Fatal(late.err)
	}
	defer late.c.Close()
	if s := readN(t, late.c, 4); s != "late" {
		t.Fatalf("the server read %q", s)
	}
	if _, err := io.WriteString(late.c, "answer"); err != nil {
		t.Fatal(err)
	}
	if s := readN(t, silent, 6); s != "answer" {
		t.Fatalf("the client read %q", s)
	}
}

// A connection that sends nothing within the wait is closed and never
// handed out; the next one that speaks is.
func TestAwaitClosesSilentConnections(t *testing.T) {
	a := awaitOn(t, 100*time.Millisecond)
	addr := a.Addr().String()
	next := acceptAsync(a)
	silent := dialFrom(t, addr, "127.0.0.1")
	if !closedByPeer(silent) {
		t.Fatal("a connection that sent nothing was kept past the wait")
	}
	speaking := dialFrom(t, addr, "127.0.0.1")
	if _, err := io.WriteString(speaking, "x"); err != nil {
		t.Fatal(err)
	}
	got := <-next
	if got.err != nil {
		t.Fatal(got.err)
	}
	defer got.c.Close()
	if got.c.RemoteAddr().String() != speaking.LocalAddr().String() {
		t.Fatalf("Accept returned %s, want %s (the silent %s was closed)", got.c.RemoteAddr(), speaking.LocalAddr(), silent.LocalAddr())
	}
}

// Close closes the connections still waiting, ends every goroutine
// (goleak checks) and makes Accept answer net.ErrClosed.
func TestAwaitCloseEndsWaits(t *testing.T) {
	a := awaitOn(t, time.Minute)
	addr := a.Addr().String()
	pending := acceptAsync(a)
	var silent []net.Conn
	for range 3 {
		silent = append(silent, dialFrom(t, addr, "127.0.0.1"))
	}
	// A fourth speaks, so the three are known to be accepted and waiting
	// (the listener accepts in order) before Close.
	speaking := dialFrom(t, addr, "127.0.0.1")
	if _, err := io.WriteString(speaking, "x"); err != nil {
		t.Fatal(err)
	}
	got := <-pending
	if got.err != nil {
		t.Fatal(got.err)
	}
	got.c.Close()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	for i, c := range silent {
		if !closedByPeer(c) {
			t.Fatalf("waiting connection %d kept open after Close", i)
		}
	}
	if _, err := a.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v, want net.ErrClosed", err)
	}
}

// The inner listener's errors reach Accept: one closed under Awaiting
// ends its Accept.
func TestAwaitReportsTheInnerListenersError(t *testing.T) {
	a := awaitOn(t, time.Minute)
	if err := a.Listener.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept with the inner listener closed: %v, want net.ErrClosed", err)
	}
}
