package conformance_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/holdfast/holdfast/conformance"
	"github.com/holdfast/holdfast/harness"
)

// inTree lists the backends this package proves, each with the plugin
// options it needs and the environment variables they come from. A backend
// whose variables are unset is skipped, or fails under
// HOLDFAST_REQUIRE_SERVICES=1. Add a backend by adding a row. The etcd,
// Redis and PostgreSQL backends run the suite from their own modules
// (plugins/etcd/etcdconformance, plugins/redis/redisconformance,
// plugins/postgres), on servers of their own that the store-restart spec
// restarts.
var inTree = []struct {
	name string
	env  map[string]string // plugin option -> environment variable
}{
	{name: "memory"},
}

// selected returns the rows to run: all, or those named in
// HOLDFAST_CONFORMANCE_BACKENDS (comma-separated).
func selected() []string {
	var names []string
	only := strings.Split(os.Getenv("HOLDFAST_CONFORMANCE_BACKENDS"), ",")
	for _, b := range inTree {
		if os.Getenv("HOLDFAST_CONFORMANCE_BACKENDS") == "" || slices.Contains(only, b.name) {
			names = append(names, b.name)
		}
	}
	return names
}

func pluginOptions(t *testing.T, name string) map[string]string {
	t.Helper()
	for _, b := range inTree {
		if b.name != name {
			continue
		}
		opts, err := harness.OptionsFromEnv(b.env)
		if err != nil {
			harness.SkipOrFail(t, name+": "+err.Error())
		}
		return opts
	}
	t.Fatalf("unknown backend %q", name)
	return nil
}

// TestBackendConformance runs the backend-level suite against each in-tree
// plugin binary.
func TestBackendConformance(t *testing.T) {
	for _, name := range selected() {
		t.Run(name, func(t *testing.T) {
			conformance.RunBackend(t, conformance.Config{
				Plugin:        name,
				PluginOptions: pluginOptions(t, name),
			})
		})
	}
}

// TestServiceConformance runs the service-level suite against holdfast
// servers on each in-tree backend, started by the suite itself.
func TestServiceConformance(t *testing.T) {
	for _, name := range selected() {
		t.Run(name, func(t *testing.T) {
			conformance.RunService(t, conformance.Config{
				Serve: &harness.Options{Backend: name, BackendOptions: pluginOptions(t, name)},
			})
		})
	}
}
