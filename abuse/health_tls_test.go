package abuse

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/holdfast/holdfast/harness"
)

// selfSigned writes a server certificate for 127.0.0.1 (from a throw-away
// CA) and its key, and returns their paths and a pool that trusts it.
func selfSigned(t *testing.T) (cert, key string, pool *x509.CertPool) {
	t.Helper()
	ca := harness.NewCA(t, "abuse-test CA")
	cert, key = harness.WriteLeaf(t, t.TempDir(), "tls", ca.Issue(t, "abuse-test", true))
	return cert, key, ca.Pool()
}

// Issue 13, item 10: grpc.health.v1.Health/List, which reflection
// advertises, answers; failed TLS handshakes from an unauthenticated peer
// reach the log at a bounded rate, and a normal client keeps its latency
// while they come.
func TestHealthListAndTLSHandshakeFlood(t *testing.T) {
	cert, key, pool := selfSigned(t)
	s := serve(t, "--tls-cert", cert, "--tls-key", key)
	ctx := t.Context()

	conn, err := grpc.NewClient(s.Addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	list, err := healthpb.NewHealthClient(conn).List(ctx, &healthpb.HealthListRequest{})
	expect(t, err == nil && list.GetStatuses()["holdfast.lock.v1.LockService"].GetStatus() == healthpb.HealthCheckResponse_SERVING &&
		list.GetStatuses()[""].GetStatus() == healthpb.HealthCheckResponse_SERVING,
		"health List: %v %v, want both services SERVING", list, err)
	conn.Close()

	p := newProbe(t, s, clientOpts{tls: &tls.Config{RootCAs: pool}}, "probe/")
	idle := p.p50(t)
	handshakeErrors := func() int { return strings.Count(s.Logs(), "TLS handshake error") }
	before := handshakeErrors()

	// 400 connections that fail their handshakes: a plaintext request,
	// then a client that does not trust the certificate.
	const flood = 400
	stop := during(t, func(ctx context.Context) {
		var n atomic.Int64
		loop(ctx, 4, func(ctx context.Context, w int) {
			if n.Add(1) > flood {
				<-ctx.Done()
				return
			}
			c, err := dialer("127.0.0.2").DialContext(ctx, "tcp", s.Addr)
			if err != nil {
				return
			}
			defer c.Close()
			if w%2 == 0 {
				_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
				_, _ = io.Copy(io.Discard, c)
				return
			}
			tc := tls.Client(c, &tls.Config{ServerName: "127.0.0.1"}) // no RootCAs: the system's do not know it
			_ = tc.HandshakeContext(ctx)
		})
	})
	attacked := p.p50(t)
	stop()
	unaffected(t, "10 failed TLS handshakes", idle, attacked, 10)
	logged := handshakeErrors() - before
	t.Logf("failed handshakes logged: %d lines", logged)
	expect(t, logged >= 1 && logged <= 12, "failed handshakes wrote %d log lines, want a few (rate-limited)", logged)

	// Plaintext reflection stays refused on a TLS port: nothing to check
	// beyond the handshake, but a cleartext gRPC client must not be served.
	plain, err := grpc.NewClient(s.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(plain).Check(cctx, &healthpb.HealthCheckRequest{}); err == nil {
		t.Fatal("a cleartext client was served on the TLS port")
	}
}
