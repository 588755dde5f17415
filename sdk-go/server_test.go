package holdfast

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The real server, driven as a subprocess per the team's readiness protocol:
// `holdfast serve --addr 127.0.0.1:0` prints one line to stdout once it
// serves. The binary comes from $HOLDFAST_BIN_DIR, else this package builds
// ../server/cmd/holdfast once into a temporary directory.

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

func holdfastBinary(t testing.TB) string {
	t.Helper()
	if dir := os.Getenv("HOLDFAST_BIN_DIR"); dir != "" {
		bin := filepath.Join(dir, "holdfast")
		if _, err := os.Stat(bin); err != nil {
			t.Fatalf("HOLDFAST_BIN_DIR=%s: %v (run `make build`)", dir, err)
		}
		return bin
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "holdfast-sdk-go-test-")
		if buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", filepath.Join(buildDir, "holdfast"), "./cmd/holdfast")
		cmd.Dir = filepath.Join("..", "server")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ../server/cmd/holdfast: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(buildDir, "holdfast")
}

// removeBuild deletes the temporary build, from TestMain.
func removeBuild() {
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
}

// testServer is one running `holdfast serve`.
type testServer struct {
	t      testing.TB
	cmd    *exec.Cmd
	addr   string // host:port
	URL    string
	stderr *syncBuffer
	exited chan struct{} // closed when the process has exited and been reaped
	waitMu sync.Mutex
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startServer starts `holdfast serve` on addr (127.0.0.1:0 for a free port)
// and waits for its readiness line. It is stopped at cleanup.
func startServer(t testing.TB, addr string, args ...string) *testServer {
	t.Helper()
	bin := holdfastBinary(t)
	s := &testServer{t: t, stderr: &syncBuffer{}, exited: make(chan struct{})}
	s.cmd = exec.Command(bin, append([]string{"serve", "--addr", addr}, args...)...)
	s.cmd.Stderr = s.stderr
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		defer close(ready)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "holdfast serving ") {
				ready <- line
				break
			}
		}
		// Drain until the process exits so it never blocks on stdout.
		for sc.Scan() {
		}
	}()
	go func() {
		_ = s.cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(s.stop)
	select {
	case line, ok := <-ready:
		if !ok {
			<-s.exited
			t.Fatalf("holdfast exited before serving:\n%s", s.stderr)
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "addr="); ok {
				s.addr = v
			}
		}
		if s.addr == "" {
			t.Fatalf("readiness line without addr: %q", line)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("holdfast did not print its readiness line within 60s:\n%s", s.stderr)
	}
	s.URL = "http://" + s.addr
	return s
}

// stop ends the server gracefully (SIGTERM), then by force after a while;
// a stopped (SIGSTOP) server is continued first.
func (s *testServer) stop() {
	s.waitMu.Lock()
	defer s.waitMu.Unlock()
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
		s.t.Logf("holdfast did not exit on SIGTERM within 15s; killed. stderr:\n%s", s.stderr)
	}
}

// pause freezes the server (SIGSTOP): connections stay open, calls hang.
func (s *testServer) pause() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		s.t.Fatal(err)
	}
}

func (s *testServer) resume() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		s.t.Fatal(err)
	}
}

// pluginPID is the backend plugin process the server started (its child),
// found through /proc by the server's PID.
func (s *testServer) pluginPID(t testing.TB) int {
	t.Helper()
	pid := s.cmd.Process.Pid
	deadline := time.Now().Add(10 * time.Second)
	for {
		// A child is listed under the thread that started it.
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
		for _, path := range tasks {
			b, _ := os.ReadFile(path)
			for _, f := range strings.Fields(string(b)) {
				var child int
				if _, err := fmt.Sscan(f, &child); err == nil {
					return child
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no plugin process under holdfast (pid %d)", pid)
		}
		time.Sleep(10 * time.Millisecond) // poll with a deadline
	}
}
