package pluginhost

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/core/internal/handshake"
)

// memoryPlugin is the path of the holdfast-backend-memory binary the tests
// drive as a real subprocess.
var memoryPlugin string

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		runHelper(mode) // never returns
	}
	flag.Parse()
	if f := flag.Lookup("test.fuzzworker"); f != nil && f.Value.String() == "true" {
		// A fuzz worker runs only the fuzz function (pure decoding): no
		// plugin to build in every worker.
		os.Exit(m.Run())
	}
	code, err := setup()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pluginhost tests:", err)
		os.Exit(1)
	}
	if code != nil {
		defer code()
	}
	goleak.VerifyTestMain(m)
}

// setup finds holdfast-backend-memory in $HOLDFAST_BIN_DIR or builds it into
// a temp dir, and returns the clean-up.
func setup() (func(), error) {
	if dir := os.Getenv("HOLDFAST_BIN_DIR"); dir != "" {
		p := filepath.Join(dir, "holdfast-backend-memory")
		if _, err := os.Stat(p); err == nil {
			memoryPlugin = p
			return nil, nil
		}
	}
	dir, err := os.MkdirTemp("", "pluginhost-test-")
	if err != nil {
		return nil, err
	}
	memoryPlugin = filepath.Join(dir, "holdfast-backend-memory")
	cmd := exec.Command("go", "build", "-o", memoryPlugin, "./cmd/holdfast-backend-memory")
	cmd.Dir = filepath.Join("..", "..", "plugins", "memory")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("go build holdfast-backend-memory: %w\n%s", err, out)
	}
	return func() { os.RemoveAll(dir) }, nil
}

// logBuffer collects the host's slog output as JSON lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// find returns the first record whose fields include every pair of want.
func (b *logBuffer) find(want map[string]string) map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	for line := range strings.SplitSeq(b.buf.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		ok := true
		for k, v := range want {
			if fmt.Sprint(rec[k]) != v {
				ok = false
				break
			}
		}
		if ok {
			return rec
		}
	}
	return nil
}

// all returns every record whose fields include every pair of want.
func (b *logBuffer) all(want map[string]string) []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for line := range strings.SplitSeq(b.buf.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		ok := true
		for k, v := range want {
			if fmt.Sprint(rec[k]) != v {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, rec)
		}
	}
	return out
}

func testLogger(t *testing.T) (*slog.Logger, *logBuffer) {
	lb := &logBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			lb.mu.Lock()
			t.Logf("host log:\n%s", lb.buf.String())
			lb.mu.Unlock()
		}
	})
	return slog.New(slog.NewJSONHandler(lb, &slog.HandlerOptions{Level: handshake.LevelTrace})), lb
}

func start(t *testing.T, cfg Config) *Host {
	t.Helper()
	if cfg.Path == "" {
		cfg.Path = memoryPlugin
	}
	if cfg.Logger == nil {
		cfg.Logger, _ = testLogger(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitRestarted waits, on Changed events, until the plugin has been
// relaunched n times and is up.
func waitRestarted(t *testing.T, h *Host, n uint64, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for {
		ch := h.Changed()
		if h.Restarts() >= n && h.Up() {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("plugin not back up within %s", within)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	h := start(t, Config{Name: "memory"})
	ctx := ctxT(t)

	info, err := h.Info(ctx)
	if err != nil || info.Name != "memory" || info.Shared || info.Durable || info.MaxTTL != 24*time.Hour || info.MinTTL != time.Millisecond {
		t.Fatalf("Info = %+v, %v", info, err)
	}
	if h.PID() == 0 || h.PID() == os.Getpid() {
		t.Fatalf("PID = %d", h.PID())
	}

	acq, err := h.Acquire(ctx, backend.AcquireRequest{Key: "a/1", OwnerToken: "tok1", TTL: time.Minute, Holder: "me"})
	if err != nil || !acq.Acquired || acq.Record.Key != "a/1" || acq.Record.Holder != "me" || acq.Record.FencingToken == 0 {
		t.Fatalf("Acquire = %+v, %v", acq, err)
	}
	if acq.Record.Remaining <= 0 || time.Until(acq.Record.ExpiresAt) <= 50*time.Second {
		t.Fatalf("expiry = %s, remaining %s", acq.Record.ExpiresAt, acq.Record.Remaining)
	}
	busy, err := h.Acquire(ctx, backend.AcquireRequest{Key: "a/1", OwnerToken: "tok2", TTL: time.Minute})
	if err != nil || busy.Acquired || busy.Record.FencingToken != acq.Record.FencingToken {
		t.Fatalf("contended Acquire = %+v, %v", busy, err)
	}
	rec, found, err := h.Get(ctx, "a/1")
	if err != nil || !found || rec.FencingToken != acq.Record.FencingToken || rec.Stamp != acq.Record.Stamp {
		t.Fatalf("Get = %+v, %v, %v", rec, found, err)
	}
	if _, found, err := h.Get(ctx, "nope"); err != nil || found {
		t.Fatalf("Get(nope) = %v, %v", found, err)
	}
	ext, err := h.Extend(ctx, backend.ExtendRequest{Key: "a/1", OwnerToken: "tok1", TTL: 2 * time.Minute})
	if err != nil || !ext.Extended || ext.Record.Remaining <= time.Minute {
		t.Fatalf("Extend = %+v, %v", ext, err)
	}
	if ext, err := h.Extend(ctx, backend.ExtendRequest{Key: "a/1", OwnerToken: "wrong", TTL: time.Minute}); err != nil || ext.Extended {
		t.Fatalf("Extend(wrong token) = %+v, %v", ext, err)
	}
	for i := 2; i <= 3; i++ {
		if _, err := h.Acquire(ctx, backend.AcquireRequest{Key: fmt.Sprintf("a/%d", i), OwnerToken: "t", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	page, err := h.List(ctx, backend.ListRequest{Prefix: "a/", PageSize: 2})
	if err != nil || len(page.Records) != 2 || page.Records[0].Key != "a/1" || page.NextPageToken == "" {
		t.Fatalf("List = %+v, %v", page, err)
	}
	page, err = h.List(ctx, backend.ListRequest{Prefix: "a/", PageSize: 2, PageToken: page.NextPageToken})
	if err != nil || len(page.Records) != 1 || page.Records[0].Key != "a/3" || page.NextPageToken != "" {
		t.Fatalf("List page 2 = %+v, %v", page, err)
	}
	if ok, err := h.Release(ctx, backend.ReleaseRequest{Key: "a/1", OwnerToken: "wrong"}); err != nil || ok {
		t.Fatalf("Release(wrong) = %v, %v", ok, err)
	}
	if ok, err := h.Release(ctx, backend.ReleaseRequest{Key: "a/1", OwnerToken: "tok1"}); err != nil || !ok {
		t.Fatalf("Release = %v, %v", ok, err)
	}

	// Bad input comes back as ErrInvalidArgument with the plugin's message.
	_, err = h.Acquire(ctx, backend.AcquireRequest{Key: "a/9", OwnerToken: "t", TTL: 48 * time.Hour})
	if !errors.Is(err, backend.ErrInvalidArgument) || !strings.Contains(err.Error(), "ttl") {
		t.Fatalf("Acquire(48h) err = %v, want ErrInvalidArgument naming ttl", err)
	}
	if _, err := h.List(ctx, backend.ListRequest{PageSize: 1, PageToken: "garbage!"}); !errors.Is(err, backend.ErrInvalidArgument) {
		t.Fatalf("List(bad token) err = %v", err)
	}
	// The caller's own deadline is its own error, not unavailable.
	dead, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := h.Get(dead, "a/2"); !errors.Is(err, context.Canceled) || errors.Is(err, backend.ErrUnavailable) {
		t.Fatalf("Get(cancelled ctx) err = %v", err)
	}
}

// watch runs h.Watch in a goroutine, forwarding events; the result arrives
// on the returned error channel.
func watch(ctx context.Context, h *Host, prefix string) (<-chan backend.Event, <-chan error) {
	events := make(chan backend.Event, 64)
	done := make(chan error, 1)
	go func() {
		done <- h.Watch(ctx, prefix, func(ev backend.Event) error {
			events <- ev
			return nil
		})
	}()
	return events, done
}

func next(t *testing.T, events <-chan backend.Event) backend.Event {
	t.Helper()
	select {
	case ev := <-events:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event within 10s")
	}
	return backend.Event{}
}

func TestWatchEventsThenUnavailableOnDeath(t *testing.T) {
	h := start(t, Config{MinBackoff: 20 * time.Millisecond})
	ctx := ctxT(t)
	events, done := watch(ctx, h, "w/")
	if ev := next(t, events); ev.Type != backend.EventSynced {
		t.Fatalf("first event = %v, want synced", ev.Type)
	}
	acq, err := h.Acquire(ctx, backend.AcquireRequest{Key: "w/k", OwnerToken: "t", TTL: 30 * time.Millisecond, Holder: "x"})
	if err != nil || !acq.Acquired {
		t.Fatal(acq, err)
	}
	if ev := next(t, events); ev.Type != backend.EventAcquired || ev.Record.FencingToken != acq.Record.FencingToken || ev.Record.Holder != "x" {
		t.Fatalf("event = %+v, want acquired", ev)
	}
	if ev := next(t, events); ev.Type != backend.EventExpired || ev.Record.Key != "w/k" {
		t.Fatalf("event = %+v, want expired", ev)
	}

	if err := syscall.Kill(h.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, backend.ErrUnavailable) {
			t.Fatalf("Watch after plugin death = %v, want ErrUnavailable", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not return after the plugin died")
	}

	// Watching again once it is back works, and a cancelled watch returns
	// the caller's context error.
	waitRestarted(t, h, 1, 10*time.Second)
	wctx, cancel := context.WithCancel(ctx)
	events, done = watch(wctx, h, "")
	select {
	case ev := <-events:
		if ev.Type != backend.EventSynced {
			t.Fatalf("first event after restart = %v", ev.Type)
		}
	case err := <-done:
		t.Fatalf("Watch after restart = %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no synced event within 10s of watching again")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Watch = %v", err)
	}
}

func TestCrashRestart(t *testing.T) {
	log, logs := testLogger(t)
	// CallTimeout far above what we allow the in-flight call: it must fail
	// because the plugin died, not because a timer ran out.
	h := start(t, Config{Logger: log, MinBackoff: 300 * time.Millisecond, MaxBackoff: time.Second, CallTimeout: time.Minute})
	ctx := ctxT(t)

	before, err := h.Acquire(ctx, backend.AcquireRequest{Key: "k", OwnerToken: "t1", TTL: time.Minute})
	if err != nil || !before.Acquired {
		t.Fatal(before, err)
	}
	pid := h.PID()

	// Freeze the plugin so a call is surely in flight, then kill it.
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, pid)
	down := h.Changed()
	inflight := make(chan error, 1)
	go func() {
		_, _, err := h.Get(ctx, "k")
		inflight <- err
	}()
	select {
	case err := <-inflight:
		t.Fatalf("call to a stopped plugin returned early: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-inflight:
		if !errors.Is(err, backend.ErrUnavailable) {
			t.Fatalf("in-flight call = %v, want ErrUnavailable", err)
		}
		t.Logf("in-flight call failed %s after kill -9: %v", time.Since(killed).Round(time.Millisecond), err)
	case <-time.After(5 * time.Second):
		t.Fatal("in-flight call hung after the plugin died")
	}

	// Noticed promptly, and calls while down fail fast.
	select {
	case <-down:
	case <-time.After(5 * time.Second):
		t.Fatal("plugin death not noticed")
	}
	if !h.Up() {
		t0 := time.Now()
		_, err := h.Acquire(ctx, backend.AcquireRequest{Key: "k2", OwnerToken: "t", TTL: time.Minute})
		took := time.Since(t0)
		switch {
		case err == nil && h.Restarts() == 0:
			t.Fatal("call while down succeeded")
		case err == nil:
			// The relaunch (300ms after the crash) won the race on a
			// loaded machine; nothing to check.
		case !errors.Is(err, backend.ErrUnavailable) || took > time.Second:
			t.Fatalf("call while down = %v after %s, want ErrUnavailable at once", err, took)
		}
		if _, err := h.Info(ctx); err != nil && !errors.Is(err, backend.ErrUnavailable) {
			t.Fatalf("Info while down = %v, want ErrUnavailable", err)
		}
	}

	waitRestarted(t, h, 1, 10*time.Second)
	if h.Restarts() != 1 {
		t.Fatalf("Restarts = %d, want 1", h.Restarts())
	}
	if h.PID() == pid || h.PID() == 0 {
		t.Fatalf("PID after restart = %d (was %d)", h.PID(), pid)
	}
	if info, err := h.Info(ctx); err != nil || info.Name != "memory" {
		t.Fatalf("Info after restart = %+v, %v", info, err)
	}
	// Memory is not durable: the lock is gone; the fencing token goes on
	// above the one handed out before the crash.
	after, err := h.Acquire(ctx, backend.AcquireRequest{Key: "k", OwnerToken: "t2", TTL: time.Minute})
	if err != nil || !after.Acquired {
		t.Fatalf("Acquire after restart = %+v, %v", after, err)
	}
	if after.Record.FencingToken <= before.Record.FencingToken {
		t.Fatalf("fencing token after restart %d <= before %d", after.Record.FencingToken, before.Record.FencingToken)
	}
	if logs.find(map[string]string{"msg": "plugin exited unexpectedly; relaunching", "plugin": "holdfast-backend-memory"}) == nil {
		t.Error("no log record of the crash")
	}
}

func TestChecksumPin(t *testing.T) {
	data, err := os.ReadFile(memoryPlugin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	h := start(t, Config{SHA256: sum[:]})
	if _, err := h.Info(ctxT(t)); err != nil {
		t.Fatalf("pinned with the right checksum: %v", err)
	}

	wrong := make([]byte, sha256.Size)
	_, err = Start(ctxT(t), Config{Path: memoryPlugin, SHA256: wrong})
	if !errors.Is(err, ErrChecksumMismatch) || !strings.Contains(err.Error(), fmt.Sprintf("%x", sum)) {
		t.Fatalf("Start with a wrong pin = %v, want ErrChecksumMismatch naming the real sum", err)
	}
	t.Log(err)
}

func TestOpenFailureSurfacesPluginMessage(t *testing.T) {
	log, logs := testLogger(t)
	_, err := Start(ctxT(t), Config{Path: memoryPlugin, Options: map[string]string{"bogus": "1"}, Logger: log})
	if err == nil || !strings.Contains(err.Error(), "unknown option(s) bogus") {
		t.Fatalf("Start with a bad option = %v, want the plugin's message", err)
	}
	t.Log(err)
	// The plugin's log line is also in the host's log, at error level.
	if logs.find(map[string]string{"level": "ERROR", "plugin": "holdfast-backend-memory"}) == nil {
		t.Error("the plugin's error line is not in the host log at ERROR")
	}
}

func TestPluginLogsAreReleveled(t *testing.T) {
	// The variable in the host's environment wins over Config.LogLevel.
	t.Setenv(handshake.LogLevelEnv, "debug")
	log, logs := testLogger(t)
	h := start(t, Config{Logger: log, Name: "mem", LogLevel: "error"})
	_ = h
	// go-plugin's server logs "plugin address" at debug from inside the
	// plugin process; it must arrive at DEBUG, named after the plugin.
	rec := logs.find(map[string]string{"msg": "plugin address", "level": "DEBUG", "plugin": "mem"})
	if rec == nil {
		t.Fatal("the plugin's debug line did not arrive at DEBUG with plugin=mem")
	}
}

func TestCloseKillsPlugin(t *testing.T) {
	h := start(t, Config{})
	pid := h.PID()
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("plugin pid %d still exists after Close (kill 0: %v)", pid, err)
	}
	if _, err := h.Acquire(context.Background(), backend.AcquireRequest{Key: "k", OwnerToken: "t", TTL: time.Second}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Acquire after Close = %v", err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestStartErrors(t *testing.T) {
	if _, err := Start(ctxT(t), Config{}); err == nil {
		t.Fatal("Start without a path succeeded")
	}
	_, err := Start(ctxT(t), Config{Path: filepath.Join(t.TempDir(), "missing")})
	if err == nil {
		t.Fatal("Start of a missing executable succeeded")
	}
	t.Log(err)
}

// helperEnv makes the test binary a helper process that starts the memory
// plugin and then waits to be killed: "host" starts it through Start (with
// Pdeathsig), "spawn" starts it bare (only backendserver.Serve's parent watch can
// end it). The helper prints the plugin's pid on stdout. "old" makes it a
// plugin itself, one built before Follow (serveOldPlugin).
const helperEnv = "PLUGINHOST_TEST_HELPER"

func runHelper(mode string) {
	plugin := os.Getenv("PLUGINHOST_TEST_PLUGIN")
	switch mode {
	case "old":
		serveOldPlugin() // never returns
	case "host":
		h, err := Start(context.Background(), Config{Path: plugin, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(h.PID())
	case "spawn":
		cmd := exec.Command(plugin)
		hs := handshake.Config()
		cmd.Env = append(os.Environ(), hs.MagicCookieKey+"="+hs.MagicCookieValue)
		out, err := cmd.StdoutPipe()
		if err != nil {
			os.Exit(1)
		}
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		// Wait for the handshake line: the plugin is serving (and watching
		// its parent) by then.
		line := make([]byte, 1)
		for line[0] != '\n' {
			if _, err := out.Read(line); err != nil {
				os.Exit(1)
			}
		}
		fmt.Println(cmd.Process.Pid)
	}
	select {} // until killed
}

// waitStopped waits until every thread of pid is stopped. kill(SIGSTOP)
// returns once the signal is queued: the kernel wakes one thread of the
// process, and the others stop only once that thread has run. On a loaded
// machine that can be many milliseconds later, and meanwhile the plugin
// still answers calls (TestCrashRestart saw a Get answered "early" that way).
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !stopped(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("plugin %d not stopped 10s after SIGSTOP", pid)
		}
		time.Sleep(time.Millisecond)
	}
}

// stopped reports whether every thread of pid is in the stopped state.
func stopped(pid int) bool {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, path := range tasks {
		stat, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || i+2 >= len(stat) || stat[i+2] != 'T' {
			return false
		}
	}
	return true
}

// alive reports whether pid runs (a zombie, or no such process, is dead).
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

func TestPluginExitsWhenHostDies(t *testing.T) {
	for _, mode := range []string{"host", "spawn"} {
		t.Run(mode, func(t *testing.T) {
			helper := exec.Command(os.Args[0], "-test.run=^$")
			helper.Env = append(os.Environ(), helperEnv+"="+mode, "PLUGINHOST_TEST_PLUGIN="+memoryPlugin)
			helper.Stderr = os.Stderr
			out, err := helper.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := helper.Start(); err != nil {
				t.Fatal(err)
			}
			var pid int
			if _, err := fmt.Fscan(out, &pid); err != nil {
				_ = helper.Process.Kill()
				_ = helper.Wait()
				t.Fatalf("helper gave no plugin pid: %v", err)
			}
			if !alive(pid) {
				t.Fatalf("plugin %d not running", pid)
			}
			if err := helper.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_ = helper.Wait()
			killed := time.Now()
			for alive(pid) {
				if time.Since(killed) > 5*time.Second {
					_ = syscall.Kill(pid, syscall.SIGKILL)
					t.Fatalf("plugin %d still running 5s after its host was killed", pid)
				}
				time.Sleep(10 * time.Millisecond)
			}
			t.Logf("plugin gone %s after its host was killed", time.Since(killed).Round(time.Millisecond))
		})
	}
}

func TestCloseOfFrozenPlugin(t *testing.T) {
	h := start(t, Config{})
	pid := h.PID()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, pid) // else Close may find it still answering
	closed := make(chan struct{})
	t0 := time.Now()
	go func() {
		_ = h.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(killGrace + 10*time.Second):
		_ = syscall.Kill(pid, syscall.SIGKILL)
		<-closed
		t.Fatal("Close hung on a frozen plugin")
	}
	if alive(pid) {
		t.Fatalf("frozen plugin %d still running after Close", pid)
	}
	t.Logf("Close of a frozen plugin took %s", time.Since(t0).Round(time.Millisecond))
}

func TestRelaunchBacksOffUntilThePluginStartsAgain(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "plugin")
	good := filepath.Join(dir, "good")
	data, err := os.ReadFile(memoryPlugin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, good} {
		if err := os.WriteFile(p, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	log, logs := testLogger(t)
	h := start(t, Config{Path: path, Logger: log, Name: "flaky", MinBackoff: 10 * time.Millisecond, MaxBackoff: 40 * time.Millisecond})
	ctx := ctxT(t)

	// Replace the executable by one that fails at once, then crash the
	// running plugin: relaunches fail, with growing delays up to the cap.
	broken := filepath.Join(dir, "broken")
	if err := os.WriteFile(broken, []byte("#!/bin/sh\necho 'broken on purpose' >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(broken, path); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(h.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	failed := map[string]string{"msg": "plugin relaunch failed", "plugin": "flaky"}
	deadline := time.Now().Add(20 * time.Second)
	for len(logs.all(failed)) < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than 4 failed relaunches within 20s")
		}
		if _, _, err := h.Get(ctx, "k"); !errors.Is(err, backend.ErrUnavailable) {
			t.Fatalf("call while the plugin cannot start = %v, want ErrUnavailable", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	var delays []float64
	for _, rec := range logs.all(failed) {
		delays = append(delays, rec["retry_in"].(float64))
		if !strings.Contains(fmt.Sprint(rec["error"]), "broken on purpose") {
			t.Errorf("relaunch error %q does not carry the plugin's words", rec["error"])
		}
	}
	for i := 1; i < len(delays); i++ {
		if delays[i] < delays[i-1] || delays[i] > float64(40*time.Millisecond) {
			t.Fatalf("retry delays %v: not growing up to the 40ms cap", delays)
		}
	}
	if delays[len(delays)-1] != float64(40*time.Millisecond) {
		t.Fatalf("retry delays %v never reached the cap", delays)
	}

	// Put the real plugin back: the host brings it up again.
	if err := os.Rename(good, path); err != nil {
		t.Fatal(err)
	}
	waitRestarted(t, h, 1, 20*time.Second)
	if _, err := h.Acquire(ctx, backend.AcquireRequest{Key: "k", OwnerToken: "t", TTL: time.Second}); err != nil {
		t.Fatalf("Acquire after recovery: %v", err)
	}
}

// The batch calls reach the memory plugin (which batches) and each item
// keeps its own outcome.
func TestBatchRoundTrip(t *testing.T) {
	h := start(t, Config{Name: "memory"})
	ctx := ctxT(t)
	if _, err := h.Acquire(ctx, backend.AcquireRequest{Key: "b/held", OwnerToken: "other", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	acq, err := h.AcquireBatch(ctx, []backend.AcquireRequest{
		{Key: "b/1", OwnerToken: "t1", TTL: time.Minute, Holder: "me"},
		{Key: "b/held", OwnerToken: "t2", TTL: time.Minute},
		{Key: "b/3", OwnerToken: "t3", TTL: 48 * time.Hour},
	})
	if err != nil || len(acq) != 3 {
		t.Fatalf("AcquireBatch = %+v, %v", acq, err)
	}
	if acq[0].Err != nil || !acq[0].Value.Acquired || acq[0].Value.Record.Key != "b/1" || acq[0].Value.Record.Holder != "me" {
		t.Fatalf("free key: %+v", acq[0])
	}
	if acq[1].Err != nil || acq[1].Value.Acquired || acq[1].Value.Record.Key != "b/held" {
		t.Fatalf("held key: %+v, want not acquired with its holder", acq[1])
	}
	if !errors.Is(acq[2].Err, backend.ErrInvalidArgument) || !strings.Contains(acq[2].Err.Error(), "ttl") {
		t.Fatalf("bad ttl: %+v, want its own ErrInvalidArgument naming ttl", acq[2])
	}
	ext, err := h.ExtendBatch(ctx, []backend.ExtendRequest{
		{Key: "b/1", OwnerToken: "t1", TTL: 2 * time.Minute},
		{Key: "b/held", OwnerToken: "t2", TTL: time.Minute},
	})
	if err != nil || len(ext) != 2 || !ext[0].Value.Extended || ext[0].Value.Record.Remaining <= time.Minute || ext[1].Value.Extended {
		t.Fatalf("ExtendBatch = %+v, %v", ext, err)
	}
	rel, err := h.ReleaseBatch(ctx, []backend.ReleaseRequest{{Key: "b/1", OwnerToken: "t1"}, {Key: "b/held", OwnerToken: "t2"}})
	if err != nil || len(rel) != 2 || !rel[0].Value || rel[1].Value || rel[0].Err != nil || rel[1].Err != nil {
		t.Fatalf("ReleaseBatch = %+v, %v", rel, err)
	}
	if _, found, _ := h.Get(ctx, "b/1"); found {
		t.Fatal("b/1 still held after its release in a batch")
	}
}

// A frozen plugin keeps its sockets open: only the liveness ping notices.
// It is reported down, its calls end, new ones fail at once; when it
// answers again it is up again, with its state (it was never restarted).
func TestFrozenPluginIsReportedDownUntilItAnswers(t *testing.T) {
	log, logs := testLogger(t)
	h := start(t, Config{Logger: log, PingInterval: 100 * time.Millisecond, PingTimeout: 300 * time.Millisecond, CallTimeout: time.Minute})
	ctx := ctxT(t)
	if r, err := h.Acquire(ctx, backend.AcquireRequest{Key: "k", OwnerToken: "t1", TTL: time.Minute}); err != nil || !r.Acquired {
		t.Fatal(r, err)
	}
	pid := h.PID()
	changed := h.Changed()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	waitStopped(t, pid)
	frozen := time.Now()
	inflight := make(chan error, 1)
	go func() {
		_, _, err := h.Get(ctx, "k")
		inflight <- err
	}()
	select {
	case err := <-inflight:
		if !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), "liveness ping") {
			t.Fatalf("a call in flight when the plugin froze: %v, want ErrUnavailable naming the liveness ping", err)
		}
		t.Logf("the call in flight ended %s after the freeze: %v", time.Since(frozen).Round(time.Millisecond), err)
	case <-time.After(10 * time.Second):
		t.Fatal("a call to the frozen plugin hung (CallTimeout is a minute)")
	}
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("Changed did not fire when the plugin stopped answering")
	}
	if h.Up() {
		t.Fatal("a frozen plugin is Up")
	}
	t0 := time.Now()
	if _, err := h.Acquire(ctx, backend.AcquireRequest{Key: "k2", OwnerToken: "t", TTL: time.Minute}); !errors.Is(err, backend.ErrUnavailable) || time.Since(t0) > time.Second {
		t.Fatalf("a call while frozen: %v after %s, want ErrUnavailable at once", err, time.Since(t0))
	}
	if logs.find(map[string]string{"msg": "plugin does not answer its liveness ping; reporting it down until it does"}) == nil {
		t.Error("no log record of the frozen plugin")
	}

	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for deadline := time.After(10 * time.Second); !h.Up(); {
		ch := h.Changed()
		if h.Up() {
			break
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatal("the plugin answers again but is not Up")
		}
	}
	if h.Restarts() != 0 || h.PID() != pid {
		t.Fatalf("the frozen plugin was restarted (%d restarts, pid %d → %d)", h.Restarts(), pid, h.PID())
	}
	if r, err := h.Acquire(ctx, backend.AcquireRequest{Key: "k", OwnerToken: "t2", TTL: time.Minute}); err != nil || r.Acquired {
		t.Fatalf("after it answers again, its lock is still held: %+v %v", r, err)
	}
}
