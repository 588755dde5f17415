package backend_test

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/proto/hlc"
)

const hlcPath = "github.com/holdfast/holdfast/proto/hlc"

// goList runs go list with format f on pkg and returns the words it prints.
func goList(t *testing.T, f string, args ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list", "-f", f}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", args, err, out)
	}
	return strings.Fields(string(out))
}

// The contract a plugin author imports depends on nothing heavier than
// proto/hlc: it imports only the standard library and proto/hlc, and adds no
// package of its own beyond what proto/hlc brings (no plugin transport, no
// gRPC, no logging library).
func TestImportsNothingHeavierThanHLC(t *testing.T) {
	for _, imp := range goList(t, `{{join .Imports " "}}`, ".") {
		if imp != hlcPath && strings.Contains(strings.Split(imp, "/")[0], ".") {
			t.Errorf("core/backend imports %s; it may import only the standard library and %s", imp, hlcPath)
		}
	}
	nonStd := `{{if not .Standard}}{{.ImportPath}}{{end}}`
	hlcDeps := goList(t, nonStd, "-deps", hlcPath)
	for _, dep := range goList(t, nonStd, "-deps", ".") {
		if dep != "github.com/holdfast/holdfast/core/backend" && !slices.Contains(hlcDeps, dep) {
			t.Errorf("core/backend depends on %s, which proto/hlc does not", dep)
		}
	}
}

func TestNextStamp(t *testing.T) {
	last := hlc.Timestamp{WallTime: 100, Logical: 3}
	if got := backend.NextStamp(last, hlc.Timestamp{WallTime: 50}); got != (hlc.Timestamp{WallTime: 100, Logical: 4}) {
		t.Errorf("a proposal behind the last stamp: %v, want the last stamp's successor", got)
	}
	if got := backend.NextStamp(last, hlc.Timestamp{WallTime: 200}); got != (hlc.Timestamp{WallTime: 200}) {
		t.Errorf("a proposal ahead of the last stamp: %v, want the proposal", got)
	}
	if got := backend.NextStamp(hlc.Timestamp{}, hlc.Timestamp{WallTime: 1}); got != (hlc.Timestamp{WallTime: 1}) {
		t.Errorf("a first stamp: %v, want the proposal", got)
	}
}

func TestCheckGrant(t *testing.T) {
	kinds := []backend.Kind{backend.KindSemaphore}
	ok := backend.AcquireRequest{Kind: backend.KindSemaphore, Limit: 3, Permits: 3}
	if err := ok.CheckGrant(kinds); err != nil {
		t.Fatalf("a good grant: %v", err)
	}
	for _, c := range []struct {
		edit  func(*backend.AcquireRequest)
		field string
	}{
		{func(r *backend.AcquireRequest) { r.Kind = backend.KindRWLock }, "kind"},
		{func(r *backend.AcquireRequest) { r.Kind = backend.KindMutex }, "kind"},
		{func(r *backend.AcquireRequest) { r.Limit = 0 }, "limit"},
		{func(r *backend.AcquireRequest) { r.Limit, r.Permits = backend.MaxLimit+1, 1 }, "limit"},
		{func(r *backend.AcquireRequest) { r.Permits = 0 }, "permits"},
		{func(r *backend.AcquireRequest) { r.Permits = 4 }, "permits"},
		{func(r *backend.AcquireRequest) { r.LockDelay = time.Second }, "lock_delay"},
	} {
		req := ok
		c.edit(&req)
		err := req.CheckGrant(kinds)
		if !errors.Is(err, backend.ErrInvalidArgument) || !strings.HasPrefix(strings.TrimPrefix(err.Error(), "invalid argument: "), c.field) {
			t.Errorf("%+v: %v, want ErrInvalidArgument naming %s", req, err, c.field)
		}
	}
}
