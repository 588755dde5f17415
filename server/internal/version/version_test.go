package version

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"go install @v0.3.1", &debug.BuildInfo{Main: debug.Module{Path: "github.com/holdfast/holdfast/server", Version: "v0.3.1"}}, "0.3.1"},
		{"go install @commit (pseudo-version)", &debug.BuildInfo{Main: debug.Module{Version: "v0.3.2-0.20261130112233-0123456789ab"}}, "0.3.2-0.20261130112233-0123456789ab"},
		{"module-mode build of a dirty checkout", &debug.BuildInfo{Main: debug.Module{Version: "v0.3.1+dirty"}}, "0.3.1+dirty"},
		{"checkout build (go.work)", &debug.BuildInfo{Main: debug.Module{Path: "github.com/holdfast/holdfast/server", Version: "(devel)"}}, Release},
		{"no module version", &debug.BuildInfo{}, Release},
		{"no build info", nil, Release},
	} {
		if got := fromBuildInfo(tc.bi); got != tc.want {
			t.Errorf("%s: fromBuildInfo = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// A test binary is built from the checkout: it has no module version, so it
// reports the repository's.
func TestStringInACheckoutBuild(t *testing.T) {
	if got := String(); got != Release {
		t.Fatalf("String() = %q in a test binary, want Release %q", got, Release)
	}
}
