// Package harness starts and stops the real holdfast binaries that tests
// drive: it finds (or builds) an executable, runs `holdfast serve` on a free
// loopback port, waits for the server's readiness line on stdout, and stops
// the process by its PID.
//
// Every test that needs a running server uses it, so that the readiness
// protocol lives in one place:
//
//	holdfast serving addr=127.0.0.1:PORT backend=NAME shared=BOOL durable=BOOL
//
// is the one line the server prints to stdout once it serves; all its logs go
// to stderr.
package harness

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// BinDirEnv names the environment variable holding the directory of prebuilt
// binaries (`make build` puts them in bin/). When it is unset, or a binary is
// missing there, Binary builds it with `go build`.
const BinDirEnv = "HOLDFAST_BIN_DIR"

// ErrNotReady is returned (wrapped) when a server exits or times out before
// printing its readiness line.
var ErrNotReady = errors.New("harness: server did not become ready")

// packages maps the binaries this repository builds to their main packages,
// relative to the repository root.
func packageOf(name string) (string, bool) {
	switch {
	case name == "holdfast":
		return "./server/cmd/holdfast", true
	case name == "holdfast-conformance":
		return "./conformance/cmd/holdfast-conformance", true
	case strings.HasPrefix(name, "holdfast-backend-"):
		b := strings.TrimPrefix(name, "holdfast-backend-")
		return "./plugins/" + b + "/cmd/" + name, true
	}
	return "", false
}

// RepoRoot is the root of the holdfast source tree this package was compiled
// from; Binary builds from there.
func RepoRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("harness: cannot locate the source tree")
	}
	// file is <root>/conformance/harness/harness.go
	root := filepath.Dir(filepath.Dir(filepath.Dir(file)))
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		return "", fmt.Errorf("harness: source tree not found at %s: %w", root, err)
	}
	return root, nil
}

var (
	buildMu sync.Mutex
	built   = map[string]string{} // dir+name -> path
)

// Binary returns the path of the named holdfast executable ("holdfast",
// "holdfast-backend-memory", "holdfast-conformance", ...): the one in
// $HOLDFAST_BIN_DIR when it exists there, else one built with `go build` into
// buildDir (once per process and directory).
func Binary(ctx context.Context, buildDir, name string) (string, error) {
	if dir := os.Getenv(BinDirEnv); dir != "" {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	pkg, ok := packageOf(name)
	if !ok {
		return "", fmt.Errorf("harness: unknown binary %q", name)
	}
	return Build(ctx, buildDir, name, pkg)
}

// Build runs `go build -o buildDir/name pkg` from the repository root (pkg is
// relative to it, e.g. "./conformance/internal/brokenbackends/norelease"),
// once per process and output path.
func Build(ctx context.Context, buildDir, name, pkg string) (string, error) {
	out := filepath.Join(buildDir, name)
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[out]; ok {
		return p, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("harness: go build %s: %w\n%s", pkg, err, stderr.String())
	}
	built[out] = out
	return out, nil
}

// Options says how to start a server.
type Options struct {
	// Binary is the holdfast executable; empty means Binary(ctx, BuildDir,
	// "holdfast").
	Binary string
	// BuildDir receives built binaries when Binary must build; empty means a
	// fresh temporary directory removed by Stop.
	BuildDir string
	// Backend is passed as --backend (a name such as "memory" or a plugin
	// path); empty leaves the server's default.
	Backend string
	// BackendOptions are passed as --backend-opt key=value.
	BackendOptions map[string]string
	// Args are extra arguments after `serve`.
	Args []string
	// Env is added to the server's environment.
	Env []string
	// Stderr receives the server's logs; nil keeps only the last 64 KiB,
	// available from Logs.
	Stderr io.Writer
	// ReadyTimeout bounds start-up; 0 means 30s.
	ReadyTimeout time.Duration
}

// Server is a running `holdfast serve` process.
type Server struct {
	// Addr is host:port from the readiness line.
	Addr string
	// URL is "http://" + Addr, the base URL for clients.
	URL string
	// Backend, Shared and Durable are what the readiness line said.
	Backend string
	Shared  bool
	Durable bool

	cmd      *exec.Cmd
	done     chan struct{}
	waitErr  error
	logs     *tailBuffer
	tmpDir   string
	stopOnce sync.Once
	stopErr  error
}

// Start runs `holdfast serve --addr 127.0.0.1:0 ...` and returns once the
// server printed its readiness line, or an error wrapping ErrNotReady with
// the tail of its logs.
func Start(ctx context.Context, opts Options) (*Server, error) {
	s := &Server{done: make(chan struct{}), logs: &tailBuffer{max: 64 << 10}}
	bin := opts.Binary
	if bin == "" {
		dir := opts.BuildDir
		if dir == "" {
			d, err := os.MkdirTemp("", "holdfast-harness-")
			if err != nil {
				return nil, err
			}
			dir, s.tmpDir = d, d
		}
		b, err := Binary(ctx, dir, "holdfast")
		if err != nil {
			s.cleanup()
			return nil, err
		}
		bin = b
	}
	args := []string{"serve", "--addr", "127.0.0.1:0"}
	if opts.Backend != "" {
		args = append(args, "--backend", opts.Backend)
	}
	for _, k := range sortedKeys(opts.BackendOptions) {
		args = append(args, "--backend-opt", k+"="+opts.BackendOptions[k])
	}
	args = append(args, opts.Args...)
	// Not CommandContext: the server outlives ctx, which only bounds start-up.
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), opts.Env...)
	var errOut io.Writer = s.logs
	if opts.Stderr != nil {
		errOut = io.MultiWriter(s.logs, opts.Stderr)
	}
	cmd.Stderr = errOut
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		s.cleanup()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		s.cleanup()
		return nil, fmt.Errorf("harness: start %s: %w", bin, err)
	}
	s.cmd = cmd

	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			if !sent && strings.HasPrefix(line, "holdfast serving ") {
				ready <- line
				sent = true
			}
			// Keep draining so the server never blocks on a full pipe.
		}
		if !sent {
			close(ready)
		}
		// Wait only after stdout is drained (os/exec's rule for pipes).
		s.waitErr = cmd.Wait()
		close(s.done)
	}()

	timeout := opts.ReadyTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case line, ok := <-ready:
		if !ok {
			<-s.done
			s.cleanup()
			return nil, fmt.Errorf("%w: exited (%v) before its readiness line; logs:\n%s", ErrNotReady, s.waitErr, s.logs.String())
		}
		if err := s.parseReady(line); err != nil {
			_ = s.Kill()
			return nil, err
		}
		return s, nil
	case <-timer.C:
		_ = s.Kill()
		return nil, fmt.Errorf("%w: no readiness line within %s; logs:\n%s", ErrNotReady, timeout, s.logs.String())
	case <-ctx.Done():
		_ = s.Kill()
		return nil, fmt.Errorf("%w: %w", ErrNotReady, ctx.Err())
	}
}

// ParseReadyLine parses the server's readiness line into its key=value
// fields.
func ParseReadyLine(line string) (map[string]string, error) {
	rest, ok := strings.CutPrefix(line, "holdfast serving ")
	if !ok {
		return nil, fmt.Errorf("harness: not a readiness line: %q", line)
	}
	fields := map[string]string{}
	for _, f := range strings.Fields(rest) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return nil, fmt.Errorf("harness: malformed field %q in readiness line %q", f, line)
		}
		fields[k] = v
	}
	return fields, nil
}

func (s *Server) parseReady(line string) error {
	f, err := ParseReadyLine(line)
	if err != nil {
		return err
	}
	s.Addr = f["addr"]
	if s.Addr == "" {
		return fmt.Errorf("harness: readiness line without addr: %q", line)
	}
	s.URL = "http://" + s.Addr
	s.Backend = f["backend"]
	if s.Shared, err = strconv.ParseBool(f["shared"]); err != nil {
		return fmt.Errorf("harness: readiness line shared=%q: %w", f["shared"], err)
	}
	if s.Durable, err = strconv.ParseBool(f["durable"]); err != nil {
		return fmt.Errorf("harness: readiness line durable=%q: %w", f["durable"], err)
	}
	return nil
}

// PID is the server's process id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Done is closed when the server process has exited.
func (s *Server) Done() <-chan struct{} { return s.done }

// Logs returns the tail of the server's stderr.
func (s *Server) Logs() string { return s.logs.String() }

// Signal sends sig to the server process (for example SIGSTOP/SIGCONT to
// pause it longer than a TTL). For SIGSTOP it returns once the server has
// really stopped (on Linux, every thread; elsewhere at once): kill returns
// when the signal is queued, and the process stops only after one of its
// threads next runs, which on a loaded machine can be tens of milliseconds
// during which it still answers calls. A spec that takes "now" after
// Signal(SIGSTOP) as the moment the server stopped answering relies on this.
func (s *Server) Signal(sig syscall.Signal) error {
	if err := syscall.Kill(s.PID(), sig); err != nil {
		return err
	}
	if sig != syscall.SIGSTOP {
		return nil
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		stopped, ok := allThreadsStopped(s.PID())
		switch {
		case !ok || stopped:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("harness: server (pid %d) not stopped 10s after SIGSTOP", s.PID())
		}
		select {
		case <-s.done:
			return fmt.Errorf("harness: server (pid %d) exited instead of stopping", s.PID())
		case <-time.After(time.Millisecond):
		}
	}
}

// allThreadsStopped reports whether every thread of pid is in the stopped
// state; ok is false where /proc cannot tell (not Linux).
func allThreadsStopped(pid int) (stopped, ok bool) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		return false, false
	}
	for _, path := range tasks {
		stat, err := os.ReadFile(path)
		if err != nil {
			return false, true // a thread just ended: look again
		}
		// The state follows the parenthesised command name.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || i+2 >= len(stat) || stat[i+2] != 'T' {
			return false, true
		}
	}
	return true, true
}

// Stop sends SIGTERM and waits up to timeout (0 means 10s) for a graceful
// exit, then SIGKILLs. It returns an error when the server did not exit with
// status 0 by itself. Stop is idempotent.
func (s *Server) Stop(timeout time.Duration) error {
	s.stopOnce.Do(func() {
		if timeout == 0 {
			timeout = 10 * time.Second
		}
		select {
		case <-s.done:
		default:
			// A stopped (SIGSTOP) server cannot handle SIGTERM.
			_ = syscall.Kill(s.PID(), syscall.SIGCONT)
			_ = syscall.Kill(s.PID(), syscall.SIGTERM)
		}
		select {
		case <-s.done:
			if s.waitErr != nil {
				s.stopErr = fmt.Errorf("harness: server exited: %w; logs:\n%s", s.waitErr, s.logs.String())
			}
		case <-time.After(timeout):
			_ = syscall.Kill(s.PID(), syscall.SIGKILL)
			<-s.done
			s.stopErr = fmt.Errorf("harness: server ignored SIGTERM for %s; killed", timeout)
		}
		s.cleanup()
	})
	return s.stopErr
}

// Kill SIGKILLs the server and waits for it to exit.
func (s *Server) Kill() error {
	select {
	case <-s.done:
	default:
		_ = syscall.Kill(s.PID(), syscall.SIGKILL)
		<-s.done
	}
	s.stopOnce.Do(s.cleanup)
	return nil
}

func (s *Server) cleanup() {
	if s.tmpDir != "" {
		_ = os.RemoveAll(s.tmpDir)
		s.tmpDir = ""
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }

// TB is the part of testing.TB that StartT needs.
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
	TempDir() string
	Context() context.Context
}

// StartT starts a server for a test, fails the test when it does not become
// ready, and stops it (SIGTERM, expecting a graceful exit) at cleanup.
// Binaries are built into tb.TempDir() when $HOLDFAST_BIN_DIR lacks them.
func StartT(tb TB, opts Options) *Server {
	tb.Helper()
	if opts.BuildDir == "" && opts.Binary == "" {
		opts.BuildDir = tb.TempDir()
	}
	s, err := Start(tb.Context(), opts)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(func() {
		if err := s.Stop(0); err != nil {
			tb.Errorf("%v", err)
		}
	})
	return s
}
