package ui

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
)

func get(t *testing.T, h http.Handler, method, path string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec
}

func TestServesBundle(t *testing.T) {
	h := handler(fstest.MapFS{
		"index.html": {Data: []byte("<!doctype html><title>live</title>")},
		"app.js":     {Data: []byte("console.log(1)")},
		"app.css":    {Data: []byte("body{}")},
	})
	for _, tc := range []struct{ path, want, ctype string }{
		{"/ui/", "<title>live</title>", "text/html"},
		{"/ui/app.js", "console.log(1)", "text/javascript"},
		{"/ui/app.css", "body{}", "text/css"},
	} {
		rec := get(t, h, http.MethodGet, tc.path)
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s: status %d, want 200", tc.path, rec.Code)
		}
		if !strings.Contains(rec.Body.String(), tc.want) {
			t.Errorf("GET %s: body %q, want it to contain %q", tc.path, rec.Body, tc.want)
		}
		if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, tc.ctype) {
			t.Errorf("GET %s: Content-Type %q, want %s", tc.path, ct, tc.ctype)
		}
		if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "connect-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q lacks connect-src 'self'", tc.path, csp)
		}
		if cc := rec.Header().Get("Cache-Control"); cc != "no-cache" {
			t.Errorf("GET %s: Cache-Control %q, want no-cache", tc.path, cc)
		}
	}
	if rec := get(t, h, http.MethodGet, "/ui/missing.js"); rec.Code != http.StatusNotFound {
		t.Errorf("GET /ui/missing.js: status %d, want 404", rec.Code)
	}
	if rec := get(t, h, http.MethodPost, "/ui/"); rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /ui/: status %d, want 405", rec.Code)
	}
}

func TestNotBuilt(t *testing.T) {
	h := handler(fstest.MapFS{".gitkeep": {}})
	for _, path := range []string{"/ui/", "/ui/app.js"} {
		rec := get(t, h, http.MethodGet, path)
		if rec.Code != http.StatusServiceUnavailable {
			t.Errorf("GET %s: status %d, want 503", path, rec.Code)
		}
		if !strings.Contains(rec.Body.String(), "make web-build") {
			t.Errorf("GET %s: body %q does not say how to build the UI", path, rec.Body)
		}
	}
}

// The embedded directory is either the placeholder alone or a whole bundle.
func TestEmbedded(t *testing.T) {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Stat(sub, ".gitkeep"); err != nil {
		t.Fatalf("dist/.gitkeep is not embedded: %v", err)
	}
	_, err = fs.Stat(sub, "index.html")
	built := err == nil
	for _, name := range []string{"app.js", "app.css"} {
		if _, err := fs.Stat(sub, name); (err == nil) != built {
			t.Errorf("dist has index.html=%t but %s present=%t: a partial bundle", built, name, err == nil)
		}
	}
	rec := get(t, Handler(), http.MethodGet, "/ui/")
	if want := map[bool]int{true: http.StatusOK, false: http.StatusServiceUnavailable}[built]; rec.Code != want {
		t.Errorf("GET /ui/ from the embedded files: status %d, want %d", rec.Code, want)
	}
}
