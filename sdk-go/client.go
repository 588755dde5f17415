package holdfast

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/holdfast/holdfast/proto/hlc"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
)

// Client talks to one holdfast server. It is safe for concurrent use; make
// one per process and share it.
type Client struct {
	rpc       lockv1connect.LockServiceClient
	target    string
	opts      options
	clock     *hlc.Clock
	transport *http.Transport // ours to close; nil with WithHTTPClient

	// closing is cancelled by Close, ending waits and watches in flight.
	closing       context.Context
	cancelClosing context.CancelCauseFunc

	// events counts the guards whose lost/released event is still to be
	// delivered; Close waits for them.
	events sync.WaitGroup

	// renewer is the client's watchdog: it renews every guard.
	renewer *renewer

	mu      sync.Mutex
	closed  bool
	guards  map[*Guard]struct{}
	maxWait time.Duration // the server's max_wait, once a refusal made us ask; 0: unknown
}

// Dial returns a client for the server at target: a base URL such as
// "http://127.0.0.1:7410" (https:// uses TLS), or a bare "host:port", which
// means http://host:port. Dial does not contact the server: the first call
// does. Call Close when done.
func Dial(target string, opts ...Option) (*Client, error) {
	u, err := parseTarget(target)
	if err != nil {
		return nil, err
	}
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if o.protocol < ProtocolConnect || o.protocol > ProtocolGRPCWeb {
		return nil, invalidArgument("protocol %d: want ProtocolConnect, ProtocolGRPC or ProtocolGRPCWeb", int(o.protocol))
	}
	if err := o.margin.check(); err != nil {
		return nil, err
	}
	if err := checkTTL("default ttl", o.defaultTTL, o.margin); err != nil {
		return nil, err
	}
	if o.retryBudget <= 0 {
		return nil, invalidArgument("retry budget %s: must be positive", o.retryBudget)
	}
	if o.requestTimeout <= 0 {
		return nil, invalidArgument("request timeout %s: must be positive", o.requestTimeout)
	}
	if o.logger == nil {
		o.logger = slog.Default()
	}
	o.backoff = o.backoff.normalized()
	c := &Client{
		target: strings.TrimRight(u.String(), "/"),
		opts:   o,
		clock:  o.clock,
		guards: map[*Guard]struct{}{},
	}
	if c.clock == nil {
		c.clock = hlc.NewClock(nil, o.maxOffset)
	}
	c.renewer = newRenewer(c)
	c.closing, c.cancelClosing = context.WithCancelCause(context.Background())
	hc := o.httpClient
	if hc == nil {
		c.transport = newTransport(u.Scheme, o.protocol, o.tlsConfig)
		hc = &http.Client{Transport: c.transport}
	}
	copts := []connect.ClientOption{connect.WithInterceptors(headerInterceptor{o: &c.opts})}
	switch o.protocol {
	case ProtocolGRPC:
		copts = append(copts, connect.WithGRPC())
	case ProtocolGRPCWeb:
		copts = append(copts, connect.WithGRPCWeb())
	}
	c.rpc = lockv1connect.NewLockServiceClient(hc, c.target, copts...)
	return c, nil
}

// parseTarget reads Dial's address: a base URL, or host:port for http.
func parseTarget(target string) (*url.URL, error) {
	raw := target
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, invalidArgument("address %q: %v (want http://host:port, https://host:port or host:port)", target, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, invalidArgument("address %q: want http://host:port, https://host:port or host:port", target)
	}
	return u, nil
}

// newTransport builds the client's own transport. gRPC needs HTTP/2; over
// http:// that is HTTP/2 with prior knowledge (h2c). Connect and gRPC-Web
// speak HTTP/1.1 over http:// and negotiate HTTP/2 over https://.
func newTransport(scheme string, p Protocol, tlsConfig *tls.Config) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	// Every guard renews on its own schedule; keep enough idle connections
	// that a busy process does not redial for each renewal. An idle
	// connection is kept for DefaultTransport's 90s (IdleConnTimeout), less
	// than the server's --idle-timeout (2m), so the pool never offers one
	// the server is closing; that holds too for a connection the transport
	// dialed for a request that another connection served and parked
	// unused, as the server waits --idle-timeout for a connection's first
	// request.
	t.MaxIdleConnsPerHost = 64
	protos := new(http.Protocols)
	switch {
	case scheme == "http" && p == ProtocolGRPC:
		protos.SetUnencryptedHTTP2(true)
	case scheme == "http":
		protos.SetHTTP1(true)
	default:
		protos.SetHTTP1(true)
		protos.SetHTTP2(true)
		cfg := &tls.Config{}
		if tlsConfig != nil {
			cfg = tlsConfig.Clone()
		}
		cfg.MinVersion = max(cfg.MinVersion, tls.VersionTLS12)
		t.TLSClientConfig = cfg
	}
	t.Protocols = protos
	return t
}

// headerInterceptor adds the bearer token and fixed headers to every call.
type headerInterceptor struct{ o *options }

func (h headerInterceptor) set(hdr http.Header) {
	if h.o.token != "" {
		hdr.Set("Authorization", "Bearer "+h.o.token)
	}
	for k, vs := range h.o.headers {
		for _, v := range vs {
			hdr.Add(k, v)
		}
	}
}

func (h headerInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		h.set(req.Header())
		return next(ctx, req)
	}
}

func (h headerInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		h.set(conn.RequestHeader())
		return conn
	}
}

func (h headerInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// Close ends the waits (Lock) and watches in flight with ErrClosed, releases
// every lease still held through this client (each guard's
// context is then cancelled with a LeaseLostError of reason
// LossClientClosed unless the release succeeded), stops their watchdogs and
// closes idle connections. Calls after Close fail with ErrClosed. Close waits
// at most a few seconds for the releases: an unreachable server lets the
// leases lapse by their TTL instead. It returns once the last lease event
// has been delivered, so do not call it from a WithLeaseEvents listener.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	guards := make([]*Guard, 0, len(c.guards))
	for g := range c.guards {
		guards = append(guards, g)
	}
	c.mu.Unlock()
	c.cancelClosing(ErrClosed) // ends Lock waits and watches in flight

	ctx, cancel := context.WithTimeout(context.Background(), closeReleaseTimeout)
	defer cancel()
	var errs []error
	for _, g := range guards {
		if err := g.closeForClient(ctx); err != nil && !errors.Is(err, ErrLeaseLost) {
			errs = append(errs, err)
		}
	}
	c.renewer.close()
	if c.transport != nil {
		c.transport.CloseIdleConnections()
	}
	c.events.Wait()
	return errors.Join(errs...)
}

const closeReleaseTimeout = 3 * time.Second

// callContext derives the context of a call that Close must be able to end
// (a server-side wait, a watch). Its cause is then ErrClosed.
func (c *Client) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(c.closing, func() { cancel(ErrClosed) })
	return ctx, func() {
		stop()
		cancel(nil)
	}
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// addEventWaiter counts one more guard whose end event Close must wait
// for; false once Close has begun.
func (c *Client) addEventWaiter() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.events.Add(1)
	return true
}

// track registers a live guard so Close can release it; false once closed.
func (c *Client) track(g *Guard) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.guards[g] = struct{}{}
	return true
}

func (c *Client) untrack(g *Guard) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.guards, g)
}

// Clock is the client's Hybrid Logical Clock. Every request carries a
// reading of it, and every server stamp and lease stamp is merged into it, so
// a reading taken after a call is after everything that call observed.
func (c *Client) Clock() *hlc.Clock { return c.clock }

// Now ticks the client's HLC and returns the reading: attach it to messages
// you send to other processes to carry causality through holdfast.
func (c *Client) Now() hlc.Timestamp { return c.clock.Now() }

// stamp is the client stamp for a request.
func (c *Client) stamp() *lockv1.HlcTimestamp { return c.clock.Now().ToProto() }

// merge folds a server's stamp into the client's clock. A stamp further
// ahead than the max offset is not merged (the clock stays put, as
// hlc.Clock.Update promises); the call that carried it still succeeds, since
// its answer (a lease, say) is real either way.
func (c *Client) merge(stamps ...*lockv1.HlcTimestamp) {
	for _, s := range stamps {
		if s != nil {
			_, _ = c.clock.Update(hlc.FromProto(s))
		}
	}
}

// ServerInfo reports the server's version and its backend's promises.
func (c *Client) ServerInfo(ctx context.Context) (ServerInfo, error) {
	if c.isClosed() {
		return ServerInfo{}, ErrClosed
	}
	ctx, done := c.callContext(ctx)
	defer done()
	var resp *lockv1.GetServerInfoResponse
	err := c.retrying(ctx, "GetServerInfo", time.Time{}, func(actx context.Context) error {
		var err error
		resp, err = c.rpc.GetServerInfo(actx, &lockv1.GetServerInfoRequest{})
		return err
	})
	if err != nil {
		return ServerInfo{}, err
	}
	c.merge(resp.GetServerStamp())
	return ServerInfo{
		Version:        resp.GetVersion(),
		Backend:        backendInfoFromProto(resp.GetBackend()),
		MaxClockOffset: resp.GetMaxClockOffset().AsDuration(),
		MaxWait:        resp.GetMaxWait().AsDuration(),
		Stamp:          hlc.FromProto(resp.GetServerStamp()),
	}, nil
}

// serverWait is the longest wait one Acquire asks the server for.
func (c *Client) serverWait() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.maxWait > 0 {
		return min(maxServerWait, c.maxWait)
	}
	return maxServerWait
}

// learnMaxWait is called when the server refused a waiting Acquire that
// asked for wait: it reports whether the server's max_wait (GetServerInfo)
// is shorter, so that Lock re-sends asking for at most that.
func (c *Client) learnMaxWait(ctx context.Context, wait time.Duration) bool {
	c.mu.Lock()
	known := c.maxWait
	c.mu.Unlock()
	if known == 0 {
		info, err := c.ServerInfo(ctx)
		if err != nil {
			return false
		}
		known = info.MaxWait
		c.mu.Lock()
		c.maxWait = known
		c.mu.Unlock()
	}
	return known > 0 && known < wait
}

// String identifies the client for logs.
func (c *Client) String() string {
	return fmt.Sprintf("holdfast.Client(%s, %s)", c.target, c.opts.protocol)
}
