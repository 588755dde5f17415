package holdfast

import (
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast/holdfast/harness"
)

// The real server, driven as a subprocess through the harness module (the
// one copy of the readiness protocol): `holdfast serve` prints one line to
// stdout once it serves. The binary comes from $HOLDFAST_BIN_DIR, else it is
// built once into a temporary directory.

var buildDir = sync.OnceValues(func() (string, error) { return os.MkdirTemp("", "holdfast-sdk-go-test-") })

func holdfastBinary(t testing.TB) string {
	t.Helper()
	dir, err := buildDir()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := harness.Binary(t.Context(), dir, "holdfast")
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// removeBuild deletes the temporary build, from TestMain.
func removeBuild() {
	if dir, err := buildDir(); err == nil {
		_ = os.RemoveAll(dir)
	}
}

// testServer is one running `holdfast serve`.
type testServer struct {
	*harness.Server
	t    testing.TB
	addr string // host:port
}

// startServer starts `holdfast serve` on addr (127.0.0.1:0 for a free port)
// and waits for its readiness line. It is stopped at cleanup.
func startServer(t testing.TB, addr string, args ...string) *testServer {
	t.Helper()
	hs, err := harness.Start(t.Context(), harness.Options{Binary: holdfastBinary(t), Addr: addr, Args: args, ReadyTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{Server: hs, t: t, addr: hs.Addr}
	t.Cleanup(s.stop)
	return s
}

// stop ends the server gracefully (SIGTERM; a stopped server is continued
// first), then by force after a while.
func (s *testServer) stop() {
	if err := s.Stop(15 * time.Second); err != nil {
		s.t.Logf("stopping holdfast: %v", err)
	}
}

// pause freezes the server (SIGSTOP): connections stay open, calls hang.
// It returns once every thread of the server is stopped: the harness's
// Signal waits for that (polling /proc every 1 ms), since kill returns
// before the threads stop and the server may answer until then.
func (s *testServer) pause() {
	s.t.Helper()
	if err := s.Signal(syscall.SIGSTOP); err != nil {
		s.t.Fatal(err)
	}
}

func (s *testServer) resume() {
	s.t.Helper()
	if err := s.Signal(syscall.SIGCONT); err != nil {
		s.t.Fatal(err)
	}
}

// pluginPID is the backend plugin process the server started (its child).
func (s *testServer) pluginPID(t testing.TB) int {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) { // poll with a deadline
		if kids := s.Children(); len(kids) > 0 {
			return kids[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no plugin process under holdfast (pid %d)", s.PID())
		}
	}
}
