package auth_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/core/engine"
	"github.com/holdfast/holdfast/plugins/memory"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
	"github.com/holdfast/holdfast/server/internal/auth"
	"github.com/holdfast/holdfast/server/internal/httpserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Tokens of the test file. Each is stored as its SHA-256 except "plain".
const (
	adminTok = "admin-token-0123456789"
	teamATok = "team-a-token-0123456789"
	multiTok = "multi-token-0123456789"
	viewTok  = "viewer-token-0123456789"
	plainTok = "plain-token-0123456789"
)

func sum(tok string) string { s := sha256.Sum256([]byte(tok)); return hex.EncodeToString(s[:]) }

func tokensFile(t *testing.T) string {
	t.Helper()
	body := `
- name: admin
  sha256: ` + sum(adminTok) + `
  prefixes: [""]
- name: team-a
  sha256: ` + sum(teamATok) + `
  prefixes: ["a/"]
- name: multi
  sha256: ` + sum(multiTok) + `
  prefixes: ["a/", "c/"]
- name: viewer
  sha256: ` + sum(viewTok) + `
  prefixes: ["a/"]
  read_only: true
- name: plain
  token: ` + plainTok + `
  prefixes: ["p/"]
`
	p := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

type fixture struct {
	addr string
	tr   *http.Transport
}

// start serves a real engine on the memory backend behind the auth
// interceptor, over cleartext HTTP/2 and HTTP/1.1.
func start(t *testing.T) *fixture {
	t.Helper()
	store, err := auth.Load(tokensFile(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	b := memory.New()
	e, err := engine.New(context.Background(), b, engine.Config{MaxWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := httpserver.Start("127.0.0.1:0", e, slog.New(slog.DiscardHandler),
		httpserver.WithInterceptors(auth.NewInterceptor(store, nil)))
	if err != nil {
		t.Fatal(err)
	}
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	f := &fixture{addr: srv.Addr().String(), tr: &http.Transport{Protocols: p}}
	t.Cleanup(func() {
		f.tr.CloseIdleConnections() // first, so Shutdown need not wait for them
		e.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		b.Close()
	})
	return f
}

// bearer adds an Authorization header to every request.
type bearer struct {
	value string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.value != "" {
		r.Header.Set("Authorization", b.value)
	}
	return b.next.RoundTrip(r)
}

// client is a gRPC client sending the header value ("" for none).
func (f *fixture) client(header string, opts ...connect.ClientOption) lockv1connect.LockServiceClient {
	hc := &http.Client{Transport: bearer{value: header, next: f.tr}}
	return lockv1connect.NewLockServiceClient(hc, "http://"+f.addr, append([]connect.ClientOption{connect.WithGRPC()}, opts...)...)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func acquire(t *testing.T, c lockv1connect.LockServiceClient, key string) *lockv1.Lease {
	t.Helper()
	r, err := c.Acquire(ctxT(t), &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(time.Minute)})
	if err != nil || !r.GetAcquired() {
		t.Fatalf("acquire %s: %v %v", key, r, err)
	}
	return r.GetLease()
}

func wantCode(t *testing.T, what string, err error, code connect.Code, msg ...string) {
	t.Helper()
	if connect.CodeOf(err) != code {
		t.Fatalf("%s: %v, want %s", what, err, code)
	}
	for _, m := range msg {
		if !strings.Contains(err.Error(), m) {
			t.Fatalf("%s: message %q does not say %q", what, err, m)
		}
	}
}

// The "done when": a request outside a token's namespace is
// refused, by every RPC that names a key, over every protocol.
func TestRequestOutsideNamespaceIsRefused(t *testing.T) {
	f := start(t)
	admin := f.client("Bearer " + adminTok)
	other := acquire(t, admin, "b/job")
	for name, opt := range map[string]connect.ClientOption{
		"grpc":         connect.WithGRPC(),
		"connect-json": connect.WithProtoJSON(),
		"grpc-web":     connect.WithGRPCWeb(),
	} {
		t.Run(name, func(t *testing.T) {
			c := f.client("Bearer "+teamATok, opt)
			ctx := ctxT(t)
			// Inside its namespace it works.
			l := acquire(t, c, "a/"+name)
			if r, err := c.Release(ctx, &lockv1.ReleaseRequest{Key: l.GetKey(), OwnerToken: l.GetOwnerToken()}); err != nil || !r.GetReleased() {
				t.Fatalf("release inside the namespace: %v %v", r, err)
			}
			// Outside, every call is refused, naming the key and only the
			// caller's own prefixes.
			_, err := c.Acquire(ctx, &lockv1.AcquireRequest{Key: "b/job", Ttl: durationpb.New(time.Minute)})
			wantCode(t, "acquire outside", err, connect.CodePermissionDenied, `"b/job"`, `"a/"`)
			if strings.Contains(err.Error(), `"c/"`) || strings.Contains(err.Error(), "multi") || strings.Contains(err.Error(), "admin") {
				t.Fatalf("the refusal names other tokens' namespaces: %v", err)
			}
			_, err = c.Release(ctx, &lockv1.ReleaseRequest{Key: "b/job", OwnerToken: other.GetOwnerToken()})
			wantCode(t, "release outside", err, connect.CodePermissionDenied, `"b/job"`)
			_, err = c.Extend(ctx, &lockv1.ExtendRequest{Key: "b/job", OwnerToken: other.GetOwnerToken(), Ttl: durationpb.New(time.Hour)})
			wantCode(t, "extend outside", err, connect.CodePermissionDenied, `"b/job"`)
			_, err = c.Inspect(ctx, &lockv1.InspectRequest{Key: "b/job"})
			wantCode(t, "inspect outside", err, connect.CodePermissionDenied, `"b/job"`)
			// A set is refused when one of its keys is outside.
			_, err = c.Acquire(ctx, &lockv1.AcquireRequest{Claims: []*lockv1.Claim{{Key: "a/set"}, {Key: "b/job"}}, Ttl: durationpb.New(time.Minute)})
			wantCode(t, "acquire a set with a key outside", err, connect.CodePermissionDenied, `"b/job"`)
			_, err = c.Release(ctx, &lockv1.ReleaseRequest{Keys: []string{"a/set", "b/job"}, OwnerToken: other.GetOwnerToken()})
			wantCode(t, "release a set with a key outside", err, connect.CodePermissionDenied, `"b/job"`)
			_, err = c.Extend(ctx, &lockv1.ExtendRequest{Keys: []string{"b/job", "a/set"}, OwnerToken: other.GetOwnerToken(), Ttl: durationpb.New(time.Hour)})
			wantCode(t, "extend a set with a key outside", err, connect.CodePermissionDenied, `"b/job"`)
			// "a/" is a string prefix: "ab/x" is not in it.
			_, err = c.Acquire(ctx, &lockv1.AcquireRequest{Key: "ab/x", Ttl: durationpb.New(time.Minute)})
			wantCode(t, "acquire a sibling prefix", err, connect.CodePermissionDenied)
			s, err := c.Watch(ctx, &lockv1.WatchRequest{Target: &lockv1.WatchRequest_Key{Key: "b/job"}})
			if err == nil {
				for s.Receive() {
				}
				err = s.Err()
				s.Close()
			}
			wantCode(t, "watch a key outside", err, connect.CodePermissionDenied, `"b/job"`)
			_, err = c.Proclaim(ctx, &lockv1.ProclaimRequest{Key: "b/job", OwnerToken: other.GetOwnerToken(), Value: "x"})
			wantCode(t, "proclaim outside", err, connect.CodePermissionDenied, `"b/job"`)
			o, err := c.Observe(ctx, &lockv1.ObserveRequest{Key: "b/job"})
			if err == nil {
				for o.Receive() {
				}
				err = o.Err()
				o.Close()
			}
			wantCode(t, "observe a key outside", err, connect.CodePermissionDenied, `"b/job"`)
		})
	}
	// The other namespace's lock is untouched.
	ins, err := admin.Inspect(ctxT(t), &lockv1.InspectRequest{Key: "b/job"})
	if err != nil || !ins.GetHeld() || ins.GetState().GetFencingToken() != other.GetFencingToken() {
		t.Fatalf("b/job after refused calls: %v %v", ins, err)
	}
}

func TestUnauthenticated(t *testing.T) {
	f := start(t)
	for name, header := range map[string]string{
		"no header":     "",
		"wrong scheme":  "Basic " + teamATok,
		"empty token":   "Bearer ",
		"unknown token": "Bearer not-a-known-token-0123456789",
		"hash as token": "Bearer " + sum(teamATok),
	} {
		t.Run(name, func(t *testing.T) {
			c := f.client(header)
			ctx := ctxT(t)
			_, err := c.Acquire(ctx, &lockv1.AcquireRequest{Key: "a/x", Ttl: durationpb.New(time.Minute)})
			wantCode(t, "acquire", err, connect.CodeUnauthenticated)
			_, err = c.GetServerInfo(ctx, &lockv1.GetServerInfoRequest{})
			wantCode(t, "server info", err, connect.CodeUnauthenticated)
			s, err := c.Watch(ctx, &lockv1.WatchRequest{})
			if err == nil {
				for s.Receive() {
					t.Fatalf("an unauthenticated watch received %v", s.Msg())
				}
				err = s.Err()
				s.Close()
			}
			wantCode(t, "watch", err, connect.CodeUnauthenticated)
		})
	}
	// A plain-text token in the file works like a hashed one.
	acquire(t, f.client("Bearer "+plainTok), "p/x")
	// Health stays open (load balancers probe it without a token).
	conn, err := grpc.NewClient(f.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc, err := healthpb.NewHealthClient(conn).Check(ctxT(t), &healthpb.HealthCheckRequest{})
	if err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health without a token: %v %v", hc, err)
	}
}

func TestReadOnlyToken(t *testing.T) {
	f := start(t)
	lease := acquire(t, f.client("Bearer "+teamATok), "a/x")
	v := f.client("Bearer " + viewTok)
	ctx := ctxT(t)
	_, err := v.Acquire(ctx, &lockv1.AcquireRequest{Key: "a/y", Ttl: durationpb.New(time.Minute)})
	wantCode(t, "acquire", err, connect.CodePermissionDenied, "read-only")
	_, err = v.Release(ctx, &lockv1.ReleaseRequest{Key: "a/x", OwnerToken: lease.GetOwnerToken()})
	wantCode(t, "release", err, connect.CodePermissionDenied, "read-only")
	_, err = v.Extend(ctx, &lockv1.ExtendRequest{Key: "a/x", OwnerToken: lease.GetOwnerToken(), Ttl: durationpb.New(time.Hour)})
	wantCode(t, "extend", err, connect.CodePermissionDenied, "read-only")
	_, err = v.Proclaim(ctx, &lockv1.ProclaimRequest{Key: "a/x", OwnerToken: lease.GetOwnerToken(), Value: "x"})
	wantCode(t, "proclaim", err, connect.CodePermissionDenied, "read-only")
	if ins, err := v.Inspect(ctx, &lockv1.InspectRequest{Key: "a/x"}); err != nil || !ins.GetHeld() {
		t.Fatalf("inspect: %v %v", ins, err)
	}
	if l, err := v.List(ctx, &lockv1.ListRequest{}); err != nil || len(l.GetLocks()) != 1 {
		t.Fatalf("list: %v %v", l, err)
	}
}

// listAll reads every page of a List.
func listAll(t *testing.T, c lockv1connect.LockServiceClient, prefix string, pageSize uint32) ([]string, error) {
	t.Helper()
	var keys []string
	tok := ""
	for range 100 {
		r, err := c.List(ctxT(t), &lockv1.ListRequest{Prefix: prefix, PageSize: pageSize, PageToken: tok})
		if err != nil {
			return nil, err
		}
		for _, s := range r.GetLocks() {
			keys = append(keys, s.GetKey())
		}
		if tok = r.GetNextPageToken(); tok == "" {
			slices.Sort(keys)
			return keys, nil
		}
	}
	t.Fatal("List pages never ended")
	return nil, nil
}

func TestListShowsOnlyTheNamespaces(t *testing.T) {
	f := start(t)
	admin := f.client("Bearer " + adminTok)
	for _, k := range []string{"a/1", "a/2", "ab/1", "b/1", "c/1", "d/1"} {
		acquire(t, admin, k)
	}
	teamA := f.client("Bearer " + teamATok)
	multi := f.client("Bearer " + multiTok)
	for _, tc := range []struct {
		name   string
		c      lockv1connect.LockServiceClient
		prefix string
		want   []string
	}{
		{"admin sees all", admin, "", []string{"a/1", "a/2", "ab/1", "b/1", "c/1", "d/1"}},
		{"inside the namespace", teamA, "a/1", []string{"a/1"}},
		{"the namespace itself", teamA, "a/", []string{"a/1", "a/2"}},
		{"wider than one namespace: narrowed", teamA, "", []string{"a/1", "a/2"}},
		{"wider than one namespace, not ab/", teamA, "a", []string{"a/1", "a/2"}},
		{"wider than two namespaces: filtered", multi, "", []string{"a/1", "a/2", "c/1"}},
	} {
		for _, size := range []uint32{0, 1} {
			keys, err := listAll(t, tc.c, tc.prefix, size)
			if err != nil || !slices.Equal(keys, tc.want) {
				t.Fatalf("%s (page size %d): %v %v, want %v", tc.name, size, keys, err, tc.want)
			}
		}
	}
	_, err := listAll(t, teamA, "b/", 0)
	wantCode(t, "list outside", err, connect.CodePermissionDenied, `"b/"`, `"a/"`)
	_, err = listAll(t, multi, "d", 0)
	wantCode(t, "list outside", err, connect.CodePermissionDenied, `"d"`, `"a/", "c/"`)
}

func TestWatchShowsOnlyTheNamespaces(t *testing.T) {
	f := start(t)
	admin := f.client("Bearer " + adminTok)
	ctx := ctxT(t)
	for name, tc := range map[string]struct {
		tok    string
		target *lockv1.WatchRequest
		want   []string // keys of the events seen, in order
	}{
		"narrowed to one namespace": {teamATok, &lockv1.WatchRequest{}, []string{"a/w1"}},
		"filtered to two":           {multiTok, &lockv1.WatchRequest{Target: &lockv1.WatchRequest_Prefix{Prefix: ""}}, []string{"a/w2", "c/w2"}},
		"inside the namespace":      {teamATok, &lockv1.WatchRequest{Target: &lockv1.WatchRequest_Prefix{Prefix: "a/w"}}, []string{"a/w3"}},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := f.client("Bearer "+tc.tok).Watch(ctx, tc.target)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if !s.Receive() || s.Msg().GetType() != lockv1.EventType_EVENT_TYPE_SYNCED {
				t.Fatalf("first message: %v %v", s.Msg(), s.Err())
			}
			// Events outside come first: a leak would be received first.
			suffix := map[string]string{"narrowed to one namespace": "1", "filtered to two": "2", "inside the namespace": "3"}[name]
			for _, k := range []string{"b/w", "ab/w", "d/w", "a/w", "c/w"} {
				acquire(t, admin, k+suffix)
			}
			for _, want := range tc.want {
				if !s.Receive() {
					t.Fatalf("watch ended: %v", s.Err())
				}
				if got := s.Msg().GetState().GetKey(); got != want || s.Msg().GetType() != lockv1.EventType_EVENT_TYPE_ACQUIRED {
					t.Fatalf("event %v, want acquired %s", s.Msg(), want)
				}
			}
		})
	}
	s, err := f.client("Bearer "+teamATok).Watch(ctx, &lockv1.WatchRequest{Target: &lockv1.WatchRequest_Prefix{Prefix: "b/"}})
	if err == nil {
		for s.Receive() {
			t.Fatalf("a watch outside the namespace received %v", s.Msg())
		}
		err = s.Err()
		s.Close()
	}
	wantCode(t, "watch outside", err, connect.CodePermissionDenied, `"b/"`)
}
