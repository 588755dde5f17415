package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrNotReady is returned (wrapped) when a server exits or times out before
// printing its readiness line.
var ErrNotReady = errors.New("harness: server did not become ready")

// ReadyPrefix starts the readiness line.
const ReadyPrefix = "holdfast serving "

// Defaults for the zero values of Options.
const (
	DefaultReadyTimeout = 30 * time.Second
	DefaultLogBytes     = 64 << 10
)

// Options says how to start a server.
type Options struct {
	// Binary is the executable; empty means Binary(ctx, BuildDir,
	// "holdfast").
	Binary string
	// BuildDir receives built binaries when Binary must build; empty means a
	// fresh temporary directory removed by Stop.
	BuildDir string
	// Addr is the address to serve on (--addr); empty means 127.0.0.1:0, a
	// free loopback port.
	Addr string
	// Backend is passed as --backend (a name such as "memory" or a plugin
	// path); empty leaves the server's default.
	Backend string
	// BackendOptions are passed as --backend-opt key=value.
	BackendOptions map[string]string
	// Args are extra arguments after `serve`.
	Args []string
	// Command, when set, replaces every argument above: the process runs
	// with exactly these arguments and must print the readiness line
	// itself (bench's echo server does).
	Command []string
	// Env is added to the server's environment.
	Env []string
	// Stderr receives the server's logs as they come.
	Stderr io.Writer
	// LogBytes is how much of the server's latest logs Logs keeps
	// (0: DefaultLogBytes).
	LogBytes int
	// ReadyTimeout bounds start-up; 0 means DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// DieWithParent asks the kernel (Linux) to kill the server when the
	// thread that started it ends: for programs, such as bench, whose
	// servers must not outlive them even when they are killed.
	DieWithParent bool
}

// Server is a running server process.
type Server struct {
	// Addr is host:port from the readiness line.
	Addr string
	// URL is "http://" + Addr, the base URL for clients.
	URL string
	// Backend, Shared and Durable are what the readiness line said.
	Backend string
	Shared  bool
	Durable bool
	// ReadyLine is the readiness line as printed.
	ReadyLine string

	cmd      *exec.Cmd
	done     chan struct{}
	waitErr  error
	logs     *Tail
	tmpDir   string
	stopOnce sync.Once
	stopErr  error

	mu     sync.Mutex
	stdout []string // every line of stdout, the readiness line first
}

// Start runs `holdfast serve --addr 127.0.0.1:0 ...` (or opts.Command) and
// returns once the server printed its readiness line, or an error wrapping
// ErrNotReady with the tail of its logs. The server outlives ctx, which
// bounds only start-up.
func Start(ctx context.Context, opts Options) (*Server, error) {
	logBytes := opts.LogBytes
	if logBytes <= 0 {
		logBytes = DefaultLogBytes
	}
	s := &Server{done: make(chan struct{}), logs: NewTail(logBytes)}
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
	args := opts.Command
	if args == nil {
		args = serveArgs(opts)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), opts.Env...)
	if opts.DieWithParent {
		dieWithParent(cmd)
	}
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
			s.mu.Lock()
			s.stdout = append(s.stdout, line)
			s.mu.Unlock()
			if !sent && strings.HasPrefix(line, ReadyPrefix) {
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
		timeout = DefaultReadyTimeout
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case line, ok := <-ready:
		if !ok {
			<-s.done
			s.cleanup()
			how := "status 0"
			if s.waitErr != nil {
				how = s.waitErr.Error()
			}
			return nil, fmt.Errorf("%w: %s exited (%s) before its readiness line; logs:\n%s", ErrNotReady, filepath.Base(bin), how, s.logs.String())
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

func serveArgs(opts Options) []string {
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	args := []string{"serve", "--addr", addr}
	if opts.Backend != "" {
		args = append(args, "--backend", opts.Backend)
	}
	for _, k := range slices.Sorted(maps.Keys(opts.BackendOptions)) {
		args = append(args, "--backend-opt", k+"="+opts.BackendOptions[k])
	}
	return append(args, opts.Args...)
}

// ParseReadyLine parses the server's readiness line into its key=value
// fields.
func ParseReadyLine(line string) (map[string]string, error) {
	rest, ok := strings.CutPrefix(line, ReadyPrefix)
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

// parseReady reads the readiness line; shared and durable may be absent
// (a program other than holdfast, such as bench's echo server).
func (s *Server) parseReady(line string) error {
	f, err := ParseReadyLine(line)
	if err != nil {
		return err
	}
	s.ReadyLine = line
	s.Addr = f["addr"]
	if s.Addr == "" {
		return fmt.Errorf("harness: readiness line without addr: %q", line)
	}
	s.URL = "http://" + s.Addr
	s.Backend = f["backend"]
	for _, b := range []struct {
		key string
		v   *bool
	}{{"shared", &s.Shared}, {"durable", &s.Durable}} {
		if raw, ok := f[b.key]; ok {
			if *b.v, err = strconv.ParseBool(raw); err != nil {
				return fmt.Errorf("harness: readiness line %s=%q: %w", b.key, raw, err)
			}
		}
	}
	return nil
}

// PID is the server's process id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Done is closed when the server process has exited.
func (s *Server) Done() <-chan struct{} { return s.done }

// ExitErr is how the process exited (nil for status 0), once Done is
// closed.
func (s *Server) ExitErr() error {
	<-s.done
	return s.waitErr
}

// Logs returns the server's stderr, its last Options.LogBytes.
func (s *Server) Logs() string { return s.logs.String() }

// Stdout returns every line the server wrote to stdout so far, the
// readiness line first.
func (s *Server) Stdout() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.stdout)
}

// Children returns the process ids of the server's running child processes
// (its backend plugin), from /proc (Linux; nil elsewhere).
func (s *Server) Children() []int { return Children(s.PID()) }

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
	return waitStopped(s.PID(), s.done)
}

// waitStopped returns once every thread of pid is stopped (Linux; at once
// where /proc cannot tell), or an error when exited closes first or after
// 10s.
func waitStopped(pid int, exited <-chan struct{}) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		stopped, ok := allThreadsStopped(pid)
		switch {
		case !ok || stopped:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("harness: pid %d not stopped 10s after SIGSTOP", pid)
		}
		select {
		case <-exited:
			return fmt.Errorf("harness: pid %d exited instead of stopping", pid)
		case <-time.After(time.Millisecond):
		}
	}
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
