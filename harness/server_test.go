package harness_test

import (
	"errors"
	"net/http"
	"syscall"
	"testing"

	"github.com/holdfast/holdfast/harness"
)

func TestParseReadyLine(t *testing.T) {
	f, err := harness.ParseReadyLine("holdfast serving addr=127.0.0.1:4242 backend=memory shared=false durable=false")
	if err != nil {
		t.Fatal(err)
	}
	if f["addr"] != "127.0.0.1:4242" || f["backend"] != "memory" || f["shared"] != "false" {
		t.Errorf("fields %v", f)
	}
	for _, bad := range []string{"", "serving addr=x", "holdfast serving addr"} {
		if _, err := harness.ParseReadyLine(bad); err == nil {
			t.Errorf("ParseReadyLine(%q) accepted", bad)
		}
	}
}

// A real server starts on a free port, says what it runs, serves, and stops
// gracefully on SIGTERM.
func TestStartStop(t *testing.T) {
	s := harness.StartT(t, harness.Options{Backend: "memory"})
	if s.Backend != "memory" || s.Shared || s.Durable {
		t.Errorf("readiness line: backend=%q shared=%v durable=%v, want memory false false", s.Backend, s.Shared, s.Durable)
	}
	if s.PID() <= 0 {
		t.Errorf("PID %d", s.PID())
	}
	if out := s.Stdout(); len(out) != 1 || out[0] != s.ReadyLine {
		t.Errorf("stdout %q, want only the readiness line", out)
	}
	// The memory plugin is the server's child.
	if kids := s.Children(); len(kids) != 1 {
		t.Errorf("children %v, want the plugin", kids)
	}
	// Any HTTP answer proves the port serves (the root path is not an RPC).
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get(s.URL + "/")
	if err != nil {
		t.Fatalf("GET %s: %v", s.URL, err)
	}
	resp.Body.Close()
	if err := s.Stop(0); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("Done not closed after Stop")
	}
	if err := s.Stop(0); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

// A server that cannot start is reported with its logs, not waited on.
func TestStartFailureIsReported(t *testing.T) {
	_, err := harness.Start(t.Context(), harness.Options{
		BuildDir: t.TempDir(),
		Backend:  "/nonexistent/holdfast-backend-nothing",
	})
	if !errors.Is(err, harness.ErrNotReady) {
		t.Fatalf("Start with a missing plugin: %v, want ErrNotReady", err)
	}
}

// Kill and Signal act on the server's own PID.
func TestKill(t *testing.T) {
	s := harness.StartT(t, harness.Options{Backend: "memory"})
	if err := s.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := s.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	<-s.Done()
}
