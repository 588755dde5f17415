package tlsconfig_test

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/holdfast/holdfast/harness"
	"github.com/holdfast/holdfast/server/internal/tlsconfig"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve accepts TLS connections with cfg and completes each handshake,
// until the test ends.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			_ = c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return ln.Addr().String()
}

// dial makes one handshake and returns the server's leaf certificate.
func dial(addr string, cfg *tls.Config) (*tls.ConnectionState, error) {
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	// TLS 1.3: a refused client certificate surfaces at the first read.
	if _, err := c.Read(make([]byte, 1)); err != nil && !strings.Contains(err.Error(), "EOF") {
		return nil, err
	}
	st := c.ConnectionState()
	return &st, nil
}

func TestReloadOnChange(t *testing.T) {
	dir := t.TempDir()
	ca := harness.NewCA(t, "test CA")
	first := ca.Issue(t, "first", true)
	cert, key := harness.WriteLeaf(t, dir, "server", first)
	cfg, _, err := tlsconfig.New(tlsconfig.Files{Cert: cert, Key: key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, cfg)
	client := &tls.Config{RootCAs: ca.Pool(), NextProtos: []string{"h2", "http/1.1"}}
	st, err := dial(addr, client)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.PeerCertificates[0].Subject.CommonName; got != "first" {
		t.Fatalf("served %q, want first", got)
	}
	if st.NegotiatedProtocol != "h2" {
		t.Fatalf("ALPN chose %q, want h2", st.NegotiatedProtocol)
	}

	// Replace both files (atomic renames): the next handshake has the new one.
	second := ca.Issue(t, "second", true)
	harness.WriteLeaf(t, dir, "server", second)
	if st, err = dial(addr, client); err != nil {
		t.Fatal(err)
	}
	if got := st.PeerCertificates[0].Subject.CommonName; got != "second" {
		t.Fatalf("after replacing the files served %q, want second", got)
	}

	// A half-written change (a new certificate with the old key) does not
	// load: the last good pair keeps serving; completing it takes effect.
	third := ca.Issue(t, "third", true)
	harness.WriteFile(t, dir, "server.crt", third.CertPEM)
	if st, err = dial(addr, client); err != nil {
		t.Fatal(err)
	}
	if got := st.PeerCertificates[0].Subject.CommonName; got != "second" {
		t.Fatalf("with a mismatched pair on disk served %q, want the last good (second)", got)
	}
	harness.WriteFile(t, dir, "server.key", third.KeyPEM)
	if st, err = dial(addr, client); err != nil {
		t.Fatal(err)
	}
	if got := st.PeerCertificates[0].Subject.CommonName; got != "third" {
		t.Fatalf("served %q, want third", got)
	}

	// Rewriting a file in place (same inode) is seen too.
	fourth := ca.Issue(t, "fourth", true)
	if err := os.WriteFile(filepath.Join(dir, "server.key"), fourth.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "server.crt"), fourth.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if st, err = dial(addr, client); err != nil {
		t.Fatal(err)
	}
	if got := st.PeerCertificates[0].Subject.CommonName; got != "fourth" {
		t.Fatalf("after an in-place rewrite served %q, want fourth", got)
	}
}

func TestTLS12Minimum(t *testing.T) {
	dir := t.TempDir()
	ca := harness.NewCA(t, "test CA")
	cert, key := harness.WriteLeaf(t, dir, "server", ca.Issue(t, "s", true))
	cfg, _, err := tlsconfig.New(tlsconfig.Files{Cert: cert, Key: key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, cfg)
	if _, err := dial(addr, &tls.Config{RootCAs: ca.Pool(), MaxVersion: tls.VersionTLS11}); err == nil {
		t.Fatal("a TLS 1.1 client was served")
	}
	if _, err := dial(addr, &tls.Config{RootCAs: ca.Pool(), MaxVersion: tls.VersionTLS12}); err != nil {
		t.Fatalf("TLS 1.2: %v", err)
	}
}

func TestClientCertificates(t *testing.T) {
	dir := t.TempDir()
	ca := harness.NewCA(t, "server CA")
	clients := harness.NewCA(t, "client CA")
	cert, key := harness.WriteLeaf(t, dir, "server", ca.Issue(t, "s", true))
	caFile := harness.WriteFile(t, dir, "clients.pem", clients.PEM)
	cfg, _, err := tlsconfig.New(tlsconfig.Files{Cert: cert, Key: key, ClientCA: caFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, cfg)
	if _, err := dial(addr, &tls.Config{RootCAs: ca.Pool()}); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	stranger := harness.NewCA(t, "another CA").Issue(t, "mallory", false)
	if _, err := dial(addr, &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{stranger.TLS}}); err == nil {
		t.Fatal("a client certificate from another CA was accepted")
	}
	good := clients.Issue(t, "alice", false)
	if _, err := dial(addr, &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{good.TLS}}); err != nil {
		t.Fatalf("a client certificate from the client CA: %v", err)
	}
}

func TestStartErrors(t *testing.T) {
	dir := t.TempDir()
	ca := harness.NewCA(t, "test CA")
	cert, key := harness.WriteLeaf(t, dir, "server", ca.Issue(t, "s", true))
	other := harness.WriteFile(t, dir, "other.key", ca.Issue(t, "o", true).KeyPEM)
	notPEM := harness.WriteFile(t, dir, "garbage.pem", []byte("not a certificate"))
	for name, tc := range map[string]struct {
		files tlsconfig.Files
		want  string
	}{
		"cert without key":  {tlsconfig.Files{Cert: cert}, "--tls-cert and --tls-key go together"},
		"missing file":      {tlsconfig.Files{Cert: cert, Key: filepath.Join(dir, "nope.key")}, "no such file"},
		"mismatched key":    {tlsconfig.Files{Cert: cert, Key: other}, "private key does not match"},
		"client CA garbage": {tlsconfig.Files{Cert: cert, Key: key, ClientCA: notPEM}, "no PEM certificate"},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := tlsconfig.New(tc.files, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}
