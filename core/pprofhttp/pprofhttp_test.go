package pprofhttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
	"go.uber.org/goleak"

	"github.com/holdfast/holdfast/core/pprofhttp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func get(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func TestServesProfiles(t *testing.T) {
	s, err := pprofhttp.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	base := "http://" + s.Addr().String() + "/debug/pprof/"
	defer http.DefaultClient.CloseIdleConnections()

	if code, b := get(t, base); code != http.StatusOK || !strings.Contains(string(b), "heap") || !strings.Contains(string(b), "goroutine") {
		t.Fatalf("index: %d %s", code, b)
	}
	for _, path := range []string{"heap", "allocs?gc=1", "goroutine", "profile?seconds=0.1", "block?seconds=0.1", "mutex?seconds=0.1"} {
		code, b := get(t, base+path)
		if code != http.StatusOK {
			t.Fatalf("%s: %d %s", path, code, b)
		}
		if _, err := profile.ParseData(b); err != nil {
			t.Fatalf("%s: not a profile: %v", path, err)
		}
	}
	if code, b := get(t, base+"trace?seconds=0.1"); code != http.StatusOK || len(b) == 0 {
		t.Fatalf("trace: %d, %d bytes", code, len(b))
	}
	if code, b := get(t, base+"goroutine?debug=1"); code != http.StatusOK || !strings.Contains(string(b), "goroutine profile:") {
		t.Fatalf("goroutine?debug=1: %d %s", code, b)
	}
	if code, _ := get(t, base+"nosuch"); code != http.StatusNotFound {
		t.Fatalf("unknown profile: %d, want 404", code)
	}
	if code, b := get(t, base+"heap?seconds=-1"); code != http.StatusBadRequest || !strings.Contains(string(b), "seconds") {
		t.Fatalf("bad seconds: %d %s", code, b)
	}
}

// Importing the package (and serving it) puts nothing on
// http.DefaultServeMux, which net/http/pprof would have filled.
func TestNothingOnDefaultServeMux(t *testing.T) {
	_ = pprofhttp.Handler()
	req := httptest.NewRequest(http.MethodGet, "/debug/pprof/", nil)
	if _, pattern := http.DefaultServeMux.Handler(req); pattern != "" {
		t.Fatalf("http.DefaultServeMux serves /debug/pprof/ (pattern %q)", pattern)
	}
}
