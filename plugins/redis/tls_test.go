package redis_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/holdfast/holdfast/harness"
	"github.com/holdfast/holdfast/plugins/redis"
	"github.com/holdfast/holdfast/plugins/redis/redistest"
)

// TestTLS: a Redis serving TLS only, requiring client certificates. The
// backend connects with tls_ca/tls_cert/tls_key; without TLS, without a
// client certificate, or without trusting the CA, start-up fails clearly.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	files := harness.WriteMutualTLS(t, dir)
	srv := redistest.StartTLS(t, "--tls-cert-file", files.ServerCertFile, "--tls-key-file", files.ServerKeyFile,
		"--tls-ca-cert-file", files.CAFile, "--tls-auth-clients", "yes")

	b := open(t, srv.Addr, "tls_ca", files.CAFile, "tls_cert", files.ClientCertFile, "tls_key", files.ClientKeyFile)
	if r := acquire(t, b, "tls", token(), time.Second); !r.Acquired {
		t.Fatal("not acquired over TLS")
	}
	watch(t, b, "tls")

	for name, opts := range map[string]map[string]string{
		"plain TCP to a TLS port": {},
		"no client certificate":   {"tls_ca": files.CAFile},
		"CA not trusted":          {"tls": "true", "tls_cert": files.ClientCertFile, "tls_key": files.ClientKeyFile},
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
