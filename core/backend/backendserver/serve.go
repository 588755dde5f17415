// Package backendserver runs a holdfast backend as a plugin process. A
// backend's main is one call:
//
//	func main() {
//		backendserver.Serve(mystore.Open) // func(ctx, opts map[string]string) (backend.Backend, error)
//	}
//
// Serve checks that a holdfast host started the process, reads the
// backend's options (`holdfast serve --backend-opt key=value`), calls the
// open function (an error there is logged and ends the process with status
// 1; the host shows the message), and serves the backend until the host
// shuts the plugin down.
//
// The host launches the executable through hashicorp/go-plugin (gRPC,
// magic-cookie handshake, AutoMTLS); the handshake, the protocol messages and
// the environment the host passes are internal to holdfast, so a plugin
// depends on none of them. Nothing may be written to stdout before Serve:
// stdout carries the handshake. Log to stderr (slog's default logger, which
// Serve sets up).
//
// The contract a backend implements (the interface, its types, the sentinel
// errors) is package core/backend, which imports nothing heavier than the
// standard library and proto/hlc.
package backendserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/core/internal/handshake"
	backendv1 "github.com/holdfast/holdfast/proto/holdfast/backend/v1"
)

// OpenFunc opens a backend from its options (the --backend-opt key=value
// pairs of `holdfast serve`). It should refuse options it does not know,
// with an error naming them, and wrap backend.ErrInvalidArgument for bad
// values. ctx is cancelled when Serve gives up waiting for the backend to
// open.
type OpenFunc func(ctx context.Context, opts map[string]string) (backend.Backend, error)

// openTimeout bounds how long Serve waits for OpenFunc.
const openTimeout = time.Minute

// orphanCheckInterval is how often a plugin checks that its parent is alive.
// The host also asks the kernel (Pdeathsig) to kill the plugin when it dies;
// this check covers hosts that do not.
const orphanCheckInterval = 500 * time.Millisecond

// Serve runs a backend as a holdfast plugin process and does not return:
// the process exits when the host shuts the plugin down (after closing the
// backend if it implements io.Closer), when the host process dies, or with
// status 1 when open fails.
//
// Logs go to stderr as JSON lines (hclog's format: @level, @message,
// @timestamp), which the host re-levels into its own log; Serve points
// slog's default logger there, so a backend can simply use slog.
//
// When open fails, Serve logs one line at error level whose message is
// "open backend: " followed by the error, and exits with status 1; the host
// reports that message as the reason the plugin did not start.
//
// Options are for plugins that opt in to more: WithGRPCServerOptions (for
// example a stats handler that continues the host's trace, whose context
// arrives as W3C traceparent gRPC metadata when the host traces) and
// WithOnExit (for example to flush spans).
func Serve(open OpenFunc, opts ...Option) {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	// The host's pid, read now: read in exitWithParent's goroutine, which
	// may first run after the handshake line has gone out, it could already
	// be the pid of whoever adopted us once the host died, and the plugin
	// would never exit (seen on a loaded machine in pluginhost's
	// TestPluginExitsWhenHostDies/spawn).
	parent := os.Getppid()
	// Keep the real stderr: once serving, go-plugin redirects os.Stderr into
	// its gRPC stdio stream, which the host does not re-level.
	stderr := os.Stderr
	logger := newPluginLogger(stderr)
	slog.SetDefault(slog.New(newHCLogHandler(stderr, handshake.SlogLevel(logger.GetLevel()))))

	hs := handshake.Config()
	if os.Getenv(hs.MagicCookieKey) != hs.MagicCookieValue {
		fmt.Fprintln(stderr, "This is a holdfast backend plugin: `holdfast serve --backend PATH` runs it; it is not meant to be run by hand.")
		os.Exit(1)
	}

	backendOpts, err := parseOptions(os.Getenv(handshake.OptionsEnv))
	if err != nil {
		logger.Error("open backend: " + err.Error())
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	b, err := open(ctx, backendOpts)
	if err == nil && b == nil {
		err = errors.New("open returned no backend and no error")
	}
	if err == nil {
		err = checkKinds(ctx, b)
	}
	cancel()
	if err != nil {
		logger.Error("open backend: " + oneLine(err.Error()))
		os.Exit(1)
	}

	go exitWithParent(logger, parent, b, cfg.exit)
	if addr := os.Getenv(handshake.PprofAddrEnv); addr != "" {
		startPprof(logger, addr)
	}

	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: hs,
		Plugins:         plugin.PluginSet{handshake.PluginName: &grpcPlugin{backend: b}},
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			opts = append(opts, grpc.NumStreamWorkers(streamWorkers))
			opts = append(opts, handshake.ServerOptions()...) // fixed windows: no PING per call
			return plugin.DefaultGRPCServer(append(opts, cfg.grpc...))
		},
		Logger: logger,
	})
	// The host asked us to shut down (or serving failed, which is logged).
	closeBackend(logger, b)
	cfg.exit()
	os.Exit(0)
}

// checkKinds refuses a backend whose Info lists a kind it cannot serve:
// KindElection without ElectionBackend's Proclaim. A broken promise found at
// start-up, in the plugin's log, is better than a first Proclaim answered
// unimplemented in production. An Info that fails now is not refused here:
// the host asks again and reports it.
func checkKinds(ctx context.Context, b backend.Backend) error {
	info, err := b.Info(ctx)
	if err != nil {
		return nil //nolint:nilerr // an Info failing now is the host's to report (see above), not a broken promise
	}
	if _, ok := b.(backend.ElectionBackend); info.Keeps(backend.KindElection) && !ok {
		return fmt.Errorf("its Info.Kinds lists %s but %T does not implement backend.ElectionBackend (Proclaim)", backend.KindElection, b)
	}
	return nil
}

// streamWorkers is how many goroutines the plugin's gRPC server keeps to
// run calls. A call on a kept worker reuses its grown stack instead of
// starting a goroutine whose stack grows again on every call (12% of the
// memory plugin's CPU under load, in the bench profile); calls beyond the
// workers still get goroutines of their own.
const streamWorkers = 64

// Option adds to what Serve does; plain plugins need none.
type Option func(*config)

type config struct {
	grpc   []grpc.ServerOption
	onExit []func()
}

func (c *config) exit() {
	for _, f := range c.onExit {
		f()
	}
}

// WithGRPCServerOptions adds options to the plugin's gRPC server, such as
// grpc.StatsHandler with a tracing handler: the host sends its trace
// context as W3C traceparent metadata on every call when it traces.
func WithGRPCServerOptions(opts ...grpc.ServerOption) Option {
	return func(c *config) { c.grpc = append(c.grpc, opts...) }
}

// WithOnExit runs f after the backend is closed, before the plugin process
// exits (when the host stops it or dies), for example to flush spans.
func WithOnExit(f func()) Option {
	return func(c *config) { c.onExit = append(c.onExit, f) }
}

func parseOptions(raw string) (map[string]string, error) {
	opts := map[string]string{}
	if strings.TrimSpace(raw) == "" {
		return opts, nil
	}
	if err := json.Unmarshal([]byte(raw), &opts); err != nil {
		return nil, fmt.Errorf("%s must be a JSON object of strings: %w", handshake.OptionsEnv, err)
	}
	return opts, nil
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func closeBackend(logger hclog.Logger, b backend.Backend) {
	if c, ok := b.(io.Closer); ok {
		if err := c.Close(); err != nil {
			logger.Warn("close backend", "error", err)
		}
	}
}

// exitWithParent ends the plugin when the host process dies (the process is
// re-parented, so its parent pid changes), so that a SIGKILLed host leaves no
// orphans even where the kernel's parent-death signal is not set.
func exitWithParent(logger hclog.Logger, parent int, b backend.Backend, onExit func()) {
	t := time.NewTicker(orphanCheckInterval)
	defer t.Stop()
	for range t.C {
		if os.Getppid() != parent {
			logger.Warn("host process died; plugin exiting", "parent_pid", parent)
			closeBackend(logger, b)
			onExit()
			os.Exit(0)
		}
	}
}

func newPluginLogger(w io.Writer) hclog.Logger {
	level := hclog.Info
	if v := os.Getenv(handshake.LogLevelEnv); v != "" {
		if l := hclog.LevelFromString(v); l != hclog.NoLevel {
			level = l
		}
	}
	return hclog.New(&hclog.LoggerOptions{
		Level:      level,
		Output:     w,
		JSONFormat: true,
	})
}

// grpcPlugin is the go-plugin Plugin that serves a Backend over gRPC. It is
// server-side only; the host has its own client side.
type grpcPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	backend backend.Backend
}

func (p *grpcPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	backendv1.RegisterBackendServiceServer(s, &grpcServer{b: p.backend})
	return nil
}

func (p *grpcPlugin) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, errors.New("backendserver: the plugin side has no client")
}
