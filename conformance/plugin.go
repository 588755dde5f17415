package conformance

import (
	"context"
	"log/slog"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/core/pluginhost"
	"github.com/onsi/ginkgo/v2"
)

// PluginProcess is a backend plugin running under the plugin host, as
// BackendContext.StartPlugin returns it.
type PluginProcess interface {
	backend.Backend
	// PID is the plugin process's id, 0 while it is down (specs kill it).
	PID() int
	Close() error
}

var _ PluginProcess = (*pluginhost.Host)(nil)

// startPlugin launches the plugin executable at path through the same plugin
// host the server uses, so the suite exercises the real wire and the real
// supervision. The host's and plugin's logs go to the spec output.
func startPlugin(ctx context.Context, path string, args []string, opts map[string]string) (PluginProcess, error) {
	log := slog.New(slog.NewTextHandler(ginkgo.GinkgoWriter, &slog.HandlerOptions{Level: slog.LevelInfo}))
	return pluginhost.Start(ctx, pluginhost.Config{Path: path, Args: args, Options: opts, Logger: log})
}
