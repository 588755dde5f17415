// Package version answers the holdfast release this binary is: what
// `holdfast version`, GetServerInfo.version, the holdfast_info metric and the
// logs report.
//
// A binary installed with `go install …/server/cmd/holdfast@v0.1.0` knows its
// module version from its build info; no -ldflags are needed. A build from a
// checkout (make build, go build in go.work) has no module version, and
// reports Release, the repository's VERSION, which `make set-version` writes
// here and a test keeps in step.
package version

import "runtime/debug"

// Release is the repository's VERSION.
const Release = "0.1.0"

// String is this binary's release version, without the leading "v" (the
// way VERSION, npm and PyPI spell it): the main module's version from the
// build info when it has one, Release otherwise.
func String() string {
	bi, _ := debug.ReadBuildInfo()
	return fromBuildInfo(bi)
}

func fromBuildInfo(bi *debug.BuildInfo) string {
	// "(devel)" is a build of the main module from its own directory; ""
	// a binary built without module support (or info stripped).
	if bi == nil || bi.Main.Version == "" || bi.Main.Version == "(devel)" {
		return Release
	}
	v := bi.Main.Version
	if v[0] == 'v' {
		v = v[1:]
	}
	return v
}
