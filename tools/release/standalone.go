package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/mod/modfile"
)

// A committed go.work hides a go.mod that misses a requirement, so each
// module is also built and vetted with GOWORK=off, seeing its own go.mod and
// go.sum only. Its siblings are required at the release version, which is
// not published until the release is: the check takes them from the
// checkout through a temporary copy of go.mod with one replace line per
// sibling (go's -modfile flag), the lines etcd commits and we do not. The
// committed go.mod and go.sum are never touched.

// standalone runs argv in module dir with GOWORK=off and the siblings
// replaced by their checkout directories.
func standalone(r *repo, dir string, argv []string, stdout, stderr io.Writer) error {
	m, modFile, cleanup, err := standaloneModFile(r, dir)
	if err != nil {
		return err
	}
	defer cleanup()
	return runIn(r.abs(m.Dir), modFile, argv, stdout, stderr)
}

// tidy runs `go mod tidy` on module dir as standalone does and writes the
// result back without the temporary replace lines.
func tidy(r *repo, dir string, stdout, stderr io.Writer) error {
	m, modFile, cleanup, err := standaloneModFile(r, dir)
	if err != nil {
		return err
	}
	defer cleanup()
	if err := runIn(r.abs(m.Dir), modFile, []string{"go", "mod", "tidy"}, stdout, stderr); err != nil {
		return err
	}
	data, err := os.ReadFile(modFile)
	if err != nil {
		return err
	}
	f, err := modfile.Parse(modFile, data, nil)
	if err != nil {
		return err
	}
	var added []string
	for _, rep := range f.Replace {
		if filepath.IsAbs(rep.New.Path) && r.sibling(rep.Old.Path) {
			added = append(added, rep.Old.Path)
		}
	}
	for _, path := range added {
		if err := f.DropReplace(path, ""); err != nil {
			return err
		}
	}
	// A requirement tidy added for a sibling points at the directory's
	// zero pseudo-version: it is the release version.
	var pseudo []string
	for _, req := range f.Require {
		if r.sibling(req.Mod.Path) && req.Mod.Version != r.GoVersion() {
			pseudo = append(pseudo, req.Mod.Path)
		}
	}
	for _, path := range pseudo {
		if err := f.AddRequire(path, r.GoVersion()); err != nil {
			return err
		}
	}
	f.Cleanup()
	out, err := f.Format()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(r.abs(m.Dir), "go.mod"), out, 0o644); err != nil {
		return err
	}
	sum, err := os.ReadFile(strings.TrimSuffix(modFile, ".mod") + ".sum")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return os.WriteFile(filepath.Join(r.abs(m.Dir), "go.sum"), sum, 0o644)
}

// standaloneModFile writes the temporary go.mod (and go.sum) for module dir.
func standaloneModFile(r *repo, dir string) (goModule, string, func(), error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return goModule{}, "", nil, err
	}
	var m goModule
	found := false
	for _, mod := range r.Modules {
		if r.abs(mod.Dir) == abs {
			m, found = mod, true
		}
	}
	if !found {
		return goModule{}, "", nil, fmt.Errorf("%s is not a holdfast module directory", dir)
	}
	tmp, err := os.MkdirTemp("", "holdfast-standalone-")
	if err != nil {
		return goModule{}, "", nil, err
	}
	cleanup := func() { os.RemoveAll(tmp) }
	fail := func(err error) (goModule, string, func(), error) {
		cleanup()
		return goModule{}, "", nil, err
	}
	f, err := readModFile(r, m)
	if err != nil {
		return fail(err)
	}
	replaced := map[string]bool{}
	for _, rep := range f.Replace {
		replaced[rep.Old.Path] = true
	}
	for _, sib := range r.Modules {
		if sib.Path != m.Path && !replaced[sib.Path] {
			if err := f.AddReplace(sib.Path, "", r.abs(sib.Dir), ""); err != nil {
				return fail(err)
			}
		}
	}
	data, err := f.Format()
	if err != nil {
		return fail(err)
	}
	modFile := filepath.Join(tmp, "go.mod")
	if err := os.WriteFile(modFile, data, 0o644); err != nil {
		return fail(err)
	}
	sum, err := os.ReadFile(filepath.Join(abs, "go.sum"))
	if err == nil {
		err = os.WriteFile(filepath.Join(tmp, "go.sum"), sum, 0o644)
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fail(err)
	}
	return m, modFile, cleanup, nil
}

func runIn(dir, modFile string, argv []string, stdout, stderr io.Writer) error {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Env = append(os.Environ(), "GOWORK=off",
		"GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -modfile="+modFile))
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return &exitError{code: exit.ExitCode()}
	}
	return err
}
