// Package pluginhost launches a holdfast backend executable as a plugin
// process (hashicorp/go-plugin, gRPC only, AutoMTLS), supervises it, and
// serves backend.Backend by calling it.
//
// A go-plugin Client is single-use, so supervision is ours: one supervisor
// goroutine per Host launches the plugin, learns of its exit from go-plugin
// at once (the context go-plugin cancels when the process exits; no
// polling), and relaunches it with exponential backoff (Config.MinBackoff
// doubling up to Config.MaxBackoff, back to MinBackoff after a plugin that
// stayed up longer than MaxBackoff). While the plugin is down, every call
// fails at once with an error wrapping backend.ErrUnavailable; calls in
// flight when it dies are cancelled and fail the same way, and so do Watch
// and Follow, so the caller watches again once the plugin is back. After each
// relaunch Info is read again. A plugin that is running but does not answer
// (frozen) is found by a liveness ping with a deadline and reported down
// until it answers again (liveness.go).
//
// The plugin process gets Pdeathsig=SIGKILL (Linux) from a thread the
// supervisor keeps locked, and backendserver.Serve exits when its parent changes,
// so a killed host leaves no orphans.
//
// The plugin's stderr (hclog JSON lines, as backendserver.Serve writes them) is
// folded into Config.Logger at each line's own level, with the attribute
// plugin=Config.Name. When the first launch fails, Start's error carries
// what the plugin said (its last error-level log line), e.g. "open backend:
// etcd: cannot reach endpoints ...".
//
// The holdfast server runs itself as the memory plugin:
//
//	exe, _ := os.Executable()
//	h, err := pluginhost.Start(ctx, pluginhost.Config{
//		Path: exe, Args: []string{"backend", "memory"}, Name: "memory", Logger: log,
//	})
package pluginhost

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/core/internal/backoff"
	"github.com/holdfast/holdfast/core/internal/handshake"
	"github.com/holdfast/holdfast/core/internal/wire"
	backendv1 "github.com/holdfast/holdfast/proto/holdfast/backend/v1"
)

// Defaults for the zero values of Config.
const (
	DefaultMinBackoff   = 100 * time.Millisecond
	DefaultMaxBackoff   = 10 * time.Second
	DefaultStartTimeout = 30 * time.Second
	DefaultCallTimeout  = 10 * time.Second
)

// Config says which plugin to run and how.
type Config struct {
	// Path is the plugin executable. Required.
	Path string
	// Args are its arguments (for example {"backend", "memory"} when the
	// holdfast binary runs itself as a plugin).
	Args []string
	// Options are handed to the plugin's open function.
	Options map[string]string
	// SHA256, when set, pins the executable: it is checked before every
	// launch (go-plugin SecureConfig) and a mismatch refuses to run it.
	SHA256 []byte
	// Logger receives the host's and the plugin's logs; nil means
	// slog.Default().
	Logger *slog.Logger
	// Name names the plugin in logs and errors; default: base name of Path.
	Name string
	// MinBackoff and MaxBackoff bound the delay before a relaunch.
	MinBackoff, MaxBackoff time.Duration
	// StartTimeout bounds one launch (process start, handshake, Info).
	StartTimeout time.Duration
	// CallTimeout bounds each unary call whose context has no earlier
	// deadline, so a hung (for example SIGSTOPped) plugin cannot hang its
	// callers. Watch is not bounded.
	CallTimeout time.Duration
	// PingInterval and PingTimeout: the running plugin is pinged every
	// PingInterval and must answer within PingTimeout, or it is reported
	// down until it answers again (see liveness.go).
	PingInterval, PingTimeout time.Duration
	// OnCall, when set, is told of every unary call to the plugin (method
	// "Acquire", "Release", ...), how long it took and its error (nil on
	// success), for metrics. It must be quick.
	OnCall func(method string, took time.Duration, err error)
	// DialOptions are added to go-plugin's gRPC dial options (for example
	// a stats handler that propagates trace context into the plugin).
	DialOptions []grpc.DialOption
	// Env is added to the plugin's environment (KEY=value), after the
	// host's own.
	Env []string
	// LogLevel is the plugin's log level (trace, debug, info, warn, error;
	// empty: info) unless HOLDFAST_BACKEND_LOG_LEVEL is set in the host's
	// environment, which wins. Logger filters the plugin's lines again.
	LogLevel string
	// PprofAddr, when set (for example 127.0.0.1:0), makes the plugin serve
	// its profiles on that address (package pprofhttp) and log
	// "pprof serving" with the address it listens on. A debugging aid.
	PprofAddr string
}

// ErrClosed is returned (it wraps backend.ErrUnavailable) by calls on a
// closed Host.
var ErrClosed = fmt.Errorf("%w: plugin host closed", backend.ErrUnavailable)

// ErrChecksumMismatch is wrapped by Start's error when the executable's
// SHA-256 is not Config.SHA256.
var ErrChecksumMismatch = errors.New("plugin checksum mismatch")

// Host is a supervised plugin process. It implements backend.Backend and
// io.Closer. Its methods are safe for concurrent use.
type Host struct {
	cfg  Config
	log  *slog.Logger
	env  []string
	done chan struct{} // closed when the supervisor has exited

	restarts atomic.Uint64

	mu      sync.Mutex
	closed  bool
	closing chan struct{} // closed by Close
	gen     *generation   // the running plugin; nil while down
	changed chan struct{} // closed and replaced when gen changes
}

var (
	_ backend.Backend         = (*Host)(nil)
	_ backend.FairBackend     = (*Host)(nil)
	_ backend.FairSetBackend  = (*Host)(nil)
	_ backend.BatchBackend    = (*Host)(nil)
	_ backend.CountBackend    = (*Host)(nil)
	_ backend.ElectionBackend = (*Host)(nil)
	_ io.Closer               = (*Host)(nil)
)

// generation is one launch of the plugin.
type generation struct {
	client  *plugin.Client
	rpc     backendv1.BackendServiceClient
	exited  context.Context // cancelled by go-plugin when the process exits
	process *os.Process
	pid     int
	info    backend.Info
	batch   bool                  // the plugin serves the batch calls (Info.batch)
	health  healthpb.HealthClient // the liveness ping's
	live    *liveness
}

// Start launches the plugin, reads its Info, and supervises it until Close.
// An error from the first launch is returned (with what the plugin said on
// stderr); later crashes are retried forever with backoff. ctx bounds only
// the first launch.
func Start(ctx context.Context, cfg Config) (*Host, error) {
	if cfg.Path == "" {
		return nil, errors.New("pluginhost: Config.Path is required")
	}
	if cfg.Name == "" {
		cfg.Name = filepath.Base(cfg.Path)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	cfg.MaxBackoff = max(cfg.MaxBackoff, cfg.MinBackoff)
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = DefaultPingInterval
	}
	if cfg.PingTimeout <= 0 {
		cfg.PingTimeout = DefaultPingTimeout
	}
	if cfg.SHA256 != nil && len(cfg.SHA256) != sha256.Size {
		return nil, fmt.Errorf("pluginhost: Config.SHA256 must be %d bytes, got %d", sha256.Size, len(cfg.SHA256))
	}
	opts := cfg.Options
	if opts == nil {
		opts = map[string]string{}
	}
	optJSON, err := json.Marshal(opts)
	if err != nil {
		return nil, fmt.Errorf("pluginhost: encode options: %w", err)
	}
	// The host's environment, less anything that could override ours
	// (exec keeps the last of duplicate keys); go-plugin appends its own.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, handshake.OptionsEnv+"=") {
			env = append(env, kv)
		}
	}
	env = append(env, cfg.Env...)
	if _, set := os.LookupEnv(handshake.LogLevelEnv); !set && cfg.LogLevel != "" {
		env = append(env, handshake.LogLevelEnv+"="+cfg.LogLevel)
	}
	if cfg.PprofAddr != "" {
		env = append(env, handshake.PprofAddrEnv+"="+cfg.PprofAddr)
	}
	env = append(env, handshake.OptionsEnv+"="+string(optJSON))

	h := &Host{
		cfg:     cfg,
		log:     cfg.Logger.With("plugin", cfg.Name),
		env:     env,
		done:    make(chan struct{}),
		closing: make(chan struct{}),
		changed: make(chan struct{}),
	}
	first := make(chan error, 1)
	go h.supervise(first)
	select {
	case err := <-first:
		if err != nil {
			<-h.done
			return nil, err
		}
		return h, nil
	case <-ctx.Done():
		_ = h.Close()
		return nil, fmt.Errorf("pluginhost: start %s: %w", cfg.Name, ctx.Err())
	}
}

// Close stops the plugin (asks it to stop, kills it after 3s), waits for it
// and for every goroutine of the Host, and makes later calls fail with
// ErrClosed. A relaunch in progress is waited for first (at most
// StartTimeout, only when the plugin hangs on start-up). It is safe to call
// more than once.
func (h *Host) Close() error {
	h.mu.Lock()
	if !h.closed {
		h.closed = true
		close(h.closing)
	}
	h.mu.Unlock()
	<-h.done
	return nil
}

// Restarts is how many times the plugin was relaunched successfully after
// its first launch (a metric: holdfast_backend_restarts_total).
func (h *Host) Restarts() uint64 { return h.restarts.Load() }

// Up reports whether the plugin is running now and answers its liveness
// ping.
func (h *Host) Up() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gen != nil && h.gen.live.silentSince().IsZero()
}

// Changed returns a channel that is closed at the next change of state: the
// plugin went down, came back up (a restart: read Info again, and re-sync
// whatever was derived from Watch), or the Host was closed. Call it again
// after each change; take it before reading the state to miss nothing:
//
//	for {
//		ch := h.Changed()
//		... look at h.Up(), h.Info ...
//		<-ch
//	}
func (h *Host) Changed() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.changed
}

// PID is the plugin's process id, or 0 while it is down.
func (h *Host) PID() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gen == nil {
		return 0
	}
	return h.gen.pid
}

func (h *Host) setGen(g *generation) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gen = g
	close(h.changed)
	h.changed = make(chan struct{})
}

// current is the running plugin, or an error wrapping ErrUnavailable.
func (h *Host) current() (*generation, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.closed:
		return nil, ErrClosed
	case h.gen == nil:
		return nil, fmt.Errorf("%w: plugin %s is down (restarting)", backend.ErrUnavailable, h.cfg.Name)
	}
	if since := h.gen.live.silentSince(); !since.IsZero() {
		return nil, h.notAnswering(h.gen, since)
	}
	return h.gen, nil
}

func (h *Host) isClosed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}

// supervise is the Host's one goroutine: it launches the plugin, waits for
// it to exit or for Close, and relaunches it with backoff. It reports the
// first launch on first and ends there if that failed.
//
// It stays locked to its OS thread for its whole life. Pdeathsig fires when
// the thread that started the child ends, not the process; an unlocked
// goroutine's thread can be ended by the runtime (when some other goroutine
// exits while locked to it), which would kill a healthy plugin. A locked
// thread ends only with this goroutine, after the plugin.
func (h *Host) supervise(first chan<- error) {
	defer close(h.done)
	runtime.LockOSThread()
	// Never unlocked: the thread ends with this goroutine, after the plugin.

	retry := backoff.New(h.cfg.MinBackoff, h.cfg.MaxBackoff)
	for {
		g, err := h.launch()
		if first != nil {
			if err == nil {
				h.setGen(g) // before Start returns: calls may follow at once
			}
			first <- err
			first = nil
			if err != nil {
				return
			}
		} else if err != nil {
			d := retry.Next()
			h.log.Error("plugin relaunch failed", "error", err, "retry_in", d)
			if !h.sleep(d) {
				return
			}
			continue
		} else {
			h.restarts.Add(1)
			h.log.Info("plugin relaunched", "pid", g.pid, "restarts", h.restarts.Load())
			h.setGen(g)
		}

		up := time.Now()
		stopPing := h.startPing(g)
		select {
		case <-g.exited.Done():
			stopPing()
			h.setGen(nil)
			h.kill(g) // reaps the process and go-plugin's goroutines
			if time.Since(up) > h.cfg.MaxBackoff {
				retry.Reset()
			}
			d := retry.Next()
			h.log.Warn("plugin exited unexpectedly; relaunching", "pid", g.pid, "up_for", time.Since(up).Round(time.Millisecond), "retry_in", d)
			if !h.sleep(d) {
				return
			}
		case <-h.closing:
			stopPing()
			h.setGen(nil)
			h.kill(g)
			return
		}
	}
}

// killGrace is how long a plugin may take to stop when asked before it is
// killed. go-plugin's own Kill asks over gRPC without a deadline, which
// would hang on a frozen (SIGSTOPped) plugin.
const killGrace = 3 * time.Second

// kill stops generation g and waits for go-plugin's goroutines.
func (h *Host) kill(g *generation) { killClient(g.client, g.process) }

func killClient(c *plugin.Client, p *os.Process) {
	if p != nil {
		t := time.AfterFunc(killGrace, func() { _ = p.Kill() })
		defer t.Stop()
	}
	c.Kill()
}

// sleep waits d, or returns false when the Host is closing.
func (h *Host) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-h.closing:
		h.setGen(nil) // wake Changed waiters for the close
		return false
	}
}

// launch starts one generation of the plugin and reads its Info.
func (h *Host) launch() (*generation, error) {
	cmd := exec.Command(h.cfg.Path, h.cfg.Args...)
	cmd.Env = h.env
	setPdeathsig(cmd)

	var secure *plugin.SecureConfig
	if h.cfg.SHA256 != nil {
		secure = &plugin.SecureConfig{Checksum: h.cfg.SHA256, Hash: sha256.New()}
	}
	tail := &stderrTail{}
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  handshake.Config(),
		Plugins:          plugin.PluginSet{handshake.PluginName: clientPlugin{}},
		Cmd:              cmd,
		SkipHostEnv:      true, // cmd.Env already has it, filtered
		SecureConfig:     secure,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		Logger:           newHCLogAdapter(h.log),
		Stderr:           tail,
		SyncStdout:       newLineLogger(h.log, "stdout"),
		SyncStderr:       newLineLogger(h.log, "stderr"),
		StartTimeout:     h.cfg.StartTimeout,
		// Fixed flow-control windows first (see handshake.DialOptions).
		GRPCDialOptions: append(handshake.DialOptions(), h.cfg.DialOptions...),
	})
	proto, err := client.Client()
	if err != nil {
		client.Kill()
		return nil, h.startError(err, tail)
	}
	raw, err := proto.Dispense(handshake.PluginName)
	if err != nil {
		killClient(client, cmd.Process)
		return nil, fmt.Errorf("pluginhost: %s: dispense: %w", h.cfg.Name, err)
	}
	d := raw.(*dispensed)
	g := &generation{client: client, rpc: d.rpc, exited: d.exited, process: cmd.Process, pid: cmd.Process.Pid,
		health: healthpb.NewHealthClient(d.conn), live: newLiveness()}

	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.StartTimeout)
	defer cancel()
	stop := context.AfterFunc(g.exited, cancel)
	defer stop()
	resp, err := g.rpc.Info(ctx, &backendv1.InfoRequest{})
	if err != nil {
		h.kill(g)
		if reason := tail.reason(); reason != "" {
			return nil, &startError{msg: fmt.Sprintf("pluginhost: %s did not start: Info: %s", h.cfg.Name, oneLine(reason)), err: err}
		}
		return nil, fmt.Errorf("pluginhost: %s did not start: Info: %w", h.cfg.Name, err)
	}
	g.batch = resp.GetBatch()
	if g.info, err = wire.FromInfoResponse(resp); err != nil {
		h.kill(g)
		return nil, fmt.Errorf("pluginhost: %s did not start: %w", h.cfg.Name, err)
	}
	h.log.Info("backend plugin ready", "pid", g.pid, "backend", g.info.Name, "version", g.info.Version,
		"shared", g.info.Shared, "durable", g.info.Durable)
	return g, nil
}

// startError explains a failed launch with the plugin's own words.
func (h *Host) startError(err error, tail *stderrTail) error {
	if errors.Is(err, plugin.ErrChecksumsDoNotMatch) {
		got := "unreadable"
		if sum, ferr := fileSHA256(h.cfg.Path); ferr == nil {
			got = fmt.Sprintf("%x", sum)
		}
		return fmt.Errorf("pluginhost: refusing to run %s (%s): its SHA-256 is %s, the configured pin is %x: %w",
			h.cfg.Name, h.cfg.Path, got, h.cfg.SHA256, ErrChecksumMismatch)
	}
	if reason := tail.reason(); reason != "" {
		return &startError{msg: fmt.Sprintf("pluginhost: %s did not start: %s", h.cfg.Name, oneLine(reason)), err: err}
	}
	return &startError{msg: fmt.Sprintf("pluginhost: %s (%s) did not start: %s", h.cfg.Name, h.cfg.Path, oneLine(err.Error())), err: err}
}

// startError is a failed launch: one line for people, and go-plugin's error
// underneath for errors.Is.
type startError struct {
	msg string
	err error
}

func (e *startError) Error() string { return e.msg }
func (e *startError) Unwrap() error { return e.err }

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func fileSHA256(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sum := sha256.New()
	if _, err := io.Copy(sum, f); err != nil {
		return nil, err
	}
	return sum.Sum(nil), nil
}

// clientPlugin is the host side of handshake.PluginName.
type clientPlugin struct {
	plugin.NetRPCUnsupportedPlugin
}

// dispensed is what clientPlugin hands back: the gRPC client and go-plugin's
// context that is cancelled when the plugin process exits.
type dispensed struct {
	rpc    backendv1.BackendServiceClient
	exited context.Context
	conn   *grpc.ClientConn
}

func (clientPlugin) GRPCServer(*plugin.GRPCBroker, *grpc.Server) error {
	return errors.New("pluginhost: the host side serves nothing")
}

func (clientPlugin) GRPCClient(exited context.Context, _ *plugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	return &dispensed{rpc: backendv1.NewBackendServiceClient(conn), exited: exited, conn: conn}, nil
}
