package main

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
)

// In workspace mode the go command still reads the go.mod of every version
// the modules require, siblings included: a go.work that only uses the
// modules fails with "reading …/core/@v/v0.1.0.mod: 403" until that version
// is published. So go.work also replaces each workspace module's release
// version with its directory. These lines live in go.work, which no module
// zip holds, instead of in the go.mod files (where etcd and x/tools' gopls
// keep theirs, and which `go install pkg@version` then refuses).

// workReplacement is the replace line go.work needs for m.
func workReplacement(r *repo, m goModule) (old module.Version, dir string) {
	return module.Version{Path: m.Path, Version: r.GoVersion()}, "./" + m.Dir
}

func readWorkFile(r *repo) (*modfile.WorkFile, error) {
	p := filepath.Join(r.Root, "go.work")
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	return modfile.ParseWork(p, data, nil)
}

// rewriteGoWork answers go.work with one replace per workspace module at the
// release version and no other replace of a holdfast module.
func rewriteGoWork(r *repo) ([]byte, error) {
	wf, err := readWorkFile(r)
	if err != nil {
		return nil, err
	}
	// Add before dropping, so that new lines join an existing replace block.
	want := map[module.Version]bool{}
	for _, m := range r.Modules {
		if m.InWorkspace {
			old, dir := workReplacement(r, m)
			want[old] = true
			if err := wf.AddReplace(old.Path, old.Version, dir, ""); err != nil {
				return nil, err
			}
		}
	}
	var drop []module.Version
	for _, rep := range wf.Replace {
		if r.sibling(rep.Old.Path) && !want[rep.Old] {
			drop = append(drop, rep.Old)
		}
	}
	for _, old := range drop {
		if err := wf.DropReplace(old.Path, old.Version); err != nil {
			return nil, err
		}
	}
	wf.SortBlocks()
	wf.Cleanup()
	return modfile.Format(wf.Syntax), nil
}

// workProblems lists what go.work lacks, or has too much of, for the
// release version.
func workProblems(r *repo) []error {
	wf, err := readWorkFile(r)
	if err != nil {
		return []error{err}
	}
	want := map[module.Version]string{}
	for _, m := range r.Modules {
		if m.InWorkspace {
			old, dir := workReplacement(r, m)
			want[old] = dir
		}
	}
	var errs []error
	for _, rep := range wf.Replace {
		if !r.sibling(rep.Old.Path) {
			continue
		}
		dir, ok := want[rep.Old]
		if !ok || filepath.Clean(rep.New.Path) != filepath.Clean(dir) || rep.New.Version != "" {
			errs = append(errs, fmt.Errorf("go.work replaces %s %s => %s %s; want only %s %s => ./DIR for each workspace module (run make set-version)",
				rep.Old.Path, rep.Old.Version, rep.New.Path, rep.New.Version, rep.Old.Path, r.GoVersion()))
		}
		delete(want, rep.Old)
	}
	for old, dir := range want {
		errs = append(errs, fmt.Errorf("go.work lacks `replace %s %s => %s` (run make set-version)", old.Path, old.Version, dir))
	}
	return errs
}
