// Package ui serves the live view: a small read-only page, built from web/
// by `make web-build` into dist/ and embedded into the holdfast binary.
//
// The page's static files are public; everything it shows comes from the
// API (List, Watch, GetServerInfo) and goes through the API's own auth, with
// the token the user enters in the page. A binary built before the web
// bundle serves a short page saying how to build it.
package ui

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

// Path is where the page is mounted.
const Path = "/ui/"

// dist holds the bundle (or only dist/.gitkeep before `make web-build`).
//
//go:embed all:dist
var dist embed.FS

// Handler serves the embedded page under Path.
func Handler() http.Handler {
	sub, err := fs.Sub(dist, "dist")
	if err != nil { // cannot happen: "dist" is a valid embedded directory
		panic(err)
	}
	return handler(sub)
}

// notBuilt is served when the binary was built without the bundle.
const notBuilt = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>holdfast · UI not built</title></head>
<body style="font-family: system-ui, sans-serif; max-width: 40em; margin: 4em auto; line-height: 1.5">
<h1>UI not built</h1>
<p>This holdfast binary was built without the live view.
Run <code>make web-build</code> (or <code>make build</code>, which includes it) and rebuild the server.</p>
</body></html>
`

func handler(fsys fs.FS) http.Handler {
	if _, err := fs.Stat(fsys, "index.html"); err != nil {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			secure(w.Header())
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.WriteHeader(http.StatusServiceUnavailable)
			if r.Method != http.MethodHead {
				_, _ = w.Write([]byte(notBuilt))
			}
		})
	}
	files := http.StripPrefix(strings.TrimSuffix(Path, "/"), http.FileServerFS(fsys))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		secure(w.Header())
		// Embedded files carry no modification time, so nothing validates
		// a cached copy: always revalidate, never serve a stale page after
		// an upgrade.
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}

// secure sets headers that keep the page to its own origin: scripts, styles
// and API calls from the server that served it, and no framing.
func secure(h http.Header) {
	h.Set("Content-Security-Policy",
		"default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
}
