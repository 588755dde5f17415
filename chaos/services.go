package chaos

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/holdfast/holdfast/harness"
)

// ErrServiceMissing is returned (wrapped) when the software a backend needs
// (etcd, redis-server, PostgreSQL) is not installed; callers skip or fail.
var ErrServiceMissing = errors.New("chaos: backend service not installed")

// Service is the backend's own server (etcd, Redis, PostgreSQL), started by
// the project's scripts into a private directory so the harness can restart
// it by PID.
type Service struct {
	// Name is the backend name.
	Name string
	// Options are the --backend-opt values that point a plugin at it.
	Options map[string]string
	// Durable says a restart of the service loses no lock.
	Durable bool

	root, dir string
	// etcd members the harness restarted run as its own children.
	etcdWait chan struct{}
}

// StartService starts the service a backend needs; memory needs none and
// gets a Service with no options.
func StartService(ctx context.Context, root, backendName, dir string) (*Service, error) {
	s := &Service{Name: backendName, root: root, dir: dir, Durable: true, Options: map[string]string{}}
	var line string
	var err error
	switch backendName {
	case "memory":
		s.Durable = false
		return s, nil
	case "etcd":
		bin := os.Getenv("HOLDFAST_ETCD_BIN")
		if bin == "" {
			bin = filepath.Join(root, "bin", "etcd")
		}
		if _, err := os.Stat(bin); err != nil {
			return nil, fmt.Errorf("%w: no etcd at %s (scripts/setup.d/10-etcd.sh builds it)", ErrServiceMissing, bin)
		}
		line, err = s.script(ctx, "etcd.sh", "start", dir)
		if err == nil {
			s.Options["endpoints"], err = value(line, "HOLDFAST_ETCD_ENDPOINTS")
			s.Options["prefix"] = "/holdfast-chaos/"
		}
	case "redis":
		if _, err := exec.LookPath("redis-server"); err != nil {
			return nil, fmt.Errorf("%w: redis-server not in PATH (scripts/setup.sh installs it)", ErrServiceMissing)
		}
		// Append-only file, fsync on every write: a restart loses nothing.
		line, err = s.script(ctx, "redis.sh", "start", dir, "--persist")
		if err == nil {
			s.Options["addrs"], err = value(line, "HOLDFAST_REDIS_ADDR")
			s.Options["key_prefix"] = "chaos:"
		}
	case "postgres":
		if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl"); len(m) == 0 {
			if _, err := exec.LookPath("pg_ctl"); err != nil {
				return nil, fmt.Errorf("%w: no PostgreSQL server binaries (scripts/setup.d/30-postgres.sh installs them)", ErrServiceMissing)
			}
		}
		line, err = s.script(ctx, "postgres.sh", "start", dir)
		if err == nil {
			s.Options["dsn"], err = value(line, "HOLDFAST_POSTGRES_DSN")
		}
	default:
		return nil, fmt.Errorf("chaos: unknown backend %q", backendName)
	}
	if err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// value extracts VALUE from a script's "NAME=VALUE" output line.
func value(out, name string) (string, error) {
	for l := range strings.SplitSeq(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), name+"="); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("chaos: no %s= in %q", name, out)
}

func (s *Service) script(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(s.root, "scripts", name)}, args...)...)
	cmd.Dir = s.root
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("scripts/%s %s: %w\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// Restart crashes and restarts the service on the same port and data:
// etcd's member is SIGKILLed by its PID and started again with the same
// command line; Redis is restarted by scripts/redis.sh (its append-only file
// keeps the locks); PostgreSQL by scripts/postgres.sh restart immediate (a
// crash-like stop). It returns once the service answers again.
func (s *Service) Restart(ctx context.Context) error {
	switch s.Name {
	case "etcd":
		return s.restartEtcd(ctx)
	case "redis":
		_, err := s.script(ctx, "redis.sh", "restart", s.dir)
		return err
	case "postgres":
		_, err := s.script(ctx, "postgres.sh", "restart", s.dir, "immediate")
		return err
	}
	return fmt.Errorf("chaos: %s has no service to restart", s.Name)
}

func (s *Service) restartEtcd(ctx context.Context) error {
	pidFile := filepath.Join(s.dir, "m0.pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("%s: %w", pidFile, err)
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return fmt.Errorf("etcd pid %d: %w", pid, err)
	}
	args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill -9 etcd %d: %w", pid, err)
	}
	if s.etcdWait != nil {
		<-s.etcdWait // our own child from an earlier restart
	} else if err := waitGone(ctx, pid); err != nil {
		return err
	}
	log, err := os.OpenFile(filepath.Join(s.dir, "m0.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("restart etcd: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); log.Close(); close(done) }()
	s.etcdWait = done
	// The script stops the member by this file.
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		return err
	}
	endpoint := strings.Split(s.Options["endpoints"], ",")[0]
	return pollUntil(ctx, 30*time.Second, func() bool {
		resp, err := http.Get(endpoint + "/health")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		return strings.Contains(buf.String(), `"health":"true"`)
	}, "etcd healthy after restart")
}

// Stop stops the service by its PID (the scripts' stop) and removes its data.
func (s *Service) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	switch s.Name {
	case "etcd":
		_, _ = s.script(ctx, "etcd.sh", "stop", s.dir)
		if s.etcdWait != nil {
			<-s.etcdWait
		}
	case "redis":
		_, _ = s.script(ctx, "redis.sh", "stop", s.dir)
	case "postgres":
		_, _ = s.script(ctx, "postgres.sh", "stop", s.dir)
	}
}

// pollUntil calls cond every 20ms until it holds, ctx ends or timeout passes.
func pollUntil(ctx context.Context, timeout time.Duration, cond func() bool, what string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("chaos: %s: not within %s: %w", what, timeout, ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

func waitGone(ctx context.Context, pid int) error {
	return pollUntil(ctx, 30*time.Second, func() bool { return !harness.Alive(pid) }, fmt.Sprintf("pid %d gone", pid))
}
