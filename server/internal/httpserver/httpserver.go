// Package httpserver serves the holdfast API on one port: Connect, gRPC and
// gRPC-Web over HTTP/1.1 and cleartext HTTP/2 (h2c), with gRPC health
// checking and server reflection beside LockService. With WithTLS it serves
// HTTP/2 (ALPN h2) and HTTP/1.1 over TLS instead, and h2c is off.
//
// Clients are bounded below the API too (Limits, package httpguard): open
// connections in total and per client address, a deadline on request
// headers (from their first byte), on request bodies and on each response
// write, and an idle timeout, which is also how long a new connection may
// wait before its first request; the http.Server's own error lines (a
// failed TLS handshake per connection) reach the log at a bounded rate.
package httpserver

import (
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"math"
	"net"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	connectcors "connectrpc.com/cors"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"github.com/rs/cors"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/holdfast/holdfast/core/engine"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
	"github.com/holdfast/holdfast/server/internal/api"
	"github.com/holdfast/holdfast/server/internal/holdflush"
	"github.com/holdfast/holdfast/server/internal/httpguard"
	"github.com/holdfast/holdfast/server/internal/paging"
	"github.com/holdfast/holdfast/server/internal/turns"
	"github.com/holdfast/holdfast/server/internal/ui"
)

// MaxMessageBytes bounds request messages; larger ones are refused with
// resource_exhausted before they are decoded.
const MaxMessageBytes = 1 << 20

// CompressMinBytes: with CompressGzip, responses smaller than this are sent
// uncompressed.
const CompressMinBytes = 4 << 10

// Compression is what the server does with responses for clients that
// accept a compressed answer. Compressed requests are accepted whatever it
// is.
type Compression string

const (
	// CompressNone sends every response uncompressed (the default, as
	// gRPC's): a lock service's clients sit on its LAN, where gzip costs
	// the server more than the bytes save. An ExtendBatch answer of 500
	// leases took 1.3 ms of server CPU to gzip, a fifth of its whole
	// cost, to save 40 KB on a link that carries them in microseconds.
	CompressNone Compression = "none"
	// CompressGzip gzips (BestSpeed) the responses of at least
	// CompressMinBytes (List pages, ExtendBatch answers): for clients
	// across slow or metered links.
	CompressGzip Compression = "gzip"
)

// ParseCompression reads a --compression value.
func ParseCompression(s string) (Compression, error) {
	switch c := Compression(s); c {
	case CompressNone, CompressGzip:
		return c, nil
	}
	return "", fmt.Errorf("%q is not none or gzip", s)
}

// compression is the handler options of c.
func (c Compression) options() []connect.HandlerOption {
	minBytes := CompressMinBytes
	if c != CompressGzip {
		// gzip stays registered, so compressed requests are read, but
		// no answer is large enough to be compressed.
		minBytes = math.MaxInt
	}
	return []connect.HandlerOption{connect.WithCompressMinBytes(minBytes), fastGzip()}
}

// fastGzip is gzip at BestSpeed, in place of connect-go's default level:
// the responses above CompressMinBytes are List pages and ExtendBatch
// answers (a watchdog's renewals, hundreds of leases), and at the default
// level deflate took 29% of the server's CPU while 100 clients renewed
// 100,000 leases (bench -renewal profile). BestSpeed still shrinks them
// several times over, for a fraction of that CPU.
func fastGzip() connect.HandlerOption {
	return connect.WithCompression("gzip",
		func() connect.Decompressor { return &gzip.Reader{} },
		func() connect.Compressor {
			w, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed) // the level is valid: no error
			return w
		})
}

// Server is the HTTP server of one engine.
type Server struct {
	srv    *http.Server
	health *grpchealth.StaticChecker
	ln     net.Listener
	served chan error
	errLog *httpguard.LogWriter

	mu       sync.Mutex
	stopping bool          // health stays NOT_SERVING from now on
	untrack  chan struct{} // closed to stop TrackBackend's goroutine
	tracking sync.WaitGroup
}

// Option configures Start and Handler.
type Option func(*options)

type options struct {
	limits       Limits
	tls          *tls.Config
	interceptors []connect.Interceptor
	corsOrigins  []string
	pages        *paging.Sealer
	compression  Compression
	turns        *turns.Turns
}

// Limits are the connection-level bounds; a zero field is off (unbounded,
// or no deadline).
type Limits struct {
	// HeaderTimeout bounds reading a request's headers, from their first
	// byte (and, with TLS, the handshake, from the ClientHello).
	HeaderTimeout time.Duration
	// BodyTimeout bounds reading a request's body, from its handler's start.
	BodyTimeout time.Duration
	// WriteTimeout bounds each response write (a stream message, a flush).
	WriteTimeout time.Duration
	// IdleTimeout closes a connection with no request (HTTP/1.1) or no
	// open stream (HTTP/2) for this long, a new one that has sent nothing
	// yet included (0: a new connection gets HeaderTimeout instead).
	IdleTimeout time.Duration
	// MaxConnections and MaxConnectionsPerClient cap open connections, in
	// total and from one client address.
	MaxConnections, MaxConnectionsPerClient int
}

// DefaultLimits are the bounds Start uses without WithLimits (and the
// defaults of holdfast serve's flags).
func DefaultLimits() Limits {
	return Limits{
		HeaderTimeout:           10 * time.Second,
		BodyTimeout:             10 * time.Second,
		WriteTimeout:            10 * time.Second,
		IdleTimeout:             2 * time.Minute,
		MaxConnections:          10000,
		MaxConnectionsPerClient: 1000,
	}
}

// WithLimits replaces DefaultLimits.
func WithLimits(l Limits) Option { return func(o *options) { o.limits = l } }

// WithTLS serves TLS with cfg (HTTP/2 by ALPN and HTTP/1.1; no h2c).
func WithTLS(cfg *tls.Config) Option { return func(o *options) { o.tls = cfg } }

// WithInterceptors wraps LockService (not health or reflection) in
// interceptors, outermost first (authentication, then limits).
func WithInterceptors(i ...connect.Interceptor) Option {
	return func(o *options) { o.interceptors = append(o.interceptors, i...) }
}

// WithCompression sets what happens to large responses (default
// CompressNone).
func WithCompression(c Compression) Option { return func(o *options) { o.compression = c } }

// WithPageTokens seals List page tokens with s (default: a key of this
// process only; see package paging).
func WithPageTokens(s *paging.Sealer) Option { return func(o *options) { o.pages = s } }

// WithTurns runs List requests in t's turns (package turns), shared with
// whatever else reads the whole server (the /metrics server); default: turns
// of their own (turns.ForProcessors).
func WithTurns(t *turns.Turns) Option { return func(o *options) { o.turns = t } }

// WithCORS lets web pages from these origins ("https://app.example.com";
// "*" for any; rs/cors wildcards such as "https://*.example.com") call the
// API from a browser over Connect or gRPC-Web. Without it (the default) no
// CORS headers are sent and browsers refuse cross-origin calls.
func WithCORS(origins ...string) Option {
	return func(o *options) { o.corsOrigins = append(o.corsOrigins, origins...) }
}

// withCORS wraps h in the CORS handler connect's documentation recommends
// (rs/cors with connectrpc.com/cors's lists): preflights from an allowed
// origin are answered, and responses expose the headers Connect and
// gRPC-Web clients read (grpc-status, ...). Authorization is allowed too, for
// bearer tokens (--auth-tokens).
func withCORS(h http.Handler, origins []string) http.Handler {
	return cors.New(cors.Options{
		AllowedOrigins: origins,
		AllowedMethods: connectcors.AllowedMethods(),
		AllowedHeaders: append(connectcors.AllowedHeaders(), "Authorization"),
		ExposedHeaders: connectcors.ExposedHeaders(),
		MaxAge:         7200, // seconds a browser may cache a preflight's answer
	}).Handler(h)
}

// Handler builds the mux: LockService, grpc.health.v1, reflection and the
// live view (package ui) at /ui/.
func Handler(e *engine.Engine, health *grpchealth.StaticChecker, opts ...Option) http.Handler {
	o := newOptions(opts)
	mux := http.NewServeMux()
	hopts := append(o.compression.options(),
		connect.WithReadMaxBytes(MaxMessageBytes),
		connect.WithCodec(protoCodec{shared: newSharedEncodings()}),
		connect.WithCodec(jsonCodec{shared: newSharedEncodings()}),
		connect.WithInterceptors(o.interceptors...),
	)
	lockPath, lock := lockv1connect.NewLockServiceHandler(api.New(e, o.pages), hopts...)
	mux.Handle(lockPath, lock)
	// List pages take turns with the other requests that read the whole
	// server; lock calls never wait for one.
	mux.Handle(lockv1connect.LockServiceListProcedure, o.turns.Handler(lock))
	// A watcher's queued events leave in one flush.
	mux.Handle(lockv1connect.LockServiceWatchProcedure, holdflush.Handler(lock))
	mux.Handle(grpchealth.NewHandler(health))
	// connectrpc.com/grpchealth serves Check and Watch; reflection
	// describes grpc.health.v1.Health with List too, so List is served
	// here rather than answering unimplemented.
	mux.Handle(healthListProcedure, connect.NewUnaryHandler(healthListProcedure, healthList(health)))
	reflector := grpcreflect.NewStaticReflector(lockv1connect.LockServiceName, grpchealth.HealthV1ServiceName)
	mux.Handle(grpcreflect.NewHandlerV1(reflector))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector))
	// The live view's static files are public; its API calls carry the
	// user's token through the interceptors above.
	mux.Handle(ui.Path, ui.Handler())
	h := checkFraming(mux)
	if len(o.corsOrigins) > 0 {
		h = withCORS(h, o.corsOrigins)
	}
	// Outermost, so the stack grows while it is shallowest (stack.go).
	return withStack(httpguard.Handler(h, httpguard.Timeouts{Body: o.limits.BodyTimeout, Write: o.limits.WriteTimeout}))
}

// healthListProcedure is grpc.health.v1.Health's List.
const healthListProcedure = "/" + grpchealth.HealthV1ServiceName + "/List"

// healthServices are the services health reports on: the server as a
// whole ("") and LockService.
var healthServices = []string{"", lockv1connect.LockServiceName}

// healthList answers grpc.health.v1.Health/List from the checker.
func healthList(health *grpchealth.StaticChecker) func(context.Context, *connect.Request[healthpb.HealthListRequest]) (*connect.Response[healthpb.HealthListResponse], error) {
	return func(ctx context.Context, _ *connect.Request[healthpb.HealthListRequest]) (*connect.Response[healthpb.HealthListResponse], error) {
		out := &healthpb.HealthListResponse{Statuses: map[string]*healthpb.HealthCheckResponse{}}
		for _, name := range healthServices {
			st, err := health.Check(ctx, &grpchealth.CheckRequest{Service: name})
			if err != nil {
				return nil, err
			}
			out.Statuses[name] = &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_ServingStatus(st.Status)}
		}
		return connect.NewResponse(out), nil
	}
}

func newOptions(opts []Option) options {
	o := options{limits: DefaultLimits(), compression: CompressNone}
	for _, opt := range opts {
		opt(&o)
	}
	if o.turns == nil {
		o.turns = turns.ForProcessors()
	}
	return o
}

// errorLogBurst lines of the http.Server's error log pass per
// errorLogInterval; the others are counted.
const (
	errorLogBurst    = 5
	errorLogInterval = 10 * time.Second
)

// Start listens on addr (host:port; port 0 picks a free one) and serves in
// the background.
func Start(addr string, e *engine.Engine, log *slog.Logger, opts ...Option) (*Server, error) {
	o := newOptions(opts)
	raw, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	errLog := httpguard.NewLogWriter(slog.NewLogLogger(log.Handler(), slog.LevelWarn).Writer(), errorLogBurst, errorLogInterval)
	var ln net.Listener = httpguard.Limit(raw, o.limits.MaxConnections, o.limits.MaxConnectionsPerClient, func(client string, total bool) {
		if total {
			fmt.Fprintf(errLog, "closed a connection from %s: %d connections open (the server's --max-connections)\n", client, o.limits.MaxConnections)
		} else {
			fmt.Fprintf(errLog, "closed a connection from %s: %d connections open from it (the server's --max-connections-per-client)\n", client, o.limits.MaxConnectionsPerClient)
		}
	})
	// A new connection is idle until its first request starts: it waits
	// for it as long as a keep-alive connection waits for its next one,
	// and the header timeout counts from the request's first byte
	// (httpguard.Awaiting says why net/http's own count from the accept
	// failed clients).
	firstRequestWait := o.limits.IdleTimeout
	if firstRequestWait <= 0 {
		firstRequestWait = o.limits.HeaderTimeout // no idle bound: keep the one net/http had
	}
	ln = httpguard.Await(ln, firstRequestWait)
	health := grpchealth.NewStaticChecker(lockv1connect.LockServiceName)
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	if o.tls != nil {
		protocols.SetHTTP2(true) // by ALPN; cleartext h2c stays off
		ln = tls.NewListener(ln, o.tls)
	} else {
		protocols.SetUnencryptedHTTP2(true) // gRPC without TLS needs h2c
	}
	s := &Server{
		srv: &http.Server{
			Handler:           Handler(e, health, opts...),
			TLSConfig:         o.tls,
			Protocols:         protocols,
			ReadHeaderTimeout: o.limits.HeaderTimeout,
			// Idle keep-alive connections are closed after a while; open
			// streams (Watch, a waiting Acquire) are not idle.
			IdleTimeout: o.limits.IdleTimeout,
			ErrorLog:    stdlog.New(errLog, "", 0),
		},
		errLog:  errLog,
		health:  health,
		ln:      ln,
		served:  make(chan error, 1),
		untrack: make(chan struct{}),
	}
	go func() { s.served <- s.srv.Serve(ln) }()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Done receives the error that stopped serving (nil after Shutdown).
func (s *Server) Done() <-chan error { return s.served }

// Supervised is a backend whose process can be down while the server runs
// (pluginhost.Host).
type Supervised interface {
	// Up reports whether the backend runs now.
	Up() bool
	// Changed is closed at the next change of Up.
	Changed() <-chan struct{}
}

// TrackBackend makes grpc health follow b: SERVING while b is up,
// NOT_SERVING while it is down (calls then answer unavailable), until
// shutdown.
func (s *Server) TrackBackend(b Supervised) {
	s.tracking.Add(1)
	go func() {
		defer s.tracking.Done()
		for {
			ch := b.Changed() // before reading the state, to miss nothing
			s.setStatus(b.Up())
			select {
			case <-ch:
			case <-s.untrack:
				return
			}
		}
	}()
}

func (s *Server) setStatus(serving bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	status := grpchealth.StatusServing
	if !serving || s.stopping {
		status = grpchealth.StatusNotServing
	}
	for _, name := range healthServices {
		s.health.SetStatus(name, status)
	}
}

// SetNotServing makes grpc health report NOT_SERVING for good (the first
// step of shutdown, so load balancers stop sending work).
func (s *Server) SetNotServing() {
	s.mu.Lock()
	if !s.stopping {
		s.stopping = true
		close(s.untrack)
	}
	s.mu.Unlock()
	s.tracking.Wait()
	s.setStatus(false)
}

// Shutdown stops accepting connections and waits for in-flight requests
// until ctx ends; then it closes what is left.
func (s *Server) Shutdown(ctx context.Context) error {
	s.SetNotServing()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
	}
	if serr := <-s.served; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		return serr
	}
	_ = s.errLog.Flush()
	return err
}
