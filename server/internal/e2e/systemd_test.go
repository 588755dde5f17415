package e2e

import (
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSystemdNotify: run as a Type=notify unit ($NOTIFY_SOCKET), the server
// sends READY=1 only once its port serves, and STOPPING=1 when SIGTERM
// starts its shutdown, which then completes with exit 0.
func TestSystemdNotify(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// What systemd would see, and whether the address it names answered at
	// the moment the datagram arrived.
	type note struct {
		fields map[string]string
		dialed error
	}
	notes := make(chan note, 4)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(notes)
				return
			}
			nt := note{fields: map[string]string{}}
			for _, line := range strings.Split(string(buf[:n]), "\n") {
				if k, v, ok := strings.Cut(line, "="); ok {
					nt.fields[k] = v
				}
			}
			if status := nt.fields["STATUS"]; strings.HasPrefix(status, "serving on ") {
				addr, _, _ := strings.Cut(strings.TrimPrefix(status, "serving on "), " ")
				c, err := net.DialTimeout("tcp", addr, 2*time.Second)
				if err == nil {
					c.Close()
				}
				nt.dialed = err
			}
			notes <- nt
		}
	}()
	next := func(what string) note {
		t.Helper()
		select {
		case nt, ok := <-notes:
			if !ok {
				t.Fatalf("notify socket closed before %s", what)
			}
			return nt
		case <-time.After(30 * time.Second):
			t.Fatalf("no %s on $NOTIFY_SOCKET within 30s", what)
		}
		return note{}
	}

	s := startServer(t, []string{"NOTIFY_SOCKET=" + sock}, "--addr", "127.0.0.1:0")
	ready := next("READY=1")
	if ready.fields["READY"] != "1" {
		t.Fatalf("first notification %v, want READY=1", ready.fields)
	}
	if want := "serving on " + s.addr + " (backend memory)"; ready.fields["STATUS"] != want {
		t.Fatalf("STATUS=%q, want %q", ready.fields["STATUS"], want)
	}
	if ready.dialed != nil {
		t.Fatalf("READY=1 sent before %s accepted connections: %v", s.addr, ready.dialed)
	}

	if err := s.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	stopping := next("STOPPING=1")
	if stopping.fields["STOPPING"] != "1" {
		t.Fatalf("notification after SIGTERM %v, want STOPPING=1", stopping.fields)
	}
	if err := s.stop(t); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
}
