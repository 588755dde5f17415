package harness

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Fataler is the part of testing.TB that the certificate helpers need.
type Fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// CA is a throw-away certificate authority for TLS tests (ECDSA P-256,
// valid for an hour).
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEM is the CA certificate, PEM-encoded.
	PEM []byte
}

func serial(t Fataler) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatalf("harness: certificate serial: %v", err)
	}
	return n
}

func newKey(t Fataler) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("harness: key: %v", err)
	}
	return key
}

// NewCA makes a CA named cn.
func NewCA(t Fataler, cn string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("harness: CA certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("harness: CA certificate: %v", err)
	}
	return &CA{Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Pool is a pool holding only the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Leaf is an issued certificate and its key.
type Leaf struct {
	Cert            *x509.Certificate
	CertPEM, KeyPEM []byte
	TLS             tls.Certificate
}

// Issue signs a certificate for cn: a server certificate for 127.0.0.1 and
// localhost when server is true, else a client certificate.
func (ca *CA) Issue(t Fataler, cn string, server bool) *Leaf {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("harness: certificate %s: %v", cn, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("harness: certificate %s: %v", cn, err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatalf("harness: key of %s: %v", cn, err)
	}
	l := &Leaf{
		Cert:    cert,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
	}
	if l.TLS, err = tls.X509KeyPair(l.CertPEM, l.KeyPEM); err != nil {
		t.Fatalf("harness: key pair of %s: %v", cn, err)
	}
	return l
}

// WriteFile replaces dir/name with data atomically (write aside, rename),
// as certificate managers do, and returns its path.
func WriteFile(t Fataler, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatalf("harness: %v", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatalf("harness: %v", err)
	}
	return p
}

// WriteLeaf writes l as dir/name.crt and dir/name.key and returns the paths.
func WriteLeaf(t Fataler, dir, name string, l *Leaf) (cert, key string) {
	t.Helper()
	return WriteFile(t, dir, name+".crt", l.CertPEM), WriteFile(t, dir, name+".key", l.KeyPEM)
}

// MutualTLS is a CA, a server certificate for 127.0.0.1 and a client
// certificate it signed, as PEM files: what a service with client
// certificate authentication (etcd, Redis) and its client need.
type MutualTLS struct {
	CAFile                        string
	ServerCertFile, ServerKeyFile string
	ClientCertFile, ClientKeyFile string
}

// WriteMutualTLS issues a MutualTLS into dir.
func WriteMutualTLS(t Fataler, dir string) MutualTLS {
	t.Helper()
	ca := NewCA(t, "holdfast test CA")
	m := MutualTLS{CAFile: WriteFile(t, dir, "ca.pem", ca.PEM)}
	m.ServerCertFile, m.ServerKeyFile = WriteLeaf(t, dir, "server", ca.Issue(t, "127.0.0.1", true))
	m.ClientCertFile, m.ClientKeyFile = WriteLeaf(t, dir, "client", ca.Issue(t, "holdfast", false))
	return m
}
