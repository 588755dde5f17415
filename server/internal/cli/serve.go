package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"

	"github.com/holdfast/holdfast/core/engine"
	"github.com/holdfast/holdfast/core/pluginhost"
	"github.com/holdfast/holdfast/proto/hlc"
	"github.com/holdfast/holdfast/server/internal/auth"
	"github.com/holdfast/holdfast/server/internal/config"
	"github.com/holdfast/holdfast/server/internal/httpserver"
	"github.com/holdfast/holdfast/server/internal/limits"
	"github.com/holdfast/holdfast/server/internal/paging"
	"github.com/holdfast/holdfast/server/internal/tlsconfig"
	"github.com/holdfast/holdfast/server/internal/turns"
	"github.com/holdfast/holdfast/server/internal/ui"
)

// Per-client defaults of the deprecated per-connection flags too.
const (
	defaultMaxWaitersPerClient      = 1024
	defaultMaxWatchStreamsPerClient = 100
)

// DefaultAddr is where `holdfast serve` listens without --addr: loopback
// only, so a server started by hand is not reachable from the network.
const DefaultAddr = "127.0.0.1:7410"

// serveOptions are the flags of `holdfast serve`.
type serveOptions struct {
	addr                string
	backend             string
	backendOpts         []string
	backendSHA256       string
	config              string
	maxTTL              time.Duration
	maxWait             time.Duration
	maxKeys             int
	maxLockDelay        time.Duration
	maxClockOffset      time.Duration
	maxWaitersPerKey    int
	maxWaiters          int
	maxWaitersPerClient int
	startTimeout        time.Duration
	pingTimeout         time.Duration // the plugin's liveness ping must answer within this
	shutdownTimeout     time.Duration
	logLevel            string
	logFormat           string

	tlsCert, tlsKey, tlsClientCA string
	authTokens                   string
	pageTokenKeyFile             string   // secret shared by servers whose List page tokens must work on each other
	corsOrigins                  []string // browser origins allowed to call the API (CORS); none: off
	maxRequestDuration           time.Duration
	maxWatchStreams              int
	maxWatchStreamsPerClient     int
	maxLocks, maxLocksPerClient  int

	// Deprecated spellings, from when these bounds counted per TCP
	// connection (which bounds nothing: HTTP/2 clients open more).
	oldMaxWaitersPerConn, oldMaxWatchStreamsPerConn int

	conn httpserver.Limits // connection-level bounds: timeouts, connection caps

	pprofAddr string // debugging: pprof profiles of the server and its plugin

	metricsAddr  string // Prometheus /metrics (observe.go); off when empty
	otlpEndpoint string // OpenTelemetry spans by OTLP/HTTP; off when empty

	batchInFlight int // backend batch calls of each kind at once; 0: every call alone

	compression string // large responses: none or gzip (httpserver.ParseCompression)
}

func newServe(version string, stdout, stderr io.Writer) *cobra.Command {
	var o serveOptions
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "serve the lock API (Connect, gRPC, gRPC-Web on one port)",
		Long: `Serve the holdfast lock API: Connect, gRPC and gRPC-Web on one port (HTTP/1.1
and cleartext HTTP/2; with --tls-cert, HTTP/2 and HTTP/1.1 over TLS only), with
gRPC health checking and reflection. --auth-tokens requires bearer tokens
limited to key prefixes (README, Security).

Every flag can also be set by an environment variable HOLDFAST_<FLAG> (upper
case, "-" as "_", e.g. HOLDFAST_ADDR, HOLDFAST_MAX_TTL; several --backend-opt
values separated by ";") and by a key of the YAML or JSON --config file
(e.g. "addr: 127.0.0.1:7410"). The command line wins over the environment,
which wins over the file.

Once serving, it prints exactly one line to stdout:
  holdfast serving addr=HOST:PORT backend=NAME shared=BOOL durable=BOOL
and, run by systemd (a Type=notify unit, $NOTIFY_SOCKET), tells it READY=1.
Logs go to stderr. SIGTERM or SIGINT shut it down gracefully (exit 0).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			path := o.config
			if !cmd.Flags().Changed("config") {
				if v, ok := os.LookupEnv(config.EnvName("config")); ok {
					path = v
				}
			}
			if err := config.Apply(cmd.Flags(), path, os.LookupEnv, "config"); err != nil {
				return err
			}
			return serve(cmd.Context(), version, o, stdout, stderr)
		},
	}
	f := cmd.Flags()
	f.SortFlags = false
	f.StringVar(&o.addr, "addr", DefaultAddr, "host:port to listen on (port 0 picks a free port)")
	f.StringVar(&o.backend, "backend", "memory", `backend: "memory" (embedded), a name (runs holdfast-backend-NAME from next to this executable, else from PATH), or a plugin path (contains "/")`)
	f.StringArrayVar(&o.backendOpts, "backend-opt", nil, "backend option key=value (repeatable), handed to the plugin")
	f.StringVar(&o.backendSHA256, "backend-sha256", "", "refuse to start the plugin unless its executable has this SHA-256 (hex)")
	f.StringVar(&o.config, "config", "", "YAML or JSON config file whose keys are these flags' names")
	f.DurationVar(&o.maxTTL, "max-ttl", engine.DefaultMaxTTL, "longest lease this server grants (the backend may allow less)")
	f.DurationVar(&o.maxWait, "max-wait", engine.DefaultMaxWait, "longest wait an Acquire may ask for")
	f.IntVar(&o.maxKeys, "max-keys", engine.DefaultMaxKeys, "most keys one multi-key Acquire, Release or Extend may name (the backend may allow fewer)")
	f.DurationVar(&o.maxLockDelay, "max-lock-delay", engine.DefaultMaxLockDelay, "longest lock_delay an Acquire may ask for (the backend may allow less; 0 switches lock-delay off)")
	f.DurationVar(&o.maxClockOffset, "max-clock-offset", hlc.DefaultMaxOffset, "refuse client HLC stamps further ahead of the server's clock than this")
	f.IntVar(&o.maxWaitersPerKey, "max-waiters-per-key", 1024, "waiters queued per key before Acquire answers resource_exhausted")
	f.IntVar(&o.maxWaiters, "max-waiters", 65536, "waiters queued on this server before Acquire answers resource_exhausted")
	f.IntVar(&o.maxWaitersPerClient, "max-waiters-per-client", defaultMaxWaitersPerClient, "waiting Acquires one client (a token, or without --auth-tokens a client address) may have at once before Acquire answers resource_exhausted (a token's max_waiters overrides it)")
	f.IntVar(&o.maxLocks, "max-locks", 100000, "locks held through this server (and Acquires in progress) before Acquire answers resource_exhausted; 0: unbounded")
	f.IntVar(&o.maxLocksPerClient, "max-locks-per-client", 10000, "locks one client (a token, or a client address) may hold through this server, with its Acquires in progress; a token's max_locks overrides it; 0: unbounded")
	f.DurationVar(&o.startTimeout, "start-timeout", 30*time.Second, "how long to wait for the backend to start")
	f.DurationVar(&o.pingTimeout, "backend-ping-timeout", pluginhost.DefaultPingTimeout, "the backend plugin must answer its liveness ping (every second) within this, or it is reported down (health NOT_SERVING, holdfast_backend_up 0, calls answer unavailable) until it answers again")
	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long shutdown waits for in-flight requests")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&o.logFormat, "log-format", "text", "text or json (logs go to stderr)")
	f.StringVar(&o.tlsCert, "tls-cert", "", "serve TLS (HTTP/2 and HTTP/1.1) with this PEM certificate (chain); re-read when it changes")
	f.StringVar(&o.tlsKey, "tls-key", "", "PEM private key of --tls-cert; re-read when it changes")
	f.StringVar(&o.tlsClientCA, "tls-client-ca", "", "require client certificates signed by a CA in this PEM file (mTLS)")
	f.StringVar(&o.authTokens, "auth-tokens", "", "require bearer tokens from this YAML/JSON file, each limited to key prefixes (see README, Security)")
	f.StringVar(&o.pageTokenKeyFile, "page-token-key-file", "", "seal List page tokens with a key derived from this file's secret (at least 32 bytes); give servers behind one load balancer the same file (default: a key of this process, so a token works only on the server that issued it)")
	f.StringArrayVar(&o.corsOrigins, "cors-origin", nil, `let web pages from this origin call the API from a browser (Connect, gRPC-Web), e.g. https://app.example.com; repeatable; "*" allows any (off by default)`)
	f.DurationVar(&o.maxRequestDuration, "max-request-duration", 0, "server deadline on each unary call; must exceed --max-wait (0: --max-wait plus 1m)")
	f.IntVar(&o.maxWatchStreams, "max-watch-streams", 10000, "open Watch streams on this server before Watch answers resource_exhausted")
	f.IntVar(&o.maxWatchStreamsPerClient, "max-watch-streams-per-client", defaultMaxWatchStreamsPerClient, "open Watch streams of one client (a token, or a client address) before Watch answers resource_exhausted (a token's max_watch_streams overrides it)")
	f.IntVar(&o.oldMaxWaitersPerConn, "max-waiters-per-connection", defaultMaxWaitersPerClient, "deprecated: --max-waiters-per-client")
	f.IntVar(&o.oldMaxWatchStreamsPerConn, "max-watch-streams-per-connection", defaultMaxWatchStreamsPerClient, "deprecated: --max-watch-streams-per-client")
	_ = f.MarkHidden("max-waiters-per-connection")
	_ = f.MarkHidden("max-watch-streams-per-connection")
	dl := httpserver.DefaultLimits()
	f.DurationVar(&o.conn.HeaderTimeout, "header-timeout", dl.HeaderTimeout, "a request's headers (and the TLS handshake) must arrive within this from their first byte, or the connection is closed")
	f.DurationVar(&o.conn.BodyTimeout, "body-timeout", dl.BodyTimeout, "a request's body must arrive whole within this, or the call answers deadline_exceeded and the connection (HTTP/1.1) or stream (HTTP/2) is dropped")
	f.DurationVar(&o.conn.WriteTimeout, "write-timeout", dl.WriteTimeout, "each response message (a Watch event included) must be taken by the client within this, or its stream (HTTP/2) or connection (HTTP/1.1) is dropped")
	f.DurationVar(&o.conn.IdleTimeout, "idle-timeout", dl.IdleTimeout, "close a connection with no request (HTTP/1.1) or no open stream (HTTP/2) for this long, a new one that has sent nothing yet included")
	f.IntVar(&o.conn.MaxConnections, "max-connections", dl.MaxConnections, "open connections before new ones are closed at once; keep it below the file descriptor limit (ulimit -n); 0: unbounded")
	f.IntVar(&o.conn.MaxConnectionsPerClient, "max-connections-per-client", dl.MaxConnectionsPerClient, "open connections from one client address (an IP, an IPv6 /64) before its new ones are closed at once; 0: unbounded")
	f.IntVar(&o.batchInFlight, "batch-in-flight", engine.DefaultBatchInFlight, "on a backend that batches: concurrent Acquires, Releases and Extends go to it together, in at most this many calls of each kind at once (a call that finds none in flight goes alone, at once); 0 sends every call on its own")
	f.StringVar(&o.compression, "compression", string(httpserver.CompressNone), "large responses (List pages, ExtendBatch answers of 4 KiB or more) for clients that accept gzip: none sends them as they are (clients on the LAN: gzip costs the server more CPU than the bytes it saves), gzip compresses them (clients across slow links); compressed requests are read either way")
	f.StringVar(&o.pprofAddr, "pprof-addr", "", "debugging: serve pprof profiles (/debug/pprof/, with block and mutex profiles) on this host:port, and the plugin's on a free port of the same host (both logged as \"pprof serving\"); off when empty")
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://HOST:PORT/metrics on this separate host:port, e.g. 127.0.0.1:9410 (off when empty)")
	f.StringVar(&o.otlpEndpoint, "otlp-endpoint", "", "export OpenTelemetry spans by OTLP/HTTP to this URL, e.g. http://127.0.0.1:4318 (off when empty, unless OTEL_EXPORTER_OTLP_ENDPOINT is set)")
	return cmd
}

func newLogger(o serveOptions, w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level: %q is not debug, info, warn or error", o.logLevel)
	}
	hopts := &slog.HandlerOptions{Level: level}
	switch o.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(w, hopts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, hopts)), nil
	}
	return nil, fmt.Errorf("--log-format: %q is not text or json", o.logFormat)
}

// plugin is how to start the backend process.
type plugin struct {
	name string // as given to --backend
	path string
	args []string
}

// resolveBackend finds the plugin executable for --backend.
func resolveBackend(v string) (plugin, error) {
	self, err := os.Executable()
	if err != nil {
		return plugin{}, fmt.Errorf("--backend: cannot find this executable: %w", err)
	}
	switch {
	case v == "" || v == "memory":
		// The embedded default: this very binary, as a plugin process.
		return plugin{name: "memory", path: self, args: []string{"backend", "memory"}}, nil
	case strings.Contains(v, "/"):
		p, err := filepath.Abs(v)
		if err != nil {
			return plugin{}, fmt.Errorf("--backend %s: %w", v, err)
		}
		if _, err := os.Stat(p); err != nil {
			return plugin{}, fmt.Errorf("--backend %s: %w", v, err)
		}
		return plugin{name: filepath.Base(p), path: p}, nil
	}
	exe := "holdfast-backend-" + v
	sibling := filepath.Join(filepath.Dir(self), exe)
	if st, err := os.Stat(sibling); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
		return plugin{name: v, path: sibling}, nil
	}
	p, err := exec.LookPath(exe)
	if err != nil {
		return plugin{}, fmt.Errorf("--backend %s: no %s next to %s or in PATH", v, exe, self)
	}
	return plugin{name: v, path: p}, nil
}

func parseBackendOpts(opts []string) (map[string]string, error) {
	m := make(map[string]string, len(opts))
	for _, kv := range opts {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--backend-opt %q: want key=value", kv)
		}
		m[k] = v
	}
	return m, nil
}

// serve runs the server until SIGTERM/SIGINT (or ctx ends), then shuts down.
func serve(ctx context.Context, version string, o serveOptions, stdout, stderr io.Writer) error {
	log, err := newLogger(o, stderr)
	if err != nil {
		return err
	}
	deprecatedFlags(&o, log)
	opts, err := parseBackendOpts(o.backendOpts)
	if err != nil {
		return err
	}
	plug, err := resolveBackend(o.backend)
	if err != nil {
		return err
	}
	if o.batchInFlight < 0 {
		return fmt.Errorf("--batch-in-flight: %d is negative (0 sends every backend call on its own)", o.batchInFlight)
	}
	compression, err := httpserver.ParseCompression(o.compression)
	if err != nil {
		return fmt.Errorf("--compression: %w", err)
	}
	var pin []byte
	if o.backendSHA256 != "" {
		if pin, err = hex.DecodeString(o.backendSHA256); err != nil || len(pin) != sha256.Size {
			return fmt.Errorf("--backend-sha256: want %d hex digits, got %q", 2*sha256.Size, o.backendSHA256)
		}
	}
	sec, err := security(o, log)
	if err != nil {
		return err
	}
	ob, err := setupObservability(ctx, o, version, log)
	if err != nil {
		return err
	}
	defer ob.close()
	obOpts, err := ob.serverOptions()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	startCtx, cancel := context.WithTimeout(ctx, o.startTimeout)
	defer cancel()
	log.Info("starting backend plugin", "backend", plug.name, "path", plug.path)
	pcfg := pluginhost.Config{
		Name:    plug.name,
		Path:    plug.path,
		Args:    plug.args,
		Options: opts,
		SHA256:  pin,
		Logger:  log,
		// A frozen plugin is reported down after this (liveness.go).
		PingTimeout: o.pingTimeout,
	}
	if o.pprofAddr != "" {
		a, err := httpserver.StartPprof(o.pprofAddr, log)
		if err != nil {
			return fmt.Errorf("--pprof-addr %s: %w", o.pprofAddr, err)
		}
		host, _, _ := net.SplitHostPort(a.String())
		pcfg.PprofAddr = net.JoinHostPort(host, "0")
	}
	ob.plugin(&pcfg)
	host, err := pluginhost.Start(startCtx, pcfg)
	if err != nil {
		if ctx.Err() != nil { // SIGTERM/SIGINT during start-up: a clean stop
			log.Info("interrupted during start-up", "cause", context.Cause(ctx))
			return nil
		}
		return fmt.Errorf("backend %s: %w", plug.name, err)
	}
	defer host.Close()

	eng, err := engine.New(startCtx, host, engine.Config{
		Version:          version,
		MaxTTL:           o.maxTTL,
		MaxWait:          o.maxWait,
		MaxKeys:          o.maxKeys,
		MaxLockDelay:     engineLockDelay(o.maxLockDelay),
		MaxClockOffset:   o.maxClockOffset,
		MaxWaitersPerKey: o.maxWaitersPerKey,
		MaxWaiters:       o.maxWaiters,
		Logger:           log.With("component", "engine"),
		Observer:         ob.observer(),
		Batch:            engine.BatchConfig{InFlight: o.batchInFlight, Off: o.batchInFlight == 0},
	})
	if err != nil {
		if ctx.Err() != nil { // SIGTERM/SIGINT during start-up: a clean stop
			log.Info("interrupted during start-up", "cause", context.Cause(ctx))
			return nil
		}
		return fmt.Errorf("backend %s: %w", plug.name, err)
	}
	defer eng.Close()

	// List pages and scrapes share one set of turns: together they leave
	// the lock calls a processor.
	background := turns.ForProcessors()
	hopts := append(append(obOpts, sec...), httpserver.WithCompression(compression), httpserver.WithTurns(background))
	srv, err := httpserver.Start(o.addr, eng, log, hopts...)
	if err != nil {
		return fmt.Errorf("--addr %s: %w", o.addr, err)
	}
	if err := ob.start(o.metricsAddr, version, eng, host, background); err != nil {
		_ = srv.Shutdown(context.Background())
		return err
	}
	srv.TrackBackend(host)
	info := eng.Info()
	log.Info("holdfast serving", "version", version, "addr", srv.Addr().String(),
		"backend", info.Name, "backend_version", info.Version,
		"shared", info.Shared, "durable", info.Durable, "fair", info.Fair, "plugin_pid", host.PID())
	scheme := "http"
	if o.tlsCert != "" {
		scheme = "https"
	}
	log.Info("live view (read-only; its API calls need a token when --auth-tokens is set)",
		"url", scheme+"://"+srv.Addr().String()+ui.Path)
	if !info.Shared {
		log.Warn("backend is not shared: this server's locks are its own; several servers on this backend are several independent locks, not one",
			"backend", info.Name)
	}
	if !info.Durable {
		log.Warn("backend is not durable: locks are lost when the backend restarts", "backend", info.Name)
	}
	// The readiness line: the one thing written to stdout.
	fmt.Fprintf(stdout, "holdfast serving addr=%s backend=%s shared=%t durable=%t\n",
		srv.Addr(), info.Name, info.Shared, info.Durable)
	notifySystemd(log, "READY=1\nSTATUS=serving on "+srv.Addr().String()+" (backend "+info.Name+")")

	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down", "cause", context.Cause(ctx))
	case serveErr = <-srv.Done():
		log.Error("server stopped", "err", serveErr)
	}
	notifySystemd(log, "STOPPING=1")
	// Stop taking work, end waiters and watchers (unavailable), let in-flight
	// calls finish, then stop the plugin. No lease is released: holders keep
	// them until their TTL (see package engine).
	srv.SetNotServing()
	eng.Close()
	shutdownCtx, cancel2 := context.WithTimeout(context.WithoutCancel(ctx), o.shutdownTimeout)
	defer cancel2()
	if serveErr == nil {
		if err := srv.Shutdown(shutdownCtx); err != nil {
			log.Warn("shutdown", "err", err)
		}
	}
	if err := host.Close(); err != nil {
		log.Warn("stopping backend", "err", err)
	}
	if serveErr != nil && !errors.Is(serveErr, context.Canceled) {
		return serveErr
	}
	log.Info("stopped")
	return nil
}

// deprecatedFlags carries the per-connection spellings of two bounds over
// to their per-client flags (when those were left at their defaults), with
// a warning: they now count per client.
func deprecatedFlags(o *serveOptions, log *slog.Logger) {
	for _, d := range []struct {
		old, now string
		from, to *int
		def      int
	}{
		{"max-waiters-per-connection", "max-waiters-per-client", &o.oldMaxWaitersPerConn, &o.maxWaitersPerClient, defaultMaxWaitersPerClient},
		{"max-watch-streams-per-connection", "max-watch-streams-per-client", &o.oldMaxWatchStreamsPerConn, &o.maxWatchStreamsPerClient, defaultMaxWatchStreamsPerClient},
	} {
		if *d.from == d.def {
			continue
		}
		log.Warn("--"+d.old+" is deprecated: use --"+d.now+" (the bound now counts per client, not per TCP connection)", "value", *d.from)
		if *d.to == d.def {
			*d.to = *d.from
		}
	}
}

// security builds the TLS, authentication and limit options of the HTTP
// server from the flags. Bad files refuse to start.
func security(o serveOptions, log *slog.Logger) ([]httpserver.Option, error) {
	var opts []httpserver.Option
	if o.tlsCert != "" || o.tlsKey != "" || o.tlsClientCA != "" {
		cfg, _, err := tlsconfig.New(tlsconfig.Files{Cert: o.tlsCert, Key: o.tlsKey, ClientCA: o.tlsClientCA}, log.With("component", "tls"))
		if err != nil {
			return nil, err
		}
		opts = append(opts, httpserver.WithTLS(cfg))
		log.Info("serving TLS", "cert", o.tlsCert, "client_certificates_required", o.tlsClientCA != "")
	}
	if len(o.corsOrigins) > 0 {
		for _, origin := range o.corsOrigins {
			if origin == "" {
				return nil, fmt.Errorf("--cors-origin: empty origin; want e.g. https://app.example.com or *")
			}
		}
		opts = append(opts, httpserver.WithCORS(o.corsOrigins...))
		log.Info("CORS enabled: browsers on these origins may call the API", "origins", o.corsOrigins)
	}
	if o.pageTokenKeyFile != "" {
		pages, err := paging.LoadSealer(o.pageTokenKeyFile)
		if err != nil {
			return nil, fmt.Errorf("--page-token-key-file: %w", err)
		}
		opts = append(opts, httpserver.WithPageTokens(pages))
	}
	var icpt []connect.Interceptor
	if o.authTokens != "" {
		store, err := auth.Load(o.authTokens, log.With("component", "auth"))
		if err != nil {
			return nil, fmt.Errorf("--auth-tokens: %w", err)
		}
		icpt = append(icpt, auth.NewInterceptor(store, log.With("component", "auth")))
		log.Info("bearer tokens required", "file", o.authTokens, "tokens", store.Len())
	} else if o.tlsCert == "" && !isLoopback(o.addr) {
		log.Warn("serving without TLS or tokens on a non-loopback address: anyone who reaches it can take and watch every lock (set --tls-cert and --tls-key, and --auth-tokens)", "addr", o.addr)
	}
	lim := limits.Config{
		MaxRequestDuration:  o.maxRequestDuration,
		MaxStreams:          o.maxWatchStreams,
		MaxLocks:            o.maxLocks,
		MaxLocksPerClient:   o.maxLocksPerClient,
		MaxWaitersPerClient: o.maxWaitersPerClient,
		MaxStreamsPerClient: o.maxWatchStreamsPerClient,
	}
	if lim.MaxRequestDuration == 0 {
		lim.MaxRequestDuration = o.maxWait + time.Minute
	}
	if err := limits.Check(lim, o.maxWait); err != nil {
		return nil, err
	}
	for name, d := range map[string]time.Duration{"--header-timeout": o.conn.HeaderTimeout, "--body-timeout": o.conn.BodyTimeout, "--write-timeout": o.conn.WriteTimeout, "--idle-timeout": o.conn.IdleTimeout} {
		if d < 0 {
			return nil, fmt.Errorf("%s: %s is negative (0 is no timeout)", name, d)
		}
	}
	if o.conn.MaxConnections < 0 || o.conn.MaxConnectionsPerClient < 0 {
		return nil, fmt.Errorf("--max-connections, --max-connections-per-client: must not be negative (0 is unbounded)")
	}
	if o.maxKeys < 0 {
		return nil, fmt.Errorf("--max-keys: %d is negative (1: one key per request)", o.maxKeys)
	}
	if o.maxLockDelay < 0 {
		return nil, fmt.Errorf("--max-lock-delay: %s is negative", o.maxLockDelay)
	}
	opts = append(opts, httpserver.WithLimits(o.conn))
	icpt = append(icpt, limits.New(lim))
	return append(opts, httpserver.WithInterceptors(icpt...)), nil
}

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// engineLockDelay maps --max-lock-delay to the engine's setting: the flag's
// 0 switches lock-delay off, where the engine's 0 is its default.
func engineLockDelay(flag time.Duration) time.Duration {
	if flag == 0 {
		return engine.NoLockDelay
	}
	return flag
}
