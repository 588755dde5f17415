package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"golang.org/x/mod/modfile"
)

// The places outside go.mod files that spell the release version. Each is
// written by set-version and read by check, so both agree on where to look.

// versionConst is a Go string constant that holds the release version.
type versionConst struct {
	File string // slash-separated, relative to the repository root
	Name string
}

// versionConsts: the server's fallback for checkout builds (a binary built
// by `go install …@vX.Y.Z` reads its version from its build info instead)
// and the in-tree backends' BackendInfo.version, which ship in the same
// release. plugins/example is left out on purpose: it stands for a third
// party's backend, whose version is its author's.
var versionConsts = []versionConst{
	{"server/internal/version/version.go", "Release"},
	{"plugins/memory/memory.go", "Version"},
	{"plugins/etcd/etcd.go", "Version"},
	{"plugins/redis/redis.go", "Version"},
	{"plugins/postgres/postgres.go", "Version"},
}

// The SDK packages' manifests.
const (
	npmManifest   = "sdk-ts/package.json"
	npmLock       = "sdk-ts/package-lock.json"
	pyprojectToml = "sdk-python/pyproject.toml"
)

func constPattern(name string) *regexp.Regexp {
	// gofmt'd code: `const Name = "…"` alone, or `Name = "…"` in a const block.
	return regexp.MustCompile(`(?m)^(\t*(?:const )?` + regexp.QuoteMeta(name) + ` = )"([^"]*)"`)
}

// readConst answers the value of c, or an error saying it is not there.
func readConst(root string, c versionConst) (string, error) {
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(c.File)))
	if err != nil {
		return "", err
	}
	m := constPattern(c.Name).FindAllSubmatch(data, -1)
	if len(m) != 1 {
		return "", fmt.Errorf("%s: want exactly one `%s = \"…\"` string constant, found %d", c.File, c.Name, len(m))
	}
	return string(m[0][2]), nil
}

// npmVersions reads the version of package.json and of the root package in
// package-lock.json (both its top-level field and packages[""]).
func npmVersions(root string) (map[string]string, error) {
	out := map[string]string{}
	var manifest struct {
		Version string `json:"version"`
	}
	if err := readJSON(filepath.Join(root, npmManifest), &manifest); err != nil {
		return nil, err
	}
	out[npmManifest] = manifest.Version
	var lock struct {
		Version  string `json:"version"`
		Packages map[string]struct {
			Version string `json:"version"`
		} `json:"packages"`
	}
	if err := readJSON(filepath.Join(root, npmLock), &lock); err != nil {
		return nil, err
	}
	out[npmLock] = lock.Version
	out[npmLock+` packages[""]`] = lock.Packages[""].Version
	return out, nil
}

func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// pyprojectVersion is the line `version = "…"` of the [project] table.
var pyprojectVersion = regexp.MustCompile(`^version\s*=\s*"([^"]*)"\s*$`)

// pyVersion reads [project].version from pyproject.toml. It reads the table
// line by line rather than with a TOML library: the file is ours, and a
// static version line is what PyPI's tools need too.
func pyVersion(root string) (string, error) {
	data, err := os.ReadFile(filepath.Join(root, pyprojectToml))
	if err != nil {
		return "", err
	}
	_, v, ok := findPyVersion(string(data))
	if !ok {
		return "", fmt.Errorf("%s: no static `version = \"…\"` in [project]", pyprojectToml)
	}
	return v, nil
}

// findPyVersion answers the line index and value of [project].version.
func findPyVersion(text string) (line int, value string, ok bool) {
	inProject := false
	for i, l := range strings.Split(text, "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "[") {
			inProject = t == "[project]"
			continue
		}
		if m := pyprojectVersion.FindStringSubmatch(t); inProject && m != nil {
			return i, m[1], true
		}
	}
	return 0, "", false
}

// siblingProblems lists what keeps one go.mod from being released at the
// release version: a holdfast sibling required at another version, or
// (unless allowReplace) a replace directive, which `go install pkg@version`
// refuses and which would not apply to the module's users anyway.
func siblingProblems(r *repo, m goModule, f *modfile.File, allowReplace bool) []error {
	var errs []error
	for _, req := range f.Require {
		if r.sibling(req.Mod.Path) && req.Mod.Version != r.GoVersion() {
			errs = append(errs, fmt.Errorf("%s/go.mod requires %s %s, not the release %s (run make set-version)", m.Dir, req.Mod.Path, req.Mod.Version, r.GoVersion()))
		}
	}
	for _, rep := range f.Replace {
		if allowReplace {
			break
		}
		errs = append(errs, fmt.Errorf("%s/go.mod replaces %s: a released module carries no replace directives (go.work is how the checkout's siblings are used)", m.Dir, rep.Old.Path))
	}
	return errs
}

func readModFile(r *repo, m goModule) (*modfile.File, error) {
	p := filepath.Join(r.abs(m.Dir), "go.mod")
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	return modfile.Parse(p, data, nil)
}
