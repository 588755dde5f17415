package etcdconformance_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/holdfast/holdfast/conformance"
	"github.com/holdfast/holdfast/conformance/harness"
	"github.com/holdfast/holdfast/plugins/etcd/internal/etcdtest"
)

// conformanceOptions are the plugin options for the conformance runs: the
// shared etcd, in a key namespace of the run's own.
func conformanceOptions(t *testing.T) map[string]string {
	if endpoints == "" {
		conformance.SkipOrFail(t, fmt.Sprintf("no etcd: %s unset and none could be started: %v", etcdtest.EndpointsEnv, startErr))
	}
	return map[string]string{"endpoints": endpoints, "prefix": fmt.Sprintf("/holdfast-conformance/%d/", time.Now().UnixNano())}
}

// TestBackendConformance runs the shared suite's backend level against the
// holdfast-backend-etcd executable, through the plugin host.
func TestBackendConformance(t *testing.T) {
	conformance.RunBackend(t, conformance.Config{
		Plugin:        "etcd",
		PluginOptions: conformanceOptions(t),
	})
}

// TestServiceConformance runs the shared suite's service level against two
// holdfast servers on the etcd backend, started by the suite.
func TestServiceConformance(t *testing.T) {
	opts := conformanceOptions(t)
	// By path: the plugin need not sit next to the holdfast binary.
	plugin, err := harness.Binary(t.Context(), t.TempDir(), "holdfast-backend-etcd")
	if err != nil {
		t.Fatal(err)
	}
	conformance.RunService(t, conformance.Config{
		Serve: &harness.Options{Backend: plugin, BackendOptions: opts},
	})
}
