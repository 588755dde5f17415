// Package pprofhttp serves the Go runtime's profiles over HTTP, for
// profiling a holdfast server or backend plugin under load (`holdfast serve
// --pprof-addr`). It is off unless asked for, and it serves on a listener
// and a handler of its own: unlike net/http/pprof, importing it registers
// nothing on http.DefaultServeMux, so no process of holdfast's exposes
// profiles on a mux that something else might serve.
//
// The paths are net/http/pprof's, so `go tool pprof` and `curl` work as
// usual:
//
//	/debug/pprof/                 the index: one line per profile
//	/debug/pprof/profile          CPU profile (?seconds=N, default 30)
//	/debug/pprof/trace            execution trace (?seconds=N, default 1)
//	/debug/pprof/cmdline          the command line, NUL-separated
//	/debug/pprof/NAME             a runtime/pprof profile (heap, allocs,
//	                              goroutine, block, mutex, threadcreate):
//	                              ?debug=N for text, ?gc=1 (heap) to collect
//	                              garbage first, ?seconds=N for the change
//	                              over the next N seconds
package pprofhttp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

// Handler serves the profiles on their usual paths under /debug/pprof/.
func Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/pprof/{$}", index)
	mux.HandleFunc("GET /debug/pprof/cmdline", cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", cpuProfile)
	mux.HandleFunc("GET /debug/pprof/trace", executionTrace)
	mux.HandleFunc("GET /debug/pprof/{name}", named)
	return mux
}

// Server is profiles being served on a listener of their own.
type Server struct {
	ln   net.Listener
	srv  *http.Server
	done chan struct{}
}

// Start listens on addr (host:port; port 0 picks a free one), turns on
// block and mutex profiling, and serves Handler there until Close.
func Start(addr string) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	// Block and mutex profiles are empty unless sampled: one blocking event
	// per 10µs blocked, one contended mutex in 10.
	runtime.SetBlockProfileRate(int(10 * time.Microsecond))
	runtime.SetMutexProfileFraction(10)
	s := &Server{ln: ln, srv: &http.Server{Handler: Handler(), ReadHeaderTimeout: 10 * time.Second}, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

// Addr is the address the profiles are served on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops serving at once (a profile being taken is cut short) and
// waits for the serving goroutine.
func (s *Server) Close() error {
	err := s.srv.Close()
	<-s.done
	return err
}

func index(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "profiles (GET /debug/pprof/NAME; ?debug=1 for text, ?seconds=N for the change over N seconds):")
	for _, p := range pprof.Profiles() {
		fmt.Fprintf(w, "%6d %s\n", p.Count(), p.Name())
	}
	fmt.Fprintln(w, "       profile (CPU, ?seconds=N)")
	fmt.Fprintln(w, "       trace (execution trace, ?seconds=N)")
	fmt.Fprintln(w, "       cmdline")
}

func cmdline(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprint(w, strings.Join(os.Args, "\x00"))
}

// seconds reads ?seconds= as a positive duration, def when absent.
func seconds(r *http.Request, def time.Duration) (time.Duration, error) {
	v := r.FormValue("seconds")
	if v == "" {
		return def, nil
	}
	s, err := strconv.ParseFloat(v, 64)
	if err != nil || s <= 0 || s > 24*3600 {
		return 0, fmt.Errorf("seconds: %q is not a positive number of seconds up to a day", v)
	}
	return time.Duration(s * float64(time.Second)), nil
}

// extendWriteDeadline lets the answer take d longer than the server's
// WriteTimeout would allow.
func extendWriteDeadline(w http.ResponseWriter, r *http.Request, d time.Duration) {
	srv, ok := r.Context().Value(http.ServerContextKey).(*http.Server)
	if ok && srv.WriteTimeout > 0 {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(srv.WriteTimeout + d))
	}
}

// pause waits d, or less when the client goes away; it reports whether d
// passed.
func pause(r *http.Request, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

func attachment(w http.ResponseWriter, name string) {
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name))
}

func cpuProfile(w http.ResponseWriter, r *http.Request) {
	record(w, r, "profile", 30*time.Second, pprof.StartCPUProfile, pprof.StopCPUProfile)
}

func executionTrace(w http.ResponseWriter, r *http.Request) {
	record(w, r, "trace", time.Second, trace.Start, trace.Stop)
}

// record runs a recording (the CPU profile, the execution trace) for
// ?seconds (def when absent) and serves it as name.
func record(w http.ResponseWriter, r *http.Request, name string, def time.Duration, start func(io.Writer) error, stop func()) {
	d, err := seconds(r, def)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	extendWriteDeadline(w, r, d)
	var buf bytes.Buffer
	if err := start(&buf); err != nil {
		// One at a time: another request is recording.
		http.Error(w, "cannot start the "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	pause(r, d)
	stop()
	attachment(w, name)
	_, _ = w.Write(buf.Bytes())
}

func named(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	p := pprof.Lookup(name)
	if p == nil {
		http.Error(w, fmt.Sprintf("no profile %q (see /debug/pprof/)", name), http.StatusNotFound)
		return
	}
	debug, _ := strconv.Atoi(r.FormValue("debug"))
	if r.FormValue("seconds") != "" {
		if debug != 0 {
			http.Error(w, "seconds and debug cannot be combined", http.StatusBadRequest)
			return
		}
		delta(w, r, p)
		return
	}
	if gc, _ := strconv.Atoi(r.FormValue("gc")); gc > 0 && name == "heap" {
		runtime.GC()
	}
	if debug != 0 {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	} else {
		attachment(w, name)
	}
	_ = p.WriteTo(w, debug)
}

// delta serves how profile p changed over ?seconds: a snapshot now is
// subtracted from one taken at the end.
func delta(w http.ResponseWriter, r *http.Request, p *pprof.Profile) {
	d, err := seconds(r, 0)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	extendWriteDeadline(w, r, d)
	before, err := snapshot(p)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if !pause(r, d) {
		http.Error(w, "the request ended before the profile", http.StatusRequestTimeout)
		return
	}
	after, err := snapshot(p)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	before.Scale(-1)
	diff, err := profile.Merge([]*profile.Profile{before, after})
	if err != nil {
		http.Error(w, "cannot subtract the profiles: "+err.Error(), http.StatusInternalServerError)
		return
	}
	diff.TimeNanos = after.TimeNanos
	diff.DurationNanos = after.TimeNanos - before.TimeNanos
	attachment(w, p.Name()+"-delta")
	_ = diff.Write(w)
}

func snapshot(p *pprof.Profile) (*profile.Profile, error) {
	var buf bytes.Buffer
	if err := p.WriteTo(&buf, 0); err != nil {
		return nil, fmt.Errorf("write profile %s: %w", p.Name(), err)
	}
	at := time.Now().UnixNano()
	out, err := profile.Parse(&buf)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("parse profile %s", p.Name()), err)
	}
	out.TimeNanos = at
	return out, nil
}
