package backendserver

import (
	"github.com/hashicorp/go-hclog"

	"github.com/holdfast/holdfast/core/pprofhttp"
)

// startPprof serves the plugin's profiles on addr when the host asks for
// them (`holdfast serve --pprof-addr`), on a listener of their own, never on
// http.DefaultServeMux. It is a debugging aid, off by default. They are
// served until the process exits.
func startPprof(logger hclog.Logger, addr string) {
	s, err := pprofhttp.Start(addr)
	if err != nil {
		logger.Warn("pprof: cannot listen", "addr", addr, "error", err)
		return
	}
	logger.Info("pprof serving", "addr", s.Addr().String())
}
