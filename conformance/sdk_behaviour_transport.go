package conformance

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/holdfast/holdfast/conformance/sdkrunner"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// docs/sdk-behaviour.md, "Transport": TLS with a custom CA, a client
// certificate (mTLS), a bearer token and extra headers, each through the
// SDK's own option, against a server started with --tls-cert,
// --tls-client-ca and --auth-tokens.
var _ = describeSDK("behaviour table: transport", Label("sdk-behaviour", "transport", "backend-independent"), func(sc *SDKContext) {
	It("transport: TLS with a custom CA, a client certificate (mTLS) and a bearer token reach a server that requires all three; a missing token is unauthenticated, a key outside the token's prefixes permission_denied", Label("disruptive"), func(ctx SpecContext) {
		if !sc.CanStartServers() {
			Skip("the suite tests a server given by address; it needs to start one with TLS and tokens (use Config.Serve)")
		}
		dir := GinkgoT().TempDir()
		pki := newTestPKI(dir)
		const token = "conformance-bearer-token-0123456789"
		sum := sha256.Sum256([]byte(token))
		tokens := filepath.Join(dir, "tokens.yaml")
		Expect(os.WriteFile(tokens, fmt.Appendf(nil, "- name: conformance\n  sha256: %s\n  prefixes: [\"tls/\"]\n", hex.EncodeToString(sum[:])), 0o600)).To(Succeed())
		s, err := sc.StartServerWith(ctx, "--tls-cert", pki.serverCert, "--tls-key", pki.serverKey, "--tls-client-ca", pki.caCert, "--auth-tokens", tokens)
		Expect(err).NotTo(HaveOccurred())
		url := "https://" + s.Addr
		full := sdkrunner.ConnectArgs{Addr: url, CAFile: pki.caCert, CertFile: pki.clientCert, KeyFile: pki.clientKey, BearerToken: token}

		c := sc.ConnectWith(ctx, sc.Adapter, full)
		l := c.MustLock(ctx, "tls/"+sc.Key("sdk-transport"), sc.LongTTL())
		Expect(c.Unlock(ctx, l.Guard)).To(Succeed())

		_, err = c.LockWith(ctx, sdkrunner.LockArgs{Key: "other/" + sc.Key("sdk-transport"), TTLMs: sc.LongTTL().Milliseconds(), Try: true})
		Expect(err).To(BeKind(sdkrunner.KindPermission), "a key outside the token's prefixes")
		Expect(err).To(HaveCode("permission_denied"))

		noToken := full
		noToken.BearerToken = ""
		c = sc.ConnectWith(ctx, sc.Adapter, noToken)
		_, err = c.LockWith(ctx, sdkrunner.LockArgs{Key: "tls/" + sc.Key("sdk-transport"), TTLMs: sc.LongTTL().Milliseconds(), Try: true})
		Expect(err).To(BeKind(sdkrunner.KindUnauthenticated), "no bearer token")
		Expect(err).To(HaveCode("unauthenticated"))

		// Without the client certificate the handshake fails: no answer
		// from the server at all.
		noCert := full
		noCert.CertFile, noCert.KeyFile, noCert.RetryBudgetMs = "", "", 300
		c = sc.ConnectWith(ctx, sc.Adapter, noCert)
		_, err = c.LockWith(ctx, sdkrunner.LockArgs{Key: "tls/" + sc.Key("sdk-transport"), TTLMs: sc.LongTTL().Milliseconds(), Try: true})
		Expect(err).To(HaveOccurred(), "a server requiring client certificates answered a client without one")
		Expect(s.Stop(0)).To(Succeed())
	}, SpecTimeout(time.Minute))

	It("transport: extra headers and the bearer token go with every request", func(ctx SpecContext) {
		p := sc.Proxy(sc.URL)
		c := sc.ConnectWith(ctx, sc.Adapter, sdkrunner.ConnectArgs{Addr: p.URL, BearerToken: "header-check", Headers: map[string]string{"X-Holdfast-Conformance": "yes"}})
		l := c.MustLock(ctx, sc.Key("sdk-headers"), sc.LongTTL())
		Expect(c.Unlock(ctx, l.Guard)).To(Succeed())
		reqs := p.Requests("")
		Expect(reqs).NotTo(BeEmpty())
		for _, r := range reqs {
			Expect(r.Header.Get("X-Holdfast-Conformance")).To(Equal("yes"), "%s without the extra header", r.Method)
			Expect(r.Header.Get("Authorization")).To(Equal("Bearer header-check"), "%s without the bearer token", r.Method)
		}
	}, SpecTimeout(30*time.Second))
})

// testPKI is a CA, a server certificate for 127.0.0.1 and a client
// certificate, as PEM files.
type testPKI struct {
	caCert, serverCert, serverKey, clientCert, clientKey string
}

func newTestPKI(dir string) testPKI {
	GinkgoHelper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	Expect(err).NotTo(HaveOccurred())
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "holdfast conformance CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	Expect(err).NotTo(HaveOccurred())
	ca, err = x509.ParseCertificate(caDER)
	Expect(err).NotTo(HaveOccurred())
	p := testPKI{caCert: filepath.Join(dir, "ca.pem")}
	writePEM(p.caCert, "CERTIFICATE", caDER)
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (string, string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		Expect(err).NotTo(HaveOccurred())
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
			DNSNames:     []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		Expect(err).NotTo(HaveOccurred())
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		Expect(err).NotTo(HaveOccurred())
		certFile, keyFile := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		writePEM(certFile, "CERTIFICATE", der)
		writePEM(keyFile, "PRIVATE KEY", keyDER)
		return certFile, keyFile
	}
	p.serverCert, p.serverKey = leaf("server", 2, x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = leaf("client", 3, x509.ExtKeyUsageClientAuth)
	return p
}

func writePEM(path, typ string, der []byte) {
	GinkgoHelper()
	b := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	Expect(os.WriteFile(path, b, 0o600)).To(Succeed())
}
