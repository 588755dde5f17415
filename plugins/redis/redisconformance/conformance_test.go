package redisconformance_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/holdfast/holdfast/conformance"
	"github.com/holdfast/holdfast/harness"
	"github.com/holdfast/holdfast/plugins/redis"
	"github.com/holdfast/holdfast/plugins/redis/redistest"
)

// TestBackendConformance runs the shared suite's backend level against the
// holdfast-backend-redis executable, through the plugin host, twice: on a
// Redis without persistence (durable=false: a restart empties it, and
// fencing tokens must still never go back) and on one that fsyncs its
// append-only file on every write (durable=true: held locks must survive a
// restart with their fencing and owner tokens). The suite restarts Redis
// itself (the store-restart spec), so each run gets a redis-server of its
// own, started and restarted by scripts/redis.sh and stopped by its PID.
func TestBackendConformance(t *testing.T) {
	for _, c := range []struct {
		name    string
		persist bool
	}{
		{name: "volatile"},
		{name: "persistent", persist: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var cfg conformance.Config
			// RunBackend re-executes this test binary and runs the suite
			// there: start the server only in the process that uses it.
			if conformance.SuiteProcess(t) {
				s := startRedis(t, c.persist)
				opts := map[string]string{"addrs": s.addr}
				checkDurable(t, opts, c.persist)
				cfg = conformance.Config{
					Name:          "redis " + c.name,
					Plugin:        "redis",
					PluginOptions: opts,
					RestartStore:  s.restart,
				}
			}
			conformance.RunBackend(t, cfg)
		})
	}
}

// TestServiceConformance runs the shared suite's service level against two
// holdfast servers on one Redis, started by the suite. The service level
// never restarts the store, so it may run on the shared Redis
// ($HOLDFAST_REDIS_ADDR).
func TestServiceConformance(t *testing.T) {
	var cfg conformance.Config
	if conformance.SuiteProcess(t) {
		addr := redistest.Addr(t)
		// By path: the plugin need not sit next to the holdfast binary.
		plugin, err := harness.Binary(t.Context(), t.TempDir(), "holdfast-backend-redis")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Name = "server on redis"
		cfg.Serve = &harness.Options{Backend: plugin, BackendOptions: map[string]string{"addrs": addr}}
	}
	conformance.RunService(t, cfg)
}

// checkDurable makes sure the backend reports what the run means to prove:
// the spec checks held locks only on a backend that says it is durable, so a
// persistent Redis the plugin did not recognise as such would pass it
// without proving anything.
func checkDurable(t *testing.T, opts map[string]string, want bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	b, err := redis.Open(ctx, opts)
	if err != nil {
		t.Fatalf("open the redis backend: %v", err)
	}
	defer b.(*redis.Backend).Close()
	info, err := b.Info(ctx)
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	if info.Durable != want {
		t.Fatalf("the redis backend reports durable=%t on this Redis, want %t", info.Durable, want)
	}
}

// server is a redis-server owned by one test, driven by scripts/redis.sh.
type server struct {
	script, dir, addr string
}

// startRedis starts a redis-server for t on a free loopback port with its
// data in a temp dir (with --persist: appendonly yes, appendfsync always);
// it is stopped by its PID when t ends.
func startRedis(t *testing.T, persist bool) *server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		harness.SkipOrFail(t, "redis-server not in PATH: run scripts/setup.sh")
	}
	script, err := redisScript()
	if err != nil {
		t.Fatal(err)
	}
	s := &server{script: script, dir: t.TempDir()}
	var flags []string
	if persist {
		flags = append(flags, "--persist")
	}
	out, err := s.run(t.Context(), "start", flags...)
	t.Cleanup(func() {
		if _, err := s.run(context.Background(), "stop"); err != nil {
			t.Errorf("stop redis: %v", err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if s.addr, err = addrLine(out); err != nil {
		t.Fatal(err)
	}
	return s
}

// restart is Config.RestartStore: scripts/redis.sh stops the server by its
// PID (SIGTERM: Redis without persistence comes back empty; with it, from
// its append-only file) and starts it again on the same port, returning
// once it answers PING.
func (s *server) restart(ctx context.Context) error {
	before, err := s.pid()
	if err != nil {
		return err
	}
	out, err := s.run(ctx, "restart")
	if err != nil {
		return err
	}
	if after, err := s.pid(); err != nil || after == before {
		return fmt.Errorf("redis-server PID %q after the restart (was %q): no new process (%w)", after, before, err)
	}
	addr, err := addrLine(out)
	if err != nil {
		return err
	}
	if addr != s.addr {
		return fmt.Errorf("redis came back on %s, not %s", addr, s.addr)
	}
	return nil
}

// run runs scripts/redis.sh CMD DIR [FLAGS...] and returns its stdout.
func (s *server) run(ctx context.Context, cmd string, flags ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	c := exec.CommandContext(ctx, "bash", append([]string{s.script, cmd, s.dir}, flags...)...)
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		return "", fmt.Errorf("scripts/redis.sh %s %s: %w: %s", cmd, strings.Join(flags, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// pid is the PID scripts/redis.sh recorded for the running server.
func (s *server) pid() (string, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, "redis.pid"))
	return strings.TrimSpace(string(b)), err
}

// addrLine finds HOLDFAST_REDIS_ADDR=... in the script's output.
func addrLine(out string) (string, error) {
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), redistest.EnvAddr+"="); ok {
			return a, nil
		}
	}
	return "", fmt.Errorf("scripts/redis.sh printed no %s= line: %q", redistest.EnvAddr, out)
}

// redisScript finds scripts/redis.sh by walking up from the working
// directory (go test runs in the package's directory).
func redisScript() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, "scripts", "redis.sh")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("scripts/redis.sh not found above the working directory")
		}
		dir = parent
	}
}
