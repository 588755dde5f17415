package abuse

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// selfSigned writes a certificate for 127.0.0.1 and its key, and returns
// their paths and a pool that trusts it.
func selfSigned(t *testing.T) (cert, key string, pool *x509.CertPool) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "abuse-test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cert, key = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	parsed, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(parsed)
	return cert, key, pool
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
