package main

import (
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/holdfast/holdfast/conformance"
)

// The suite from a plain `go test`, as docs/writing-a-backend.md §7 shows:
// what a plugin author's CI runs after
// `go get github.com/holdfast/holdfast/conformance@vX.Y.Z`.
func TestBackendConformance(t *testing.T) {
	var cfg conformance.Config
	// RunBackend re-executes this test binary for the suite: build the
	// plugin only in the process that runs it.
	if conformance.SuiteProcess(t) {
		cfg.Plugin = filepath.Join(t.TempDir(), "holdfast-backend-mine")
		if out, err := exec.Command("go", "build", "-o", cfg.Plugin, ".").CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
	}
	conformance.RunBackend(t, cfg)
}
