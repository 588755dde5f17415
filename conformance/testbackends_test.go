package conformance_test

import (
	"path/filepath"
	"testing"

	"github.com/holdfast/holdfast/conformance"
	"github.com/holdfast/holdfast/harness"
)

// The suite on this repository's test backends, which need no service, at
// both levels. They are not selected by HOLDFAST_CONFORMANCE_BACKENDS (that
// picks among the shipped backends of backends_test.go).
//
//   - filestore (internal/filestore): durable, and its file allows one owner
//     (Config.SingleInstance): the suite never runs two instances on it at
//     once, checks that a second is refused, and restarts its server.
//   - fakefair (core/internal/fakebackend, as a plugin): an in-memory fair
//     backend, so the fair queue specs and the engine's fair path (every
//     waiting spec) run without etcd. Only those: the fake is the engine
//     tests' backend, not one to prove.
var testBackends = []struct {
	name           string // holdfast-backend-<name>
	pkg            string // its main package, from the repository root
	singleInstance bool
	// store returns the plugin options for a store in dir.
	store func(dir string) map[string]string
	// backendLabels and serviceLabels select specs ("" for all).
	backendLabels, serviceLabels string
}{
	{
		name: "filestore", pkg: "./conformance/internal/filestore/cmd/holdfast-backend-filestore", singleInstance: true,
		store: func(dir string) map[string]string { return map[string]string{"path": filepath.Join(dir, "locks.json")} },
	},
	{
		name: "fakefair", pkg: "./core/internal/fakebackend/cmd/holdfast-backend-fakefair",
		store:         func(string) map[string]string { return nil },
		backendLabels: "fair", serviceLabels: "fair || waiting",
	},
}

// The four runs go side by side: each is its own process, on a store of its
// own, and mostly waits for leases to run out.
func TestConformanceOnTestBackends(t *testing.T) {
	for _, b := range testBackends {
		t.Run(b.name+"/backend", func(t *testing.T) {
			t.Parallel()
			var cfg conformance.Config
			if conformance.SuiteProcess(t) {
				plugin := testBackend(t, b.name, b.pkg)
				cfg = conformance.Config{
					Plugin: plugin, PluginOptions: b.store(t.TempDir()), SingleInstance: b.singleInstance,
					// Both stores live in (or are owned by) the plugin
					// process: a restart of the store is a kill -9 of it.
					RestartStore: conformance.KillPlugin,
					LabelFilter:  b.backendLabels,
				}
			}
			conformance.RunBackend(t, cfg)
		})
		t.Run(b.name+"/service", func(t *testing.T) {
			t.Parallel()
			var cfg conformance.Config
			if conformance.SuiteProcess(t) {
				plugin := testBackend(t, b.name, b.pkg)
				cfg = conformance.Config{
					Serve:          &harness.Options{Backend: plugin, BackendOptions: b.store(t.TempDir())},
					SingleInstance: b.singleInstance,
					LabelFilter:    b.serviceLabels,
				}
			}
			conformance.RunService(t, cfg)
		})
	}
}

// testBackend builds holdfast-backend-<name> from pkg.
func testBackend(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := harness.Build(t.Context(), buildDir, "holdfast-backend-"+name, pkg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
