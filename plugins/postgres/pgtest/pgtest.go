// Package pgtest gives tests a real PostgreSQL server, started and stopped
// with the project's scripts/postgres.sh (temp data dir, free port on
// 127.0.0.1, stopped by PID). It never mocks anything.
//
// DSN returns $HOLDFAST_POSTGRES_DSN when set (make test-postgres starts one
// server for the whole run); otherwise it starts one server per test binary
// on first use, which Main stops when the tests end. Start gives a test its
// own server, for tests that restart or stop it.
//
// When no server can be had (no PostgreSQL binaries installed), tests skip,
// unless HOLDFAST_REQUIRE_SERVICES=1, in which case they fail.
package pgtest

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
	"sync"
	"testing"
	"time"

	"github.com/holdfast/holdfast/harness"
)

// EnvDSN is the environment variable naming a running server.
const EnvDSN = "HOLDFAST_POSTGRES_DSN"

// Server is a private PostgreSQL server started by scripts/postgres.sh.
type Server struct {
	dir    string
	script string
	mu     sync.Mutex
	dsn    string
}

// DSN is the server's connection string (URL form, password included).
func (s *Server) DSN() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dsn
}

// Dir is the server's state directory.
func (s *Server) Dir() string { return s.dir }

var shared struct {
	once   sync.Once
	server *Server
	err    error
}

// Main runs the tests and then stops the server DSN may have started.
// Use it as goleak.VerifyTestMain(pgtest.Main(m)).
func Main(m interface{ Run() int }) interface{ Run() int } { return mainRunner{m} }

type mainRunner struct{ m interface{ Run() int } }

func (r mainRunner) Run() int {
	code := r.m.Run()
	if shared.server != nil {
		if err := shared.server.stop(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
		}
	}
	return code
}

// DSN returns a connection string to a running PostgreSQL server: the one in
// $HOLDFAST_POSTGRES_DSN, or one started for this test binary.
func DSN(t testing.TB) string {
	t.Helper()
	if dsn := os.Getenv(EnvDSN); dsn != "" {
		return dsn
	}
	shared.once.Do(func() {
		shared.server, shared.err = start()
		if shared.err == nil {
			// Test binaries that re-execute themselves (the conformance
			// suite does) reuse this server instead of starting their own.
			shared.err = os.Setenv(EnvDSN, shared.server.DSN())
		}
	})
	if shared.err != nil {
		unavailable(t, shared.err)
	}
	return shared.server.DSN()
}

// Start starts a private server for t, stopped when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := start()
	if err != nil {
		unavailable(t, err)
	}
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return s
}

// Restart stops the server (mode "fast": clean shutdown; "immediate": like a
// crash, recovery from WAL on start) and starts it again with the same data
// and port.
func (s *Server) Restart(t testing.TB, mode string) {
	t.Helper()
	dsn, err := s.run("restart", mode)
	if err != nil {
		t.Fatalf("pgtest: restart: %v", err)
	}
	s.mu.Lock()
	s.dsn = dsn
	s.mu.Unlock()
}

// Kill stops the server (as Restart's first half) without starting it again;
// Restart brings it back.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	if _, err := s.run("kill", "immediate"); err != nil {
		t.Fatalf("pgtest: kill: %v", err)
	}
}

func unavailable(t testing.TB, err error) {
	t.Helper()
	harness.SkipOrFail(t, fmt.Sprintf("no PostgreSQL server: set %s or install PostgreSQL (scripts/setup.d/30-postgres.sh): %v", EnvDSN, err))
}

// Script finds scripts/postgres.sh by walking up from the working directory.
func Script() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, "scripts", "postgres.sh")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("scripts/postgres.sh not found above the working directory")
		}
		dir = parent
	}
}

func start() (*Server, error) {
	script, err := Script()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "holdfast-pgtest-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, script: script}
	dsn, err := s.run("start", "")
	if err != nil {
		_ = s.stop()
		return nil, err
	}
	s.dsn = dsn
	return s, nil
}

func (s *Server) stop() error {
	_, err := s.run("stop", "")
	if rmErr := os.RemoveAll(s.dir); err == nil {
		err = rmErr
	}
	return err
}

// run runs the script and returns the DSN it printed, if any.
func (s *Server) run(cmd, mode string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := []string{s.script, cmd, s.dir}
	if mode != "" {
		args = append(args, mode)
	}
	var stdout, stderr bytes.Buffer
	c := exec.CommandContext(ctx, "bash", args...)
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		return "", fmt.Errorf("scripts/postgres.sh %s: %w: %s", cmd, err, strings.TrimSpace(stderr.String()))
	}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		if dsn, ok := strings.CutPrefix(sc.Text(), EnvDSN+"="); ok {
			return dsn, nil
		}
	}
	if cmd == "start" || cmd == "restart" {
		return "", fmt.Errorf("scripts/postgres.sh %s printed no %s line", cmd, EnvDSN)
	}
	return "", nil
}
