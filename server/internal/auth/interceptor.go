package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"connectrpc.com/connect"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

type principalKey struct{}

// FromContext returns the caller authenticated by the interceptor.
func FromContext(ctx context.Context) (*Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(*Principal)
	return p, ok
}

// Interceptor authenticates every call of the service it wraps (unary and
// streaming) by its "Authorization: Bearer <token>" header and authorises
// it by key prefix. Only LockService is wrapped: gRPC health and reflection
// stay open (they reveal nothing about locks).
type Interceptor struct {
	store *Store
	log   *slog.Logger
}

var _ connect.Interceptor = (*Interceptor)(nil)

// NewInterceptor authenticates calls against store.
func NewInterceptor(store *Store, log *slog.Logger) *Interceptor {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Interceptor{store: store, log: log}
}

// authenticate finds the caller from the request headers.
func (i *Interceptor) authenticate(h interface{ Get(string) string }, procedure, peer string) (*Principal, error) {
	v := h.Get("Authorization")
	scheme, tok, ok := strings.Cut(v, " ")
	switch {
	case v == "":
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New(`missing "Authorization: Bearer <token>" header`))
	case !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "":
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New(`Authorization header: want "Bearer <token>"`)) //nolint:staticcheck // ST1005: the message starts with the header's name
	}
	p := i.store.Authenticate(strings.TrimSpace(tok))
	if p == nil {
		i.log.Info("refused an unknown bearer token", "procedure", procedure, "peer", peer)
		return nil, connect.NewError(connect.CodeUnauthenticated, errors.New("invalid bearer token"))
	}
	return p, nil
}

// WrapUnary implements connect.Interceptor.
func (i *Interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		p, err := i.authenticate(req.Header(), req.Spec().Procedure, req.Peer().Addr)
		if err != nil {
			return nil, err
		}
		allow, err := authorize(p, req.Any())
		if err != nil {
			i.log.Debug("permission denied", "token", p.Name, "procedure", req.Spec().Procedure, "err", err)
			return nil, err
		}
		resp, err := next(context.WithValue(ctx, principalKey{}, p), req)
		if err != nil || allow == nil {
			return resp, err
		}
		if list, ok := resp.Any().(*lockv1.ListResponse); ok {
			kept := list.Locks[:0]
			for _, s := range list.GetLocks() {
				if allow(s.GetKey()) {
					kept = append(kept, s)
				}
			}
			clear(list.Locks[len(kept):])
			list.Locks = kept
		}
		return resp, nil
	}
}

// WrapStreamingClient implements connect.Interceptor (nothing to do).
func (i *Interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler implements connect.Interceptor: the caller is
// authenticated before the stream starts, the request is authorised when
// it is received, and events outside the caller's namespaces are dropped.
func (i *Interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		p, err := i.authenticate(conn.RequestHeader(), conn.Spec().Procedure, conn.Peer().Addr)
		if err != nil {
			return err
		}
		return next(context.WithValue(ctx, principalKey{}, p), &authorizedConn{StreamingHandlerConn: conn, p: p, log: i.log})
	}
}

type authorizedConn struct {
	connect.StreamingHandlerConn
	p     *Principal
	log   *slog.Logger
	allow func(string) bool // nil: everything the stream carries
}

func (c *authorizedConn) Receive(m any) error {
	if err := c.StreamingHandlerConn.Receive(m); err != nil {
		return err
	}
	allow, err := authorize(c.p, m)
	if err != nil {
		c.log.Debug("permission denied", "token", c.p.Name, "procedure", c.Spec().Procedure, "err", err)
		return err
	}
	c.allow = allow
	return nil
}

func (c *authorizedConn) Send(m any) error {
	if ev, ok := m.(*lockv1.WatchResponse); ok && c.allow != nil && ev.GetState() != nil && !c.allow(ev.GetState().GetKey()) {
		return nil
	}
	return c.StreamingHandlerConn.Send(m)
}

// authorize checks that p may make the request msg, narrowing a List or
// Watch prefix in place when that is exact. A non-nil allow means the
// answer must be filtered to the keys it allows.
func authorize(p *Principal, msg any) (allow func(string) bool, err error) {
	switch r := msg.(type) {
	case *lockv1.AcquireRequest:
		return nil, p.write("Acquire", r.GetKey())
	case *lockv1.ReleaseRequest:
		return nil, p.write("Release", r.GetKey())
	case *lockv1.ExtendRequest:
		return nil, p.write("Extend", r.GetKey())
	case *lockv1.ExtendBatchRequest:
		for _, it := range r.GetItems() {
			if err := p.write("ExtendBatch", it.GetKey()); err != nil {
				return nil, err
			}
		}
		return nil, nil
	case *lockv1.InspectRequest:
		return nil, p.read(r.GetKey())
	case *lockv1.ListRequest:
		prefix, allow, err := p.scope(r.GetPrefix())
		if err != nil {
			return nil, err
		}
		r.Prefix = prefix
		return allow, nil
	case *lockv1.WatchRequest:
		switch t := r.GetTarget().(type) {
		case *lockv1.WatchRequest_Key:
			return nil, p.read(t.Key)
		default: // a prefix, or unset: every key
			prefix, allow, err := p.scope(r.GetPrefix())
			if err != nil {
				return nil, err
			}
			if prefix != "" || t != nil {
				r.Target = &lockv1.WatchRequest_Prefix{Prefix: prefix}
			}
			return allow, nil
		}
	case *lockv1.GetServerInfoRequest:
		return nil, nil
	}
	return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%T: not covered by token namespaces", msg))
}

func (p *Principal) denied(format string, args ...any) error {
	quoted := make([]string, len(p.Prefixes))
	for i, pre := range p.Prefixes {
		quoted[i] = fmt.Sprintf("%q", pre)
	}
	return connect.NewError(connect.CodePermissionDenied,
		fmt.Errorf(format+"; this token may use keys under %s", append(args, strings.Join(quoted, ", "))...))
}

func (p *Principal) read(key string) error {
	if !p.Allows(key) {
		return p.denied("key %q is outside this token's namespaces", key)
	}
	return nil
}

func (p *Principal) write(op, key string) error {
	if p.ReadOnly {
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s: this token is read-only (Inspect, List, Watch only)", op))
	}
	return p.read(key)
}

// scope decides a List or Watch prefix:
//   - inside one of p's namespaces: as asked, nothing filtered;
//   - wider than exactly one of them: narrowed to it (the same answer as
//     filtering, without reading other namespaces);
//   - wider than several: as asked, the answer filtered to p's namespaces;
//   - touching none of them: permission_denied.
func (p *Principal) scope(prefix string) (string, func(string) bool, error) {
	if p.Allows(prefix) {
		return prefix, nil, nil
	}
	var under []string
	for _, pre := range p.Prefixes {
		if strings.HasPrefix(pre, prefix) {
			under = append(under, pre)
		}
	}
	switch len(under) {
	case 0:
		return "", nil, p.denied("prefix %q is outside this token's namespaces", prefix)
	case 1:
		return under[0], nil, nil
	}
	return prefix, p.Allows, nil
}
