package postgres_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holdfast/holdfast/conformance"
	"github.com/holdfast/holdfast/harness"
	"github.com/holdfast/holdfast/plugins/postgres/pgtest"
)

// conformanceOptions are the plugin options for a conformance run: the
// shared PostgreSQL, in a schema of the run's own (dropped when it ends).
func conformanceOptions(t *testing.T) map[string]string {
	dsn := pgtest.DSN(t)
	schema := schemaName(t)
	t.Cleanup(func() { dropSchema(t, dsn, schema) })
	return map[string]string{"dsn": dsn, "schema": schema}
}

// TestBackendConformance runs the shared suite's backend level against the
// holdfast-backend-postgres executable, through the plugin host. The suite
// restarts the database server itself (the store-restart spec), so the run
// gets a PostgreSQL of its own instead of the shared one other tests use at
// the same time.
func TestBackendConformance(t *testing.T) {
	cfg := conformance.Config{Plugin: "postgres"}
	// RunBackend re-executes this test binary and runs the suite there:
	// start the server only in the process that uses it.
	if conformance.SuiteProcess(t) {
		srv := pgtest.Start(t) // stopped by its postmaster PID when t ends
		cfg.PluginOptions = map[string]string{"dsn": srv.DSN(), "schema": schemaName(t)}
		cfg.RestartStore = func(ctx context.Context) error { return crashAndRestart(ctx, srv) }
	}
	conformance.RunBackend(t, cfg)
}

// crashAndRestart stops the server in immediate mode (every backend process
// killed, no checkpoint, as a crash) and starts it again on the same data
// and port, with scripts/postgres.sh; it returns once the server accepts
// connections. Recovery replays the WAL, so every committed lock must be
// back. pgtest.Server.Restart does the same but fails a testing.T, which
// must not happen on the suite's goroutine; this returns the error instead.
func crashAndRestart(ctx context.Context, srv *pgtest.Server) error {
	script, err := pgtest.Script()
	if err != nil {
		return err
	}
	pidFile := filepath.Join(srv.Dir(), "pid") // the postmaster's, written by the script
	before, err := os.ReadFile(pidFile)
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", script, "restart", srv.Dir(), "immediate")
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("scripts/postgres.sh restart %s immediate: %w: %s", srv.Dir(), err, strings.TrimSpace(stderr.String()))
	}
	after, err := os.ReadFile(pidFile)
	if err != nil || bytes.Equal(before, after) {
		return fmt.Errorf("postmaster PID %q after the restart (was %q): no new process (%w)",
			bytes.TrimSpace(after), bytes.TrimSpace(before), err)
	}
	return nil
}

// TestServiceConformance runs the shared suite's service level against two
// holdfast servers on one PostgreSQL schema, started by the suite. The
// service level never restarts the store, so it runs on the shared server.
func TestServiceConformance(t *testing.T) {
	opts := conformanceOptions(t)
	// By path: the plugin need not sit next to the holdfast binary.
	plugin, err := harness.Binary(t.Context(), t.TempDir(), "holdfast-backend-postgres")
	if err != nil {
		t.Fatal(err)
	}
	conformance.RunService(t, conformance.Config{
		Name:  "server on postgres",
		Serve: &harness.Options{Backend: plugin, BackendOptions: opts},
	})
}
