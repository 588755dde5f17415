package backend

import (
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"

	"github.com/hashicorp/go-hclog"
)

// PprofAddrEnv, when set (for example to 127.0.0.1:0), makes Serve serve
// net/http/pprof on that address and turn on block and mutex profiling, for
// profiling the plugin under load. It is a debugging aid, off by default;
// `holdfast serve --pprof-addr` sets it for the plugin it starts. The
// address chosen is logged ("pprof serving", addr=HOST:PORT).
const PprofAddrEnv = "HOLDFAST_BACKEND_PPROF_ADDR"

// servePprof serves the profiles on addr in the background.
func servePprof(logger hclog.Logger, addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		logger.Warn("pprof: cannot listen", "addr", addr, "error", err)
		return
	}
	runtime.SetBlockProfileRate(int(10e3)) // one blocking event per 10µs blocked
	runtime.SetMutexProfileFraction(10)
	logger.Info("pprof serving", "addr", ln.Addr().String())
	go func() { _ = http.Serve(ln, pprofMux()) }()
}

// pprofMux serves net/http/pprof's handlers on their usual paths, on a mux
// of its own (not http.DefaultServeMux).
func pprofMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
