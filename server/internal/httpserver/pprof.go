package httpserver

import (
	"log/slog"
	"net"

	"github.com/holdfast/holdfast/core/pprofhttp"
)

// StartPprof serves the runtime's profiles (package pprofhttp: its own
// listener and handler, never the API port nor http.DefaultServeMux) on addr
// and turns on block and mutex profiling. It is a debugging aid for
// profiling the server under load (`holdfast serve --pprof-addr`), off by
// default. It returns the address it listens on; the profiles are served
// until the process exits.
func StartPprof(addr string, log *slog.Logger) (net.Addr, error) {
	s, err := pprofhttp.Start(addr)
	if err != nil {
		return nil, err
	}
	log.Info("pprof serving", "addr", s.Addr().String())
	return s.Addr(), nil
}
