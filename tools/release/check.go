package main

import (
	"fmt"
	"maps"
	"slices"
)

// checkRelease lists everything that disagrees with the repository's
// VERSION: go.mod files (sibling requires, replace directives), go.work's
// replace lines, the version constants and the SDK manifests. An empty list means a tag of this tree
// at VERSION is a consistent release.
func checkRelease(r *repo) []error {
	var errs []error
	for _, m := range r.Modules {
		f, err := readModFile(r, m)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		// Modules outside go.work (bench, tools) are never released and are
		// built with GOWORK=off: their replace lines are how they see the
		// checkout. Their sibling versions still follow VERSION.
		errs = append(errs, siblingProblems(r, m, f, !m.InWorkspace)...)
	}
	errs = append(errs, workProblems(r)...)
	for _, c := range versionConsts {
		v, err := readConst(r.Root, c)
		if err != nil {
			errs = append(errs, err)
		} else if v != r.Version {
			errs = append(errs, fmt.Errorf("%s: %s = %q, VERSION is %q (run make set-version)", c.File, c.Name, v, r.Version))
		}
	}
	npm, err := npmVersions(r.Root)
	if err != nil {
		errs = append(errs, err)
	}
	for _, file := range slices.Sorted(maps.Keys(npm)) {
		if npm[file] != r.Version {
			errs = append(errs, fmt.Errorf("%s: version %q, VERSION is %q (run make set-version)", file, npm[file], r.Version))
		}
	}
	if v, err := pyVersion(r.Root); err != nil {
		errs = append(errs, err)
	} else if v != r.Version {
		errs = append(errs, fmt.Errorf("%s: version %q, VERSION is %q (run make set-version)", pyprojectToml, v, r.Version))
	}
	return errs
}
