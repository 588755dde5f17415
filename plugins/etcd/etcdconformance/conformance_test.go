package etcdconformance_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/holdfast/holdfast/conformance"
	"github.com/holdfast/holdfast/harness"
	"github.com/holdfast/holdfast/plugins/etcd/internal/etcdtest"
)

// conformanceOptions are the plugin options for the conformance runs: the
// shared etcd, in a key namespace of the run's own.
func conformanceOptions(t *testing.T) map[string]string {
	if endpoints == "" {
		harness.SkipOrFail(t, fmt.Sprintf("no etcd: %s unset and none could be started: %v", etcdtest.EndpointsEnv, startErr))
	}
	return namespaced(endpoints)
}

func namespaced(endpoints string) map[string]string {
	return map[string]string{"endpoints": endpoints, "prefix": fmt.Sprintf("/holdfast-conformance/%d/", time.Now().UnixNano())}
}

// TestBackendConformance runs the shared suite's backend level against the
// holdfast-backend-etcd executable, through the plugin host. The suite
// restarts etcd itself (the store-restart spec), so the run gets an etcd of
// its own instead of the shared one other tests use at the same time.
func TestBackendConformance(t *testing.T) {
	cfg := conformance.Config{Plugin: "etcd"}
	// RunBackend re-executes this test binary and runs the suite there:
	// start the etcd only in the process that uses it.
	if conformance.SuiteProcess(t) {
		member := ownEtcd(t)
		cfg.PluginOptions = namespaced(member.ClientURL)
		cfg.RestartStore = func(ctx context.Context) error { return crashAndRestart(ctx, member) }
	}
	conformance.RunBackend(t, cfg)
}

// ownEtcd starts a one-member etcd in a temp dir for t, stopped (by PID)
// when t ends.
func ownEtcd(t *testing.T) *etcdtest.Member {
	t.Helper()
	if _, err := etcdtest.Binary(); err != nil {
		harness.SkipOrFail(t, err.Error())
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c, err := etcdtest.Start(ctx, t.TempDir(), 1)
	if err != nil {
		t.Fatalf("start etcd for the store-restart spec: %v", err)
	}
	t.Cleanup(c.Stop)
	return c.Members[0]
}

// crashAndRestart kills the etcd member with SIGKILL (by its PID: no clean
// shutdown, as a crash) and starts it again on the same ports and data dir;
// it returns once the member reports healthy. etcd fsyncs its WAL before it
// answers a write, so every lock, lease and revision must survive this.
func crashAndRestart(ctx context.Context, m *etcdtest.Member) error {
	m.Kill()
	if err := m.Restart(ctx); err != nil {
		return fmt.Errorf("restart etcd: %w", err)
	}
	return nil
}

// TestServiceConformance runs the shared suite's service level against two
// holdfast servers on the etcd backend, started by the suite. The service
// level never restarts the store, so it runs on the shared etcd.
func TestServiceConformance(t *testing.T) {
	opts := conformanceOptions(t)
	// By path: the plugin need not sit next to the holdfast binary.
	plugin, err := harness.Binary(t.Context(), t.TempDir(), "holdfast-backend-etcd")
	if err != nil {
		t.Fatal(err)
	}
	conformance.RunService(t, conformance.Config{
		Name:  "server on etcd",
		Serve: &harness.Options{Backend: plugin, BackendOptions: opts},
	})
}
