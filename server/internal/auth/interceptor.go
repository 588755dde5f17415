package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"connectrpc.com/connect"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/server/internal/paging"
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
		g, err := authorize(p, req.Any())
		if err != nil {
			i.log.Debug("permission denied", "token", p.Name, "procedure", req.Spec().Procedure, "err", err)
			return nil, err
		}
		ctx = context.WithValue(ctx, principalKey{}, p)
		if g.view != nil {
			ctx = paging.WithView(ctx, paging.View{Caller: p.Name, Prefixes: g.view})
		}
		return next(ctx, req)
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
	g, err := authorize(c.p, m)
	if err != nil {
		c.log.Debug("permission denied", "token", c.p.Name, "procedure", c.Spec().Procedure, "err", err)
		return err
	}
	c.allow = g.allow
	return nil
}

func (c *authorizedConn) Send(m any) error {
	if ev, ok := m.(*lockv1.WatchResponse); ok && c.allow != nil && ev.GetState() != nil && !c.allow(ev.GetState().GetKey()) {
		return nil
	}
	return c.StreamingHandlerConn.Send(m)
}

// grant is what authorize lets a request see beyond its own key.
type grant struct {
	// allow, for a Watch whose prefix is wider than several of the
	// token's namespaces, is the filter its events pass.
	allow func(string) bool
	// view, for a List, is the key ranges its pages are read from
	// (package paging): the prefix asked for, or the token's namespaces
	// under it.
	view []string
}

// authorize checks that p may make the request msg, narrowing a Watch
// prefix in place when that is exact.
func authorize(p *Principal, msg any) (grant, error) {
	switch r := msg.(type) {
	case *lockv1.AcquireRequest:
		keys := []string{r.GetKey()}
		for _, c := range r.GetClaims() {
			keys = append(keys, c.GetKey())
		}
		return grant{}, p.writeAll("Acquire", keys)
	case *lockv1.ReleaseRequest:
		return grant{}, p.writeAll("Release", append([]string{r.GetKey()}, r.GetKeys()...))
	case *lockv1.ExtendRequest:
		return grant{}, p.writeAll("Extend", append([]string{r.GetKey()}, r.GetKeys()...))
	case *lockv1.ExtendBatchRequest:
		for _, it := range r.GetItems() {
			if err := p.writeAll("ExtendBatch", []string{it.GetKey()}); err != nil {
				return grant{}, err
			}
		}
		return grant{}, nil
	case *lockv1.ProclaimRequest:
		// The permission of Extend: only the leader's own token changes
		// anything, and a leader may write its key.
		return grant{}, p.writeAll("Proclaim", []string{r.GetKey()})
	case *lockv1.InspectRequest:
		return grant{}, p.read(r.GetKey())
	case *lockv1.ObserveRequest:
		return grant{}, p.read(r.GetKey())
	case *lockv1.ListRequest:
		view, err := p.view(r.GetPrefix())
		return grant{view: view}, err
	case *lockv1.WatchRequest:
		switch t := r.GetTarget().(type) {
		case *lockv1.WatchRequest_Key:
			return grant{}, p.read(t.Key)
		default: // a prefix, or unset: every key
			view, err := p.view(r.GetPrefix())
			switch {
			case err != nil:
				return grant{}, err
			case len(view) == 1:
				if view[0] != "" || t != nil {
					r.Target = &lockv1.WatchRequest_Prefix{Prefix: view[0]}
				}
				return grant{}, nil
			}
			return grant{allow: p.Allows}, nil
		}
	case *lockv1.GetServerInfoRequest:
		return grant{}, nil
	}
	return grant{}, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%T: not covered by token namespaces", msg))
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

// writeAll checks that p may change every key of a request (key, or each
// key of a multi-key request; an empty key, which the engine refuses or
// ignores beside claims, is checked like any other).
func (p *Principal) writeAll(op string, keys []string) error {
	if p.ReadOnly {
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s: this token is read-only (Inspect, List, Watch, Observe only)", op))
	}
	for i, k := range keys {
		if k == "" && i == 0 && len(keys) > 1 {
			continue // a multi-key request: key is unset
		}
		if err := p.read(k); err != nil {
			return err
		}
	}
	return nil
}

// view decides what a List or Watch of prefix may see:
//   - a prefix inside one of p's namespaces: the prefix itself;
//   - a prefix wider than some of them: those namespaces, in key order
//     (one: the prefix is narrowed to it; several: each is read in turn,
//     and nothing outside them is read at all);
//   - a prefix touching none of them: permission_denied.
func (p *Principal) view(prefix string) ([]string, error) {
	if p.Allows(prefix) {
		return []string{prefix}, nil
	}
	var under []string
	for _, pre := range p.Prefixes {
		if strings.HasPrefix(pre, prefix) {
			under = append(under, pre)
		}
	}
	if len(under) == 0 {
		return nil, p.denied("prefix %q is outside this token's namespaces", prefix)
	}
	// Sorted, and without a namespace inside another, the ranges are
	// disjoint and in key order one after the other.
	slices.Sort(under)
	out := under[:1]
	for _, pre := range under[1:] {
		if !strings.HasPrefix(pre, out[len(out)-1]) {
			out = append(out, pre)
		}
	}
	return out, nil
}
