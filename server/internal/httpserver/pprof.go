package httpserver

import (
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
)

// StartPprof serves net/http/pprof on addr (its own listener, never the API
// port) and turns on block and mutex profiling. It is a debugging aid for
// profiling the server under load (`holdfast serve --pprof-addr`), off by
// default. It returns the address it listens on.
func StartPprof(addr string, log *slog.Logger) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	runtime.SetBlockProfileRate(int(10e3)) // one blocking event per 10µs blocked
	runtime.SetMutexProfileFraction(10)
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	go func() { _ = srv.Serve(ln) }()
	log.Info("pprof serving", "addr", ln.Addr().String())
	return ln.Addr(), nil
}
