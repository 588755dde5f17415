package redis_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/holdfast/holdfast/plugins/redis"
	"github.com/holdfast/holdfast/plugins/redis/redistest"
)

// writeCert issues a certificate signed by parent (self-signed when parent
// is nil) and writes it and its key as PEM files in dir.
func writeCert(t *testing.T, dir, name string, tmpl *x509.Certificate, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	kder, _ := x509.MarshalECPrivateKey(key)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, name+".pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	must(os.WriteFile(filepath.Join(dir, name+"-key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600))
	return cert, key
}

// TestTLS: a Redis serving TLS only, requiring client certificates. The
// backend connects with tls_ca/tls_cert/tls_key; without TLS, without a
// client certificate, or without trusting the CA, start-up fails clearly.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	ca, caKey := writeCert(t, dir, "ca", &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "holdfast test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}, nil, nil)
	writeCert(t, dir, "server", &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca, caKey)
	writeCert(t, dir, "client", &x509.Certificate{
		SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "holdfast"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, caKey)
	p := func(name string) string { return filepath.Join(dir, name) }
	srv := redistest.StartTLS(t, "--tls-cert-file", p("server.pem"), "--tls-key-file", p("server-key.pem"),
		"--tls-ca-cert-file", p("ca.pem"), "--tls-auth-clients", "yes")

	b := open(t, srv.Addr, "tls_ca", p("ca.pem"), "tls_cert", p("client.pem"), "tls_key", p("client-key.pem"))
	if r := acquire(t, b, "tls", token(), time.Second); !r.Acquired {
		t.Fatal("not acquired over TLS")
	}
	watch(t, b, "tls")

	for name, opts := range map[string]map[string]string{
		"plain TCP to a TLS port": {},
		"no client certificate":   {"tls_ca": p("ca.pem")},
		"CA not trusted":          {"tls": "true", "tls_cert": p("client.pem"), "tls_key": p("client-key.pem")},
	} {
		opts["addrs"] = srv.Addr
		opts["dial_timeout"] = "1s"
		opts["op_timeout"] = "1s"
		start := time.Now()
		_, err := redis.Open(context.Background(), opts)
		if err == nil || !strings.Contains(err.Error(), srv.Addr) || (name == "plain TCP to a TLS port" && !strings.Contains(err.Error(), "tls=true")) {
			t.Errorf("%s: err = %v, want a start-up error naming %s", name, err, srv.Addr)
		}
		if d := time.Since(start); d > 6*time.Second {
			t.Errorf("%s: took %s to fail", name, d)
		}
		t.Logf("%s: %v", name, err)
	}
}
