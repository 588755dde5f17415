package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"golang.org/x/mod/module"
)

// setVersion makes the repository say version everywhere: VERSION, every
// go.mod's requires of a sibling (and, for workspace modules, no sibling
// replace), go.work's replace lines, the version constants and the SDK
// manifests. It is idempotent,
// and it is the one way these files change for a release: after a merge
// that touched go.mod files, running it again redoes the mechanical part.
func setVersion(r *repo, version string, stdout io.Writer) error {
	v, err := parseVersion(version)
	if err != nil {
		return err
	}
	r.Version = v
	changed := 0
	write := func(rel string, data []byte) error {
		p := filepath.Join(r.Root, filepath.FromSlash(rel))
		old, err := os.ReadFile(p)
		if err != nil && !os.IsNotExist(err) {
			return err
		}
		if bytes.Equal(old, data) {
			return nil
		}
		changed++
		fmt.Fprintf(stdout, "set-version: %s\n", rel)
		return os.WriteFile(p, data, 0o644)
	}
	if err := write("VERSION", []byte(v+"\n")); err != nil {
		return err
	}
	work, err := rewriteGoWork(r)
	if err != nil {
		return err
	}
	if err := write("go.work", work); err != nil {
		return err
	}
	for _, m := range r.Modules {
		data, err := rewriteGoMod(r, m)
		if err != nil {
			return err
		}
		if err := write(m.Dir+"/go.mod", data); err != nil {
			return err
		}
	}
	for _, c := range versionConsts {
		if err := rewriteFile(r, c.File, write, func(s string) (string, error) {
			if _, err := readConst(r.Root, c); err != nil {
				return "", err
			}
			return constPattern(c.Name).ReplaceAllString(s, `${1}"`+v+`"`), nil
		}); err != nil {
			return err
		}
	}
	if err := rewriteFile(r, npmManifest, write, func(s string) (string, error) {
		return replaceOnce(npmManifest, s, topLevelJSONVersion, v)
	}); err != nil {
		return err
	}
	if err := rewriteFile(r, npmLock, write, func(s string) (string, error) {
		s, err := replaceOnce(npmLock, s, topLevelJSONVersion, v)
		if err != nil {
			return "", err
		}
		return replaceOnce(npmLock+` packages[""]`, s, lockRootPackageVersion, v)
	}); err != nil {
		return err
	}
	if err := rewriteFile(r, pyprojectToml, write, func(s string) (string, error) {
		i, _, ok := findPyVersion(s)
		if !ok {
			return "", fmt.Errorf("%s: no static `version = \"…\"` in [project]", pyprojectToml)
		}
		lines := strings.Split(s, "\n")
		lines[i] = `version = "` + v + `"`
		return strings.Join(lines, "\n"), nil
	}); err != nil {
		return err
	}
	if errs := checkRelease(r); len(errs) > 0 {
		return fmt.Errorf("set-version %s left disagreements (a bug in set-version): %v", v, errs)
	}
	fmt.Fprintf(stdout, "set-version: %s everywhere (%d files changed)\n", v, changed)
	return nil
}

// rewriteGoMod answers m's go.mod with every sibling required at the
// release version and, for a workspace module, no sibling replace.
func rewriteGoMod(r *repo, m goModule) ([]byte, error) {
	f, err := readModFile(r, m)
	if err != nil {
		return nil, err
	}
	// Collect first: AddRequire and DropReplace edit the slices they are
	// found in.
	var requires []string
	for _, req := range f.Require {
		if r.sibling(req.Mod.Path) && req.Mod.Version != r.GoVersion() {
			requires = append(requires, req.Mod.Path)
		}
	}
	var replaces []module.Version
	for _, rep := range f.Replace {
		if m.InWorkspace && r.sibling(rep.Old.Path) {
			replaces = append(replaces, rep.Old)
		}
	}
	for _, path := range requires {
		if err := f.AddRequire(path, r.GoVersion()); err != nil {
			return nil, err
		}
	}
	for _, old := range replaces {
		if err := f.DropReplace(old.Path, old.Version); err != nil {
			return nil, err
		}
	}
	f.Cleanup()
	return f.Format()
}

// The root package's version in package.json and package-lock.json: npm
// writes both with two-space indentation, so the top-level key is the one
// indented by exactly two spaces, and the lock's packages[""] entry is the
// first "version" after `"": {`.
var (
	topLevelJSONVersion    = regexp.MustCompile(`(?m)^(  "version": )"[^"]*"`)
	lockRootPackageVersion = regexp.MustCompile(`(?s)("packages": \{\s*"": \{[^{}]*?"version": )"[^"]*"`)
)

func replaceOnce(what, s string, re *regexp.Regexp, v string) (string, error) {
	loc := re.FindStringSubmatchIndex(s)
	if loc == nil {
		return "", fmt.Errorf("%s: no version field where npm writes it", what)
	}
	return s[:loc[0]] + s[loc[2]:loc[3]] + `"` + v + `"` + s[loc[1]:], nil
}

func rewriteFile(r *repo, rel string, write func(string, []byte) error, edit func(string) (string, error)) error {
	data, err := os.ReadFile(filepath.Join(r.Root, filepath.FromSlash(rel)))
	if err != nil {
		return err
	}
	s, err := edit(string(data))
	if err != nil {
		return err
	}
	return write(rel, []byte(s))
}
