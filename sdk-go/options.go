package holdfast

import (
	"fmt"
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

// Backoff is a capped exponential backoff with full jitter. The SDK uses it
// between retries of `unavailable` answers in Lock, between renewal attempts
// in the watchdog and between release attempts in Unlock. Every retry loop is
// also bounded by the caller's budget (the wait, the context, the lease's
// local expiry), so Backoff only shapes the spacing.
type Backoff struct {
	// Initial is the first delay (default 50ms).
	Initial time.Duration
	// Max caps the delay (default 2s).
	Max time.Duration
	// Multiplier grows the delay after each attempt (default 2).
	Multiplier float64
}

// DefaultBackoff is the policy used unless WithBackoff says otherwise.
var DefaultBackoff = Backoff{Initial: 50 * time.Millisecond, Max: 2 * time.Second, Multiplier: 2}

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

// delay is the pause before retry number attempt (0-based): a uniformly
// random duration in [d/2, d] where d grows from Initial to Max. Half the
// delay is kept so that retries never bunch at zero.
func (b Backoff) delay(attempt int) time.Duration {
	d := float64(b.Initial)
	for i := 0; i < attempt && d < float64(b.Max); i++ {
		d *= b.Multiplier
	}
	d = min(d, float64(b.Max))
	half := d / 2
	return time.Duration(half + rand.Float64()*half)
}

// DefaultTTL is the lease length when a Lock does not set one.
const DefaultTTL = 15 * time.Second

type options struct {
	protocol   Protocol
	httpClient *http.Client
	holder     string
	maxOffset  time.Duration
	clock      *hlc.Clock
	backoff    Backoff
	token      string
	headers    http.Header
	defaultTTL time.Duration
}

func defaultOptions() options {
	return options{
		protocol:   ProtocolConnect,
		holder:     defaultHolder(),
		backoff:    DefaultBackoff,
		defaultTTL: DefaultTTL,
		headers:    http.Header{},
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
// a transport of its own. The caller then owns hc: Close does not close its
// idle connections. For ProtocolGRPC over http:// hc must speak HTTP/2
// without TLS.
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
