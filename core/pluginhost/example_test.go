package pluginhost_test

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/core/pluginhost"
)

// The holdfast server runs itself as the memory plugin, and follows the
// plugin's restarts.
func Example() {
	ctx := context.Background()
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	h, err := pluginhost.Start(ctx, pluginhost.Config{
		Path:   exe,
		Args:   []string{"backend", "memory"}, // runs backendserver.Serve(memory.Open)
		Name:   "memory",
		Logger: slog.Default(),
	})
	if err != nil {
		slog.Error("backend did not start", "error", err) // carries the plugin's own message
		os.Exit(1)
	}
	defer h.Close()

	go func() {
		for {
			changed := h.Changed()
			if h.Up() {
				info, _ := h.Info(ctx) // read again after each restart
				slog.Info("backend up", "name", info.Name, "restarts", h.Restarts())
			}
			select {
			case <-changed:
			case <-ctx.Done():
				return
			}
		}
	}()

	res, err := h.Acquire(ctx, backend.AcquireRequest{Key: "jobs/nightly", OwnerToken: "random-128-bit-token", TTL: 30 * time.Second})
	if err != nil {
		// errors.Is(err, backend.ErrUnavailable): the plugin is down or
		// restarting; errors.Is(err, backend.ErrInvalidArgument): bad input.
		return
	}
	_ = res.Record.FencingToken
}
