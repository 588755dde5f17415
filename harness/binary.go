package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
)

// BinDirEnv names the environment variable holding the directory of prebuilt
// binaries (`make build` puts them in bin/). When it is unset, or a binary is
// missing there, Binary builds it with `go build`.
const BinDirEnv = "HOLDFAST_BIN_DIR"

// packages maps the binaries this repository builds to their main packages,
// relative to the repository root.
func packageOf(name string) (string, bool) {
	switch {
	case name == "holdfast":
		return "./server/cmd/holdfast", true
	case name == "holdfast-conformance":
		return "./conformance/cmd/holdfast-conformance", true
	case strings.HasPrefix(name, "holdfast-backend-"):
		b := strings.TrimPrefix(name, "holdfast-backend-")
		return "./plugins/" + b + "/cmd/" + name, true
	}
	return "", false
}

// RepoRoot is the root of the holdfast source tree this package was compiled
// from; Binary builds from there.
func RepoRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("harness: cannot locate the source tree")
	}
	// file is <root>/harness/binary.go
	root := filepath.Dir(filepath.Dir(file))
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		return "", fmt.Errorf("harness: source tree not found at %s: %w", root, err)
	}
	return root, nil
}

var (
	buildMu sync.Mutex
	built   = map[string]string{} // dir+name -> path
)

// Binary returns the path of the named holdfast executable ("holdfast",
// "holdfast-backend-memory", "holdfast-conformance", ...): the one in
// $HOLDFAST_BIN_DIR when it exists there, else one built with `go build` into
// buildDir (once per process and directory).
func Binary(ctx context.Context, buildDir, name string) (string, error) {
	if dir := os.Getenv(BinDirEnv); dir != "" {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	pkg, ok := packageOf(name)
	if !ok {
		return "", fmt.Errorf("harness: unknown binary %q", name)
	}
	return Build(ctx, buildDir, name, pkg)
}

// Build runs `go build -o buildDir/name pkg` from the repository root (pkg is
// relative to it, e.g. "./conformance/internal/brokenbackends/norelease"),
// once per process and output path.
func Build(ctx context.Context, buildDir, name, pkg string) (string, error) {
	out := filepath.Join(buildDir, name)
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[out]; ok {
		return p, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("harness: go build %s: %w\n%s", pkg, err, stderr.String())
	}
	built[out] = out
	return out, nil
}
