package sdkrunner

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/holdfast/holdfast/harness"
)

// ErrAdapterGone is returned (wrapped) by calls to an adapter whose process
// exited or broke the protocol.
var ErrAdapterGone = errors.New("sdkrunner: adapter process gone")

// Options says how to start an adapter.
type Options struct {
	// Dir is the working directory; empty means the current one.
	Dir string
	// Env is added to the adapter's environment.
	Env []string
	// Stderr receives the adapter's logs (its stderr); nil discards them
	// but keeps the last 16 KiB for error messages.
	Stderr io.Writer
	// HelloTimeout bounds start-up until the hello answer; 0 means 60s.
	HelloTimeout time.Duration
}

// Event is an asynchronous message from the adapter, with the time the
// suite read it.
type Event struct {
	Message
	At time.Time
}

// Adapter is a running adapter process.
type Adapter struct {
	// Hello is the adapter's answer to the handshake.
	Hello HelloResult

	cmd   *exec.Cmd
	stdin io.WriteCloser
	logs  *harness.Tail
	done  chan struct{} // closed when the reader has stopped and the process exited

	writeMu sync.Mutex

	mu       sync.Mutex
	nextID   uint64
	pending  map[uint64]chan answer
	events   []Event
	eventsCh chan struct{} // closed and replaced on every new event
	readErr  error
	waitErr  error

	closeOnce sync.Once
	closeErr  error
}

// answer is a response with the time the suite read it.
type answer struct {
	Message
	at time.Time
}

// Start runs the adapter command line argv, performs the hello handshake
// and returns the running adapter. The process runs in its own process
// group, so Signal reaches a wrapper script's children too.
func Start(ctx context.Context, argv []string, opts Options) (*Adapter, error) {
	if len(argv) == 0 {
		return nil, errors.New("sdkrunner: empty adapter command line")
	}
	a := &Adapter{
		logs:     harness.NewTail(16 << 10),
		done:     make(chan struct{}),
		pending:  map[uint64]chan answer{},
		eventsCh: make(chan struct{}),
	}
	// Not CommandContext: the adapter outlives ctx, which bounds start-up.
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = opts.Dir
	cmd.Env = append(os.Environ(), opts.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var errOut io.Writer = a.logs
	if opts.Stderr != nil {
		errOut = io.MultiWriter(a.logs, opts.Stderr)
	}
	cmd.Stderr = errOut
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("sdkrunner: start %q: %w", argv, err)
	}
	a.cmd, a.stdin = cmd, stdin
	go a.read(stdout)

	timeout := opts.HelloTimeout
	if timeout == 0 {
		timeout = 60 * time.Second
	}
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := a.Call(hctx, CmdHello, HelloArgs{ProtocolVersion: Version}, &a.Hello); err != nil {
		a.kill()
		return nil, fmt.Errorf("sdkrunner: hello to %q: %w", argv, err)
	}
	if a.Hello.ProtocolVersion != Version {
		a.kill()
		return nil, fmt.Errorf("sdkrunner: adapter %q speaks protocol version %d, the suite speaks %d", argv, a.Hello.ProtocolVersion, Version)
	}
	return a, nil
}

// read is the adapter's one reader goroutine: it routes responses to their
// callers and stores events, until stdout ends; then it reaps the process.
func (a *Adapter) read(stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var rerr error
	for sc.Scan() {
		line := sc.Bytes()
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		var m Message
		if err := json.Unmarshal(line, &m); err != nil {
			rerr = fmt.Errorf("adapter wrote a line that is not a protocol message (logs belong on stderr): %q: %w", truncate(string(line), 200), err)
			break
		}
		at := time.Now()
		a.mu.Lock()
		switch {
		case m.Event != "":
			a.events = append(a.events, Event{Message: m, At: at})
			close(a.eventsCh)
			a.eventsCh = make(chan struct{})
		case m.ID != 0:
			if ch, ok := a.pending[m.ID]; ok {
				delete(a.pending, m.ID)
				ch <- answer{Message: m, at: at}
			} else {
				rerr = fmt.Errorf("adapter answered id %d, which is not pending", m.ID)
			}
		default:
			rerr = fmt.Errorf("adapter wrote a message with neither id nor event: %q", truncate(string(line), 200))
		}
		a.mu.Unlock()
		if rerr != nil {
			break
		}
	}
	if rerr == nil {
		rerr = sc.Err()
	}
	if rerr == nil {
		rerr = io.EOF
	}
	// Past a protocol error the process is of no use; stop it so Wait ends.
	if !errors.Is(rerr, io.EOF) {
		_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
	}
	_, _ = io.Copy(io.Discard, stdout)
	werr := a.cmd.Wait()
	a.mu.Lock()
	a.readErr, a.waitErr = rerr, werr
	for id, ch := range a.pending {
		delete(a.pending, id)
		close(ch)
	}
	a.mu.Unlock()
	close(a.done)
}

// Call sends one command and waits for its answer, decoding the result into
// result (which may be nil). A failed command returns an *Error with the
// adapter's kind; a dead or misbehaving adapter returns an error wrapping
// ErrAdapterGone.
func (a *Adapter) Call(ctx context.Context, cmd string, args, result any) error {
	p, err := a.Send(cmd, args)
	if err != nil {
		return err
	}
	return p.Wait(ctx, result)
}

// Pending is a command sent and not answered yet.
type Pending struct {
	// ID is the command's id (what the cancel command names).
	ID  uint64
	a   *Adapter
	cmd string
	ch  chan answer
	at  time.Time // when Wait received the answer
}

// Send sends one command without waiting for its answer; Wait collects it.
func (a *Adapter) Send(cmd string, args any) (*Pending, error) {
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	ch := make(chan answer, 1)
	a.mu.Lock()
	if a.readErr != nil {
		a.mu.Unlock()
		return nil, a.goneErr()
	}
	a.nextID++
	id := a.nextID
	a.pending[id] = ch
	a.mu.Unlock()

	line, err := json.Marshal(Request{ID: id, Cmd: cmd, Args: raw})
	if err != nil {
		return nil, err
	}
	a.writeMu.Lock()
	_, err = a.stdin.Write(append(line, '\n'))
	a.writeMu.Unlock()
	if err != nil {
		a.forget(id)
		return nil, fmt.Errorf("%w: writing %s: %w%s", ErrAdapterGone, cmd, err, a.logTail())
	}
	return &Pending{ID: id, a: a, cmd: cmd, ch: ch}, nil
}

// Answered reports whether the answer has arrived (and Wait would not
// block); a spec polling for what a command should be doing meanwhile
// (queueing on the server, running a function) stops early when it has
// already answered.
func (p *Pending) Answered() bool { return len(p.ch) > 0 }

// Wait waits for the command's answer, as Call does. Call it once.
func (p *Pending) Wait(ctx context.Context, result any) error {
	select {
	case m, ok := <-p.ch:
		if !ok {
			return p.a.goneErr()
		}
		p.at = m.at
		if m.Error != nil {
			return m.Error
		}
		if result != nil {
			if len(m.Result) == 0 {
				return fmt.Errorf("sdkrunner: %s: answer has neither result nor error", p.cmd)
			}
			if err := json.Unmarshal(m.Result, result); err != nil {
				return fmt.Errorf("sdkrunner: %s: malformed result %s: %w", p.cmd, truncate(string(m.Result), 200), err)
			}
		}
		return nil
	case <-ctx.Done():
		p.a.forget(p.ID)
		return fmt.Errorf("sdkrunner: %s: no answer: %w", p.cmd, ctx.Err())
	}
}

// AnsweredAt is when the suite read the answer that Wait returned (zero
// before): lines of one adapter are read in the order it wrote them, so
// comparing it with an event's At orders the two as the adapter did.
func (p *Pending) AnsweredAt() time.Time { return p.at }

// forget drops a pending call; a late answer for it is then a protocol
// error only if the adapter invents ids, so keep a tombstone instead.
func (a *Adapter) forget(id uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.pending[id]; ok {
		// A late answer must still be accepted: keep a sink.
		a.pending[id] = make(chan answer, 1)
	}
}

func (a *Adapter) goneErr() error {
	a.mu.Lock()
	rerr, werr := a.readErr, a.waitErr
	a.mu.Unlock()
	// Either may be nil: they are told, not wrapped.
	return fmt.Errorf("%w: %v (exit: %v)%s", ErrAdapterGone, rerr, werr, a.logTail()) //nolint:errorlint // see above
}

func (a *Adapter) logTail() string {
	if s := strings.TrimSpace(a.logs.String()); s != "" {
		return "; adapter stderr:\n" + s
	}
	return ""
}

// Has reports whether the adapter claimed capability c in its hello.
func (a *Adapter) Has(c string) bool { return slices.Contains(a.Hello.Capabilities, c) }

// Events returns the events received so far.
func (a *Adapter) Events() []Event {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.events)
}

// WaitEvent returns the first event (received so far or later) for which
// match is true, or an error when ctx ends or the adapter is gone first.
func (a *Adapter) WaitEvent(ctx context.Context, match func(Event) bool) (Event, error) {
	seen := 0
	for {
		a.mu.Lock()
		evs, ch := a.events[seen:], a.eventsCh
		seen = len(a.events)
		a.mu.Unlock()
		for _, e := range evs {
			if match(e) {
				return e, nil
			}
		}
		select {
		case <-ch:
		case <-a.done:
			return Event{}, a.goneErr()
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// LeaseLost waits for the lease_lost event of guard.
func (a *Adapter) LeaseLost(ctx context.Context, guard string) (Event, error) {
	return a.WaitEvent(ctx, func(e Event) bool { return e.Event == EventLeaseLost && e.Guard == guard })
}

// PID is the adapter process's id (and its process group's).
func (a *Adapter) PID() int { return a.cmd.Process.Pid }

// Signal sends sig to the adapter's process group, e.g. SIGSTOP and SIGCONT
// to pause a holder longer than its TTL.
//
// SIGSTOP returns once every process of the group has stopped (kill returns
// before that happens), so that a spec measuring from the pause measures
// from a real one.
func (a *Adapter) Signal(sig syscall.Signal) error {
	pgid := a.cmd.Process.Pid
	if err := syscall.Kill(-pgid, sig); err != nil {
		return err
	}
	if sig != syscall.SIGSTOP {
		return nil
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		stopped, ok := groupStopped(pgid)
		switch {
		case !ok || stopped:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("sdkrunner: adapter (process group %d) not stopped 10s after SIGSTOP", pgid)
		}
		select {
		case <-a.done:
			return fmt.Errorf("%w: exited instead of stopping", ErrAdapterGone)
		case <-time.After(time.Millisecond):
		}
	}
}

// Done is closed once the adapter process has exited.
func (a *Adapter) Done() <-chan struct{} { return a.done }

// Logs returns the tail of the adapter's stderr.
func (a *Adapter) Logs() string { return a.logs.String() }

// Close asks the adapter to close its clients and exit (the close command,
// then end of stdin), waits up to timeout (0 means 10s), then kills its
// process group. It returns an error when the adapter did not exit cleanly.
func (a *Adapter) Close(timeout time.Duration) error {
	a.closeOnce.Do(func() {
		if timeout == 0 {
			timeout = 10 * time.Second
		}
		_ = a.Signal(syscall.SIGCONT) // a paused adapter cannot exit
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cerr := a.Call(ctx, CmdClose, ClientArgs{}, nil)
		_ = a.stdin.Close()
		select {
		case <-a.done:
		case <-ctx.Done():
			a.kill()
			a.closeErr = fmt.Errorf("sdkrunner: adapter did not exit within %s after close; killed%s", timeout, a.logTail())
			return
		}
		a.mu.Lock()
		werr := a.waitErr
		a.mu.Unlock()
		switch {
		case cerr != nil && !errors.Is(cerr, ErrAdapterGone):
			a.closeErr = fmt.Errorf("sdkrunner: close: %w", cerr)
		case werr != nil:
			a.closeErr = fmt.Errorf("sdkrunner: adapter exited: %w%s", werr, a.logTail())
		}
	})
	return a.closeErr
}

// kill SIGKILLs the process group and waits for the reader to finish.
func (a *Adapter) kill() {
	_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
	_ = a.stdin.Close()
	<-a.done
}

// SplitCommandLine splits a command line into words the way a POSIX shell
// would for the simple cases a --runner flag needs: whitespace separates
// words, single quotes keep everything literal, double quotes keep spaces,
// a backslash escapes the next character outside single quotes.
func SplitCommandLine(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	escaped := false
	for _, r := range s {
		switch {
		case escaped:
			cur.WriteRune(r)
			escaped = false
		case quote == '\'':
			if r == '\'' {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\\':
			escaped, inWord = true, true
		case quote == '"':
			if r == '"' {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t' || r == '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 || escaped {
		return nil, fmt.Errorf("sdkrunner: unterminated quote or escape in %q", s)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
