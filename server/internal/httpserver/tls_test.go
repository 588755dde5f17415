package httpserver

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/core/engine"
	"github.com/holdfast/holdfast/harness"
	"github.com/holdfast/holdfast/plugins/memory"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
	"github.com/holdfast/holdfast/server/internal/tlsconfig"
)

func startTLS(t *testing.T, files tlsconfig.Files) *Server {
	t.Helper()
	cfg, _, err := tlsconfig.New(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := memory.New()
	e, err := engine.New(context.Background(), b, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := Start("127.0.0.1:0", e, slog.New(slog.DiscardHandler), WithTLS(cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		b.Close()
	})
	return srv
}

func TestTLSServesHTTP2AndNoCleartext(t *testing.T) {
	dir := t.TempDir()
	ca := harness.NewCA(t, "test CA")
	cert, key := harness.WriteLeaf(t, dir, "server", ca.Issue(t, "server", true))
	srv := startTLS(t, tlsconfig.Files{Cert: cert, Key: key})
	base := "https://" + srv.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	// Connect and gRPC over TLS; the transport negotiates h2 by ALPN.
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	var proto string
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := tr.RoundTrip(r)
		if err == nil {
			proto = resp.Proto
		}
		return resp, err
	})}
	for name, opt := range map[string]connect.ClientOption{"grpc": connect.WithGRPC(), "connect": connect.WithProtoJSON()} {
		c := lockv1connect.NewLockServiceClient(hc, base, opt)
		r, err := c.Acquire(ctx, &lockv1.AcquireRequest{Key: "tls/" + name, Ttl: durationpb.New(time.Minute)})
		if err != nil || !r.GetAcquired() {
			t.Fatalf("%s over TLS: %v %v", name, r, err)
		}
		if proto != "HTTP/2.0" {
			t.Fatalf("%s over TLS used %s, want HTTP/2.0", name, proto)
		}
	}
	// grpc-go's own client, with TLS credentials (health stays open).
	conn, err := grpc.NewClient(srv.Addr().String(), grpc.WithTransportCredentials(credentials.NewClientTLSFromCert(ca.Pool(), "")))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("grpc health over TLS: %v %v", resp, err)
	}
	// HTTP/1.1 over TLS too (curl without --http2).
	h1 := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}, TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}
	defer h1.CloseIdleConnections()
	c1 := lockv1connect.NewLockServiceClient(&http.Client{Transport: h1}, base, connect.WithProtoJSON())
	if _, err := c1.Inspect(ctx, &lockv1.InspectRequest{Key: "tls/grpc"}); err != nil {
		t.Fatalf("HTTP/1.1 over TLS: %v", err)
	}

	// Cleartext is not served: neither h2c nor HTTP/1.1 without TLS.
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	h2c := &http.Transport{Protocols: p}
	defer h2c.CloseIdleConnections()
	plain := lockv1connect.NewLockServiceClient(&http.Client{Transport: h2c}, "http://"+srv.Addr().String(), connect.WithGRPC())
	if _, err := plain.Inspect(ctx, &lockv1.InspectRequest{Key: "k"}); err == nil {
		t.Fatal("h2c was served with TLS on")
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestMTLSRefusesClientsWithoutCertificate(t *testing.T) {
	dir := t.TempDir()
	ca := harness.NewCA(t, "server CA")
	clients := harness.NewCA(t, "client CA")
	cert, key := harness.WriteLeaf(t, dir, "server", ca.Issue(t, "server", true))
	srv := startTLS(t, tlsconfig.Files{Cert: cert, Key: key, ClientCA: harness.WriteFile(t, dir, "clients.pem", clients.PEM)})
	base := "https://" + srv.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, cfg := range map[string]*tls.Config{
		"no certificate":      {RootCAs: ca.Pool()},
		"another CA's client": {RootCAs: ca.Pool(), Certificates: []tls.Certificate{harness.NewCA(t, "x").Issue(t, "mallory", false).TLS}},
	} {
		tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}
		c := lockv1connect.NewLockServiceClient(&http.Client{Transport: tr}, base, connect.WithGRPC())
		_, err := c.Acquire(ctx, &lockv1.AcquireRequest{Key: "k", Ttl: durationpb.New(time.Minute)})
		tr.CloseIdleConnections()
		if err == nil {
			t.Fatalf("%s: served", name)
		}
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{clients.Issue(t, "alice", false).TLS}}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	c := lockv1connect.NewLockServiceClient(&http.Client{Transport: tr}, base, connect.WithGRPC())
	if r, err := c.Acquire(ctx, &lockv1.AcquireRequest{Key: "k", Ttl: durationpb.New(time.Minute)}); err != nil || !r.GetAcquired() {
		t.Fatalf("with a client certificate: %v %v", r, err)
	}
}
