package opstest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// root is the repository's top directory (this package is tools/ops/opstest).
var root = func() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return filepath.Clean(filepath.Join(wd, "..", "..", ".."))
}()

// version is the release the artifacts carry: VERSION, else 0.1.0 (as the
// Makefile reads it).
func version(t testing.TB) string {
	b, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if os.IsNotExist(err) {
		return "0.1.0"
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// dist is where make dist-oci and make dist-deb wrote.
func dist() string {
	if d := os.Getenv("HOLDFAST_OPS_DIST"); d != "" {
		return d
	}
	return filepath.Join(root, "dist")
}

// tool is bin/NAME, built by scripts/setup.d/70-ops.sh.
func tool(t testing.TB, name string) string {
	t.Helper()
	dir := os.Getenv("HOLDFAST_BIN_DIR")
	if dir == "" {
		dir = filepath.Join(root, "bin")
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s: %v (make test-ops builds it: scripts/setup.d/70-ops.sh)", name, err)
	}
	return p
}

// requireServices reports whether a missing prerequisite fails the test
// (make test) rather than skipping it.
func requireServices() bool { return os.Getenv("HOLDFAST_REQUIRE_SERVICES") == "1" }

// run runs a command and returns its combined output, failing the test on
// a non-zero exit.
func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := runErr(name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func runErr(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	return string(out), err
}

// exitCode runs a command and returns its exit status and output.
func exitCode(t testing.TB, name string, args ...string) (int, string) {
	t.Helper()
	out, err := runErr(name, args...)
	if err == nil {
		return 0, out
	}
	var ee *exec.ExitError
	if ok := asExit(err, &ee); !ok {
		t.Fatalf("%s: %v", name, err)
	}
	return ee.ExitCode(), out
}

func asExit(err error, ee **exec.ExitError) bool { return errors.As(err, ee) }

// hostPlatform is the os-arch this machine runs, as dist/ names them.
func hostPlatform() string { return runtime.GOOS + "-" + runtime.GOARCH }

// readiness is holdfast serve's one line on stdout.
var readiness = regexp.MustCompile(`holdfast serving addr=(\S+) backend=(\S+) shared=(true|false) durable=(true|false)`)

// process is a running holdfast serve started by a test.
type process struct {
	cmd    *exec.Cmd
	stderr *lockedBuffer
	line   []string // readiness fields: addr, backend, shared, durable
	done   chan error
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// start runs cmd (a holdfast serve) and waits for its readiness line; it is
// stopped by PID (SIGKILL) at cleanup if the test did not stop it.
func start(t *testing.T, cmd *exec.Cmd) *process {
	t.Helper()
	p := &process{cmd: cmd, stderr: &lockedBuffer{}, done: make(chan error, 1)}
	cmd.Stderr = p.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := readiness.FindStringSubmatch(sc.Text()); m != nil {
				lines <- m[1:]
			}
		}
		close(lines)
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			if err := <-p.done; t.Failed() {
				t.Logf("%s killed at cleanup: %v", cmd.Path, err)
			}
		}
		if t.Failed() {
			t.Logf("%s stderr:\n%s", cmd.Path, p.stderr)
		}
	})
	select {
	case m, ok := <-lines:
		if !ok {
			t.Fatalf("%s exited before serving: %v\n%s", cmd.Path, <-p.done, p.stderr)
		}
		p.line = m
	case <-time.After(time.Minute):
		t.Fatalf("%s: no readiness line within a minute\n%s", cmd.Path, p.stderr)
	}
	return p
}

// stop sends SIGTERM and waits for the exit.
func (p *process) stop(t *testing.T) error {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not exit within 30s of SIGTERM", p.cmd.Path)
		return nil
	}
}

// eventually polls cond every 20ms until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(fmt.Sprint(err))
	}
	return v
}
