package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/harness"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
	"github.com/holdfast/holdfast/server/internal/version"
)

var binDir string

// binVersion is what the holdfast under test says its version is (a
// checkout build: the repository's VERSION). Tests that check the version is
// reported (info, metrics) compare with it.
var binVersion string

func TestMain(m *testing.M) {
	dir, cleanup, err := binaries()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	binDir = dir
	out, err := exec.Command(filepath.Join(dir, "holdfast"), "version").Output()
	binVersion = strings.TrimSpace(string(out))
	if err != nil || binVersion == "" {
		cleanup()
		fmt.Fprintf(os.Stderr, "e2e: holdfast version: %q, %v\n", out, err)
		os.Exit(1)
	}
	code := m.Run()
	cleanup()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// binaries returns the directory holding holdfast and
// holdfast-backend-memory: $HOLDFAST_BIN_DIR when it has both, else a temp
// dir they are built into.
func binaries() (string, func(), error) {
	if dir := os.Getenv("HOLDFAST_BIN_DIR"); dir != "" && exists(dir, "holdfast") && exists(dir, "holdfast-backend-memory") {
		return dir, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "holdfast-e2e-")
	if err != nil {
		return "", nil, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	cmd := exec.Command("go", "build", "-o", dir+"/",
		"github.com/holdfast/holdfast/server/cmd/holdfast",
		"github.com/holdfast/holdfast/plugins/memory/cmd/holdfast-backend-memory")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("go build: %w", err)
	}
	return dir, cleanup, nil
}

func exists(dir, name string) bool {
	st, err := os.Stat(filepath.Join(dir, name))
	return err == nil && !st.IsDir()
}

var readiness = regexp.MustCompile(`^holdfast serving addr=(\S+) backend=(\S+) shared=(true|false) durable=(true|false)$`)

// syncBuffer is a bytes.Buffer safe for a process writing while a test
// reads.
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

// server is one running `holdfast serve`, started through the harness
// module (the one copy of the readiness protocol).
type server struct {
	*harness.Server
	addr string
	line string
}

// startServer runs holdfast serve with exactly args and waits for its
// readiness line on stdout (an event, not a sleep). At cleanup the server is
// killed unless a test stopped it; nothing but the readiness line may have
// reached stdout.
func startServer(t *testing.T, env []string, args ...string) *server {
	t.Helper()
	hs, err := harness.Start(t.Context(), harness.Options{
		Binary:  filepath.Join(binDir, "holdfast"),
		Command: append([]string{"serve"}, args...),
		Env:     env,
		// Whole logs: tests read every line.
		LogBytes: 16 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	s := &server{Server: hs, addr: hs.Addr, line: hs.ReadyLine}
	t.Cleanup(func() {
		_ = s.Kill()
		if out := s.Stdout(); len(out) > 1 {
			t.Errorf("holdfast wrote more than the readiness line to stdout: %q", out)
		}
		if t.Failed() {
			t.Logf("holdfast stderr:\n%s", s.Logs())
		}
	})
	if m := readiness.FindStringSubmatch(s.line); m == nil {
		t.Fatalf("readiness line %q does not match %s", s.line, readiness)
	}
	return s
}

// waitStderr waits until the server's stderr contains want.
func (s *server) waitStderr(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(s.Logs(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("stderr does not say %q:\n%s", want, s.Logs())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stop sends SIGTERM and returns the exit error (nil for exit code 0).
func (s *server) stop(t *testing.T) error {
	t.Helper()
	select {
	case <-s.Done():
		return s.ExitErr()
	default:
	}
	// A second SIGTERM is harmless: the server is already shutting down.
	if err := s.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
		return s.ExitErr()
	case <-time.After(20 * time.Second):
		t.Fatal("holdfast did not exit within 20s of SIGTERM")
		return nil
	}
}

func postJSON(t *testing.T, c *http.Client, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := c.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s: %d %q is not JSON", url, resp.StatusCode, raw)
	}
	return resp.StatusCode, m
}

func TestServeEndToEnd(t *testing.T) {
	s := startServer(t, nil, "--addr", "127.0.0.1:0")
	if !strings.HasSuffix(s.line, "backend=memory shared=false durable=false") {
		t.Fatalf("readiness line %q", s.line)
	}
	// stderr is copied from a pipe: poll it until the deadline.
	s.waitStderr(t, "backend is not shared")
	base := "http://" + s.addr
	h1 := &http.Transport{}
	defer h1.CloseIdleConnections()
	httpc := &http.Client{Transport: h1}

	// Connect JSON, as curl does it.
	status, m := postJSON(t, httpc, base+"/holdfast.lock.v1.LockService/Acquire",
		`{"key": "jobs/nightly", "ttl": "30s", "holder": "e2e"}`)
	if status != 200 || m["acquired"] != true {
		t.Fatalf("acquire over Connect JSON: %d %v", status, m)
	}
	token := m["lease"].(map[string]any)["ownerToken"].(string)
	status, m = postJSON(t, httpc, base+"/holdfast.lock.v1.LockService/Acquire", `{"key": "jobs/nightly", "ttl": "-1s"}`)
	if status != 400 || m["code"] != "invalid_argument" || !strings.HasPrefix(m["message"].(string), "ttl:") {
		t.Fatalf("bad ttl over Connect JSON: %d %v", status, m)
	}
	status, m = postJSON(t, httpc, base+"/holdfast.lock.v1.LockService/Acquire", `{"key": `)
	if status != 400 || m["code"] != "invalid_argument" {
		t.Fatalf("malformed JSON: %d %v", status, m)
	}
	status, m = postJSON(t, httpc, base+"/holdfast.lock.v1.LockService/Release",
		fmt.Sprintf(`{"key": "jobs/nightly", "ownerToken": %q}`, token))
	if status != 200 || m["released"] != true {
		t.Fatalf("release over Connect JSON: %d %v", status, m)
	}

	// gRPC (HTTP/2 without TLS) through the connect client.
	h2 := new(http.Protocols)
	h2.SetUnencryptedHTTP2(true)
	h2t := &http.Transport{Protocols: h2}
	defer h2t.CloseIdleConnections()
	c := lockv1connect.NewLockServiceClient(&http.Client{Transport: h2t}, base, connect.WithGRPC())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	acq, err := c.Acquire(ctx, &lockv1.AcquireRequest{Key: "grpc/k", Ttl: durationpb.New(time.Minute)})
	if err != nil || !acq.GetAcquired() {
		t.Fatalf("acquire over gRPC: %v %v", acq, err)
	}
	rel, err := c.Release(ctx, &lockv1.ReleaseRequest{Key: "grpc/k", OwnerToken: acq.GetLease().GetOwnerToken()})
	if err != nil || !rel.GetReleased() {
		t.Fatalf("release over gRPC: %v %v", rel, err)
	}
	_, err = c.Acquire(ctx, &lockv1.AcquireRequest{Key: "", Ttl: durationpb.New(time.Minute)})
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("empty key over gRPC: %v", err)
	}
	info, err := c.GetServerInfo(ctx, &lockv1.GetServerInfoRequest{})
	if err != nil || info.GetBackend().GetName() != "memory" || info.GetVersion() == "" {
		t.Fatalf("server info: %v %v", info, err)
	}

	// gRPC health with grpc-go's own client.
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	hc, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: lockv1connect.LockServiceName})
	conn.Close()
	if err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("grpc health: %v %v", hc, err)
	}

	// A lease held at shutdown is not released by the server (the memory
	// plugin's locks die with it, but the server does not give them up).
	if _, err := c.Acquire(ctx, &lockv1.AcquireRequest{Key: "held/at/shutdown", Ttl: durationpb.New(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	// At SIGTERM a watcher and a waiter are told unavailable, and the
	// server still exits 0.
	stream, err := c.Watch(ctx, &lockv1.WatchRequest{})
	if err != nil || !stream.Receive() {
		t.Fatalf("watch: %v", err)
	}
	waitErr := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, &lockv1.AcquireRequest{Key: "held/at/shutdown", Ttl: durationpb.New(time.Minute), Wait: durationpb.New(time.Minute)})
		waitErr <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		ins, err := c.Inspect(ctx, &lockv1.InspectRequest{Key: "held/at/shutdown"})
		if err != nil {
			t.Fatal(err)
		}
		if ins.GetState().GetWaiters() == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the waiter never queued")
		}
	}
	if err := s.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-waitErr; connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("waiter at shutdown: %v, want unavailable", err)
	}
	for stream.Receive() {
	}
	if connect.CodeOf(stream.Err()) != connect.CodeUnavailable {
		t.Fatalf("watcher at shutdown: %v, want unavailable", stream.Err())
	}
	stream.Close()
	h1.CloseIdleConnections()
	h2t.CloseIdleConnections()
	if err := s.stop(t); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, s.Logs())
	}
}

func TestWaiterWokenByReleaseAcrossTheWire(t *testing.T) {
	s := startServer(t, nil, "--addr", "127.0.0.1:0")
	h2 := new(http.Protocols)
	h2.SetUnencryptedHTTP2(true)
	h2t := &http.Transport{Protocols: h2}
	defer h2t.CloseIdleConnections()
	c := lockv1connect.NewLockServiceClient(&http.Client{Transport: h2t}, "http://"+s.addr, connect.WithGRPC())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	holder, err := c.Acquire(ctx, &lockv1.AcquireRequest{Key: "k", Ttl: durationpb.New(time.Minute)})
	if err != nil || !holder.GetAcquired() {
		t.Fatal(holder, err)
	}
	got := make(chan time.Time, 1)
	go func() {
		resp, err := c.Acquire(ctx, &lockv1.AcquireRequest{Key: "k", Ttl: durationpb.New(time.Minute), Wait: durationpb.New(5 * time.Second)})
		if err != nil || !resp.GetAcquired() {
			t.Errorf("waiter: %v %v", resp, err)
		}
		got <- time.Now()
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ins, err := c.Inspect(ctx, &lockv1.InspectRequest{Key: "k"})
		if err != nil {
			t.Fatal(err)
		}
		if ins.GetState().GetWaiters() == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the waiter never queued")
		}
		time.Sleep(2 * time.Millisecond)
	}
	released := time.Now()
	if _, err := c.Release(ctx, &lockv1.ReleaseRequest{Key: "k", OwnerToken: holder.GetLease().GetOwnerToken()}); err != nil {
		t.Fatal(err)
	}
	lag := (<-got).Sub(released)
	t.Logf("waiter acquired %s after the release was sent", lag)
	if lag > 200*time.Millisecond { // typically 1-3 ms; slack for a loaded 2-core CI box
		t.Fatalf("waiter took %s after the release", lag)
	}
	h2t.CloseIdleConnections()
	if err := s.stop(t); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
}

func TestBackendByNameAndConfig(t *testing.T) {
	// A plugin found by name in PATH (holdfast-backend-NAME), with the
	// address from a config file and the backend from the environment.
	pathDir := t.TempDir()
	if err := os.Symlink(filepath.Join(binDir, "holdfast-backend-memory"), filepath.Join(pathDir, "holdfast-backend-e2etest")); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "holdfast.yaml")
	if err := os.WriteFile(cfg, []byte("addr: 127.0.0.1:0\nmax-ttl: 1m\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, []string{"PATH=" + pathDir + ":" + os.Getenv("PATH"), "HOLDFAST_BACKEND=e2etest"}, "--config", cfg)
	s.waitStderr(t, "holdfast-backend-e2etest")
	h1 := &http.Transport{}
	defer h1.CloseIdleConnections()
	status, m := postJSON(t, &http.Client{Transport: h1}, "http://"+s.addr+"/holdfast.lock.v1.LockService/Acquire", `{"key": "k", "ttl": "120s"}`)
	if status != 400 || m["message"] != "ttl: 2m exceeds the maximum 1m" {
		t.Fatalf("max-ttl from the config file not applied: %d %v", status, m)
	}
	h1.CloseIdleConnections()
	if err := s.stop(t); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
}

func TestStartFailures(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"unknown backend":     {[]string{"--backend", "nosuchbackend"}, "no holdfast-backend-nosuchbackend"},
		"option refused":      {[]string{"--backend-opt", "color=blue"}, "unknown option(s) color"},
		"bad option":          {[]string{"--backend-opt", "novalue"}, "want key=value"},
		"checksum mismatch":   {[]string{"--backend-sha256", strings.Repeat("00", 32)}, "checksum"},
		"unknown config file": {[]string{"--config", "/nonexistent/holdfast.yaml"}, "no such file"},
	} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(filepath.Join(binDir, "holdfast"), append([]string{"serve", "--addr", "127.0.0.1:0"}, tc.args...)...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("exit: %v, want status 1\n%s", err, stderr.String())
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout %q, want nothing", stdout.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("stderr does not say %q:\n%s", tc.want, stderr.String())
			}
		})
	}
}

func TestVersion(t *testing.T) {
	out, err := exec.Command(filepath.Join(binDir, "holdfast"), "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	// Built from this checkout (go.work): no module version in its build
	// info, so the repository's VERSION.
	if v := strings.TrimSpace(string(out)); v != version.Release {
		t.Fatalf("holdfast version printed %q, want %q", v, version.Release)
	}
}

// The server logs its plugin's pid in its start-up line.
var pluginStarted = regexp.MustCompile(`msg="holdfast serving".* plugin_pid=(\d+)`)

func TestPluginKilled(t *testing.T) {
	s := startServer(t, nil, "--addr", "127.0.0.1:0")
	s.waitStderr(t, `plugin_pid=`)
	m := pluginStarted.FindStringSubmatch(s.Logs())
	if m == nil {
		t.Fatalf("no plugin pid in the log:\n%s", s.Logs())
	}
	pid, err := strconv.Atoi(m[1])
	if err != nil {
		t.Fatal(err)
	}

	h2 := new(http.Protocols)
	h2.SetUnencryptedHTTP2(true)
	h2t := &http.Transport{Protocols: h2}
	defer h2t.CloseIdleConnections()
	c := lockv1connect.NewLockServiceClient(&http.Client{Transport: h2t}, "http://"+s.addr, connect.WithGRPC())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	before, err := c.Acquire(ctx, &lockv1.AcquireRequest{Key: "k", Ttl: durationpb.New(time.Minute)})
	if err != nil || !before.GetAcquired() {
		t.Fatal(before, err)
	}
	stream, err := c.Watch(ctx, &lockv1.WatchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().GetType() != lockv1.EventType_EVENT_TYPE_SYNCED {
		t.Fatalf("watch: %v %v", stream.Msg(), stream.Err())
	}

	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The watcher is told (unavailable) rather than silently missing events.
	for stream.Receive() {
	}
	if code := connect.CodeOf(stream.Err()); code != connect.CodeUnavailable {
		t.Fatalf("watch after the plugin died: %v, want unavailable", stream.Err())
	}
	// A waiter rides out the restart: the memory plugin's locks died with
	// it, so once the plugin is back the key is free and the waiter gets it.
	after, err := c.Acquire(ctx, &lockv1.AcquireRequest{Key: "k", Ttl: durationpb.New(time.Minute), Wait: durationpb.New(15 * time.Second)})
	if err != nil || !after.GetAcquired() {
		t.Fatalf("waiter across a plugin restart: %v %v", after, err)
	}
	if after.GetLease().GetFencingToken() <= before.GetLease().GetFencingToken() {
		t.Fatalf("fencing token went from %d to %d across a plugin restart",
			before.GetLease().GetFencingToken(), after.GetLease().GetFencingToken())
	}
	h2t.CloseIdleConnections()
	if err := s.stop(t); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
}

func TestBackendByPathPinned(t *testing.T) {
	plugin := filepath.Join(binDir, "holdfast-backend-memory")
	raw, err := os.ReadFile(plugin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	s := startServer(t, []string{"HOLDFAST_BACKEND_SHA256=" + hex.EncodeToString(sum[:])},
		"--addr", "127.0.0.1:0", "--backend", plugin)
	if !strings.Contains(s.line, "backend=memory") {
		t.Fatalf("readiness line %q", s.line)
	}
	if err := s.stop(t); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
}
