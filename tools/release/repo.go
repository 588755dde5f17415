package main

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

// rootPath is the module path every holdfast module starts with.
const rootPath = "github.com/holdfast/holdfast"

// notShipped lists workspace modules that are part of the repository's own
// testing, not of a release. Every other module in go.work is shipped: a
// new module is released unless it is named here.
var notShipped = map[string]string{
	"chaos": "fault-injection runs of this repository's own backends",
	"abuse": "hostile-client tests of this repository's own server",
}

// skipDirs are never searched for modules: build outputs, package
// managers' trees, test fixtures.
var skipDirs = map[string]bool{
	".git": true, "node_modules": true, ".venv": true, "dist": true, "bin": true,
	"tmp": true, ".cache": true, "testdata": true,
}

// goModule is one Go module of the repository.
type goModule struct {
	Dir         string // slash-separated, relative to the repository root
	Path        string // module path
	InWorkspace bool   // listed in go.work
	Shipped     bool   // served by the release's module proxy
}

// repo is a holdfast checkout.
type repo struct {
	Root    string // absolute
	Version string // from VERSION, without the leading "v"
	Modules []goModule
}

// GoVersion is the release version as Go spells module versions.
func (r *repo) GoVersion() string { return "v" + r.Version }

// sibling reports whether path is one of this repository's modules.
func (r *repo) sibling(path string) bool {
	return slices.ContainsFunc(r.Modules, func(m goModule) bool { return m.Path == path })
}

func (r *repo) abs(dir string) string { return filepath.Join(r.Root, filepath.FromSlash(dir)) }

// openRepo finds the repository that holds dir (the nearest parent with a
// go.work and a VERSION) and reads its modules and version.
func openRepo(dir string) (*repo, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	root := abs
	for !isFile(filepath.Join(root, "go.work")) || !isFile(filepath.Join(root, "VERSION")) {
		parent := filepath.Dir(root)
		if parent == root {
			return nil, fmt.Errorf("no go.work and VERSION in %s or any parent: run inside the holdfast repository", abs)
		}
		root = parent
	}
	r := &repo{Root: root}
	raw, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		return nil, err
	}
	if r.Version, err = parseVersion(string(raw)); err != nil {
		return nil, fmt.Errorf("VERSION: %w", err)
	}
	if r.Modules, err = findModules(root); err != nil {
		return nil, err
	}
	return r, nil
}

// parseVersion checks a release version as written in VERSION: semantic
// versioning without the "v" (0.1.0, 1.2.0-rc.1), alone on its line.
func parseVersion(s string) (string, error) {
	v := strings.TrimSpace(s)
	if strings.HasPrefix(v, "v") {
		return "", fmt.Errorf("%q: write the version without the leading v (npm and PyPI spell it that way; Go modules get v%s)", v, strings.TrimPrefix(v, "v"))
	}
	if !semver.IsValid("v"+v) || semver.Canonical("v"+v) != "v"+v {
		return "", fmt.Errorf("%q is not a semantic version MAJOR.MINOR.PATCH[-PRERELEASE]", v)
	}
	return v, nil
}

// findModules lists every module of the repository: the go.work ones and
// any other go.mod under the root whose path is a holdfast one (bench,
// tools).
func findModules(root string) ([]goModule, error) {
	workData, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		return nil, err
	}
	work, err := modfile.ParseWork("go.work", workData, nil)
	if err != nil {
		return nil, err
	}
	inWork := map[string]bool{}
	for _, u := range work.Use {
		inWork[filepath.ToSlash(filepath.Clean(u.Path))] = true
	}
	var mods []goModule
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (skipDirs[d.Name()] || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if d.IsDir() || d.Name() != "go.mod" {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		path := modfile.ModulePath(data)
		if path != rootPath && !strings.HasPrefix(path, rootPath+"/") {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(rel)
		_, unshipped := notShipped[dir]
		mods = append(mods, goModule{Dir: dir, Path: path, InWorkspace: inWork[dir], Shipped: inWork[dir] && !unshipped})
		delete(inWork, dir)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(inWork) > 0 {
		return nil, fmt.Errorf("go.work uses %v, which hold no holdfast go.mod", slices.Sorted(maps.Keys(inWork)))
	}
	if len(mods) == 0 {
		return nil, errors.New("no holdfast modules found")
	}
	return mods, nil
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}
