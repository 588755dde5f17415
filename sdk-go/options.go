package holdfast

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"time"

	"github.com/holdfast/holdfast/proto/hlc"
)

// Protocol is the wire protocol the client speaks. The server serves all
// three on one port.
type Protocol int

const (
	// ProtocolConnect is Connect's protocol (HTTP/1.1 or HTTP/2), the default.
	ProtocolConnect Protocol = iota
	// ProtocolGRPC is gRPC (HTTP/2; over http:// the client uses HTTP/2
	// without TLS, "h2c").
	ProtocolGRPC
	// ProtocolGRPCWeb is gRPC-Web.
	ProtocolGRPCWeb
)

func (p Protocol) String() string {
	switch p {
	case ProtocolConnect:
		return "connect"
	case ProtocolGRPC:
		return "grpc"
	case ProtocolGRPCWeb:
		return "grpcweb"
	}
	return fmt.Sprintf("Protocol(%d)", int(p))
}

// Backoff is a capped exponential backoff with equal jitter: before retry n
// (0-based) the SDK sleeps a uniformly random duration in [d/2, d], where
// d = min(Initial × Multiplierⁿ, Max). It spaces retries of `unavailable`
// answers (every call), renewal attempts after a failed renewal (the
// watchdog) and release attempts (Unlock). Every retry loop is also bounded
// by its own budget (the retry budget, the wait, the context, the lease's
// local expiry), so Backoff only shapes the spacing.
type Backoff struct {
	// Initial is the first delay (default 50ms).
	Initial time.Duration
	// Max caps the delay (default 1s).
	Max time.Duration
	// Multiplier grows the delay after each attempt (default 2).
	Multiplier float64
}

// DefaultBackoff is the policy used unless WithBackoff says otherwise:
// 50ms, 100ms, 200ms, ... capped at 1s, each with equal jitter.
var DefaultBackoff = Backoff{Initial: 50 * time.Millisecond, Max: time.Second, Multiplier: 2}

func (b Backoff) normalized() Backoff {
	if b.Initial <= 0 {
		b.Initial = DefaultBackoff.Initial
	}
	if b.Max <= 0 {
		b.Max = DefaultBackoff.Max
	}
	if b.Max < b.Initial {
		b.Max = b.Initial
	}
	if b.Multiplier < 1 {
		b.Multiplier = DefaultBackoff.Multiplier
	}
	return b
}

// delay is the pause before retry number attempt (0-based): equal jitter, a
// uniformly random duration in [d/2, d] where d grows from Initial to Max.
// Half the delay is kept so that retries never bunch at zero.
func (b Backoff) delay(attempt int) time.Duration {
	d := float64(b.Initial)
	for i := 0; i < attempt && d < float64(b.Max); i++ {
		d *= b.Multiplier
	}
	d = min(d, float64(b.Max))
	half := d / 2
	return time.Duration(half + rand.Float64()*half)
}

// ExpiryMargin is how much earlier than TTL after the send the guard counts
// its lease as ended: DriftFactor × TTL + Fixed. The drift part covers a
// client clock that runs slow against the store's over a long lease, the
// fixed part a timer that fires a little late; with it the guard is
// poisoned at least the margin before the store could grant the key to
// anyone else.
type ExpiryMargin struct {
	// DriftFactor is the fraction of the TTL kept back (default 0.01).
	DriftFactor float64
	// Fixed is kept back on top (default 20ms).
	Fixed time.Duration
}

// DefaultExpiryMargin is the margin used unless WithExpiryMargin says
// otherwise: TTL/100 + 20ms.
var DefaultExpiryMargin = ExpiryMargin{DriftFactor: 0.01, Fixed: 20 * time.Millisecond}

// For is the margin on a lease of ttl.
func (m ExpiryMargin) For(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*m.DriftFactor) + m.Fixed
}

func (m ExpiryMargin) check() error {
	if !(m.DriftFactor >= 0 && m.DriftFactor < 0.5) { // also refuses NaN
		return invalidArgument("expiry margin: drift factor %v: want at least 0 and below 0.5", m.DriftFactor)
	}
	if m.Fixed < 0 {
		return invalidArgument("expiry margin: fixed %s: must not be negative", m.Fixed)
	}
	return nil
}

// Defaults of the client options (docs/sdk-behaviour.md lists them for every
// SDK).
const (
	// DefaultTTL is the lease length when a Lock does not set one.
	DefaultTTL = 15 * time.Second
	// MinTTL is the shortest lease the SDK takes: the watchdog renews at a
	// third of the TTL, and a shorter lease leaves a renewal no time to
	// come back. The server's own range (--max-ttl, the backend's) is
	// checked by the server.
	MinTTL = 100 * time.Millisecond
	// DefaultRetryBudget is how long a call retries `unavailable` answers
	// and transport failures in a row before it returns ErrUnavailable.
	DefaultRetryBudget = 5 * time.Second
	// DefaultRequestTimeout bounds one RPC attempt (a waiting Acquire's
	// server-side wait is not counted).
	DefaultRequestTimeout = 10 * time.Second
)

type options struct {
	protocol       Protocol
	httpClient     *http.Client
	tlsConfig      *tls.Config
	holder         string
	maxOffset      time.Duration
	clock          *hlc.Clock
	backoff        Backoff
	token          string
	headers        http.Header
	defaultTTL     time.Duration
	retryBudget    time.Duration
	requestTimeout time.Duration
	margin         ExpiryMargin
	onLeaseEvent   func(LeaseEvent)
	logger         *slog.Logger
}

func defaultOptions() options {
	return options{
		protocol:       ProtocolConnect,
		holder:         defaultHolder(),
		backoff:        DefaultBackoff,
		defaultTTL:     DefaultTTL,
		headers:        http.Header{},
		retryBudget:    DefaultRetryBudget,
		requestTimeout: DefaultRequestTimeout,
		margin:         DefaultExpiryMargin,
	}
}

// defaultHolder labels locks with this process: "hostname:pid".
func defaultHolder() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return fmt.Sprintf("%s:%d", host, os.Getpid())
}

// Option configures Dial.
type Option func(*options)

// WithProtocol selects the wire protocol (default ProtocolConnect).
func WithProtocol(p Protocol) Option { return func(o *options) { o.protocol = p } }

// WithHTTPClient makes the client send every request through hc instead of
// a transport of its own: this is where http.RoundTripper middlewares
// (interceptors) go. The caller then owns hc: Close does not close its idle
// connections, and WithTLSConfig does not apply. For ProtocolGRPC over
// http:// hc must speak HTTP/2 without TLS.
func WithHTTPClient(hc *http.Client) Option { return func(o *options) { o.httpClient = hc } }

// WithHolder sets the default holder label for locks taken through this
// client (default "hostname:pid"). Lock.Holder overrides it per lock.
func WithHolder(holder string) Option { return func(o *options) { o.holder = holder } }

// WithMaxClockOffset sets how far ahead of the local clock a server stamp may
// be before the client refuses to merge it (default hlc.DefaultMaxOffset,
// 500ms; negative disables the check). Ignored when WithClock is given.
func WithMaxClockOffset(d time.Duration) Option { return func(o *options) { o.maxOffset = d } }

// WithClock makes the client stamp requests from, and merge answers into, c
// instead of a clock of its own: several clients (or the caller's own
// messages) then share one causal order.
func WithClock(c *hlc.Clock) Option { return func(o *options) { o.clock = c } }

// WithBackoff sets the retry spacing; zero fields take DefaultBackoff's.
func WithBackoff(b Backoff) Option { return func(o *options) { o.backoff = b } }

// WithBearerToken sends "Authorization: Bearer token" with every request.
func WithBearerToken(token string) Option { return func(o *options) { o.token = token } }

// WithHeader adds a header to every request.
func WithHeader(key, value string) Option {
	return func(o *options) { o.headers.Add(key, value) }
}

// WithDefaultTTL sets the lease length of locks that do not set one
// (default DefaultTTL, 15s).
func WithDefaultTTL(ttl time.Duration) Option { return func(o *options) { o.defaultTTL = ttl } }

// WithTLSConfig sets the TLS configuration of the client's own transport for
// https:// addresses: RootCAs for a server certificate signed by your own CA,
// Certificates for a client certificate (mTLS). The SDK keeps a copy and
// enforces TLS 1.2 or later. Ignored with WithHTTPClient.
//
//	pool := x509.NewCertPool()
//	pool.AppendCertsFromPEM(caPEM)
//	cert, err := tls.LoadX509KeyPair("client.crt", "client.key")
//	...
//	holdfast.Dial("https://locks.internal:7410", holdfast.WithTLSConfig(&tls.Config{
//		RootCAs: pool, Certificates: []tls.Certificate{cert},
//	}))
func WithTLSConfig(cfg *tls.Config) Option { return func(o *options) { o.tlsConfig = cfg } }

// WithRetryBudget sets how long a call keeps retrying `unavailable` answers
// and transport failures in a row (refused, reset, a timed-out attempt)
// before it returns ErrUnavailable (default DefaultRetryBudget, 5s). A Lock
// with a Wait is bounded by its wait too, and every call by its context.
func WithRetryBudget(d time.Duration) Option { return func(o *options) { o.retryBudget = d } }

// WithRequestTimeout bounds one RPC attempt (default DefaultRequestTimeout,
// 10s); a waiting Acquire gets its server-side wait on top. A timed-out
// attempt is retried within the retry budget.
func WithRequestTimeout(d time.Duration) Option { return func(o *options) { o.requestTimeout = d } }

// WithExpiryMargin sets how much earlier than TTL after the send every
// guard of this client counts its lease as ended (default
// DefaultExpiryMargin, TTL/100 + 20ms). DriftFactor must be in [0, 0.5).
func WithExpiryMargin(m ExpiryMargin) Option { return func(o *options) { o.margin = m } }

// WithLeaseEvents calls fn for every lease event of this client's guards:
// renewed, renewal failed (transient: the watchdog retries), lost, released.
// fn is called from the SDK's goroutines, one event at a time per guard;
// keep it short and do not block in it. A panic in fn is recovered and
// logged; it never stops a watchdog.
func WithLeaseEvents(fn func(LeaseEvent)) Option { return func(o *options) { o.onLeaseEvent = fn } }

// WithLogger sets where the client logs lease events (default
// slog.Default(), looked up when the client is made): renewed and released
// at debug, renewal failed and lost at warn.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }
