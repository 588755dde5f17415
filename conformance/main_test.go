package conformance_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/holdfast/holdfast/conformance"
	"github.com/holdfast/holdfast/harness"
	"go.uber.org/goleak"
)

// buildDir receives the binaries these tests build (once per process) when
// $HOLDFAST_BIN_DIR does not have them.
var buildDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "holdfast-conformance-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buildDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(conformance.LeakOptions()...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// binary finds or builds a holdfast executable once for the whole package.
func binary(t *testing.T, name string) string {
	t.Helper()
	p, err := harness.Binary(t.Context(), buildDir, name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// brokenBackend returns the broken backend called name (package
// internal/brokenbackends): a link, named after the bug, to the one
// executable that serves them all.
func brokenBackend(t *testing.T, name string) string {
	t.Helper()
	exe, err := harness.Build(t.Context(), buildDir, "holdfast-backend-broken", "./conformance/internal/brokenbackends/cmd/holdfast-backend-broken")
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(buildDir, name)
	if err := os.Symlink(exe, link); err != nil && !errors.Is(err, fs.ErrExist) {
		t.Fatal(err)
	}
	return link
}
