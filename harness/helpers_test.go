package harness_test

import (
	"crypto/tls"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/holdfast/holdfast/harness"
)

func TestTailKeepsTheLastBytes(t *testing.T) {
	tail := harness.NewTail(8)
	fmt.Fprint(tail, "0123456789")
	fmt.Fprint(tail, "ab")
	if got := tail.String(); got != "456789ab" {
		t.Fatalf("tail %q, want the last 8 bytes", got)
	}
}

// fakeT records what SkipOrFail does.
type fakeT struct{ skipped, failed string }

func (*fakeT) Helper()                          {}
func (f *fakeT) Skipf(format string, a ...any)  { f.skipped = fmt.Sprintf(format, a...) }
func (f *fakeT) Fatalf(format string, a ...any) { f.failed = fmt.Sprintf(format, a...) }

func TestSkipOrFail(t *testing.T) {
	t.Setenv(harness.RequireServicesEnv, "")
	var f fakeT
	harness.SkipOrFail(&f, "no etcd")
	if !strings.HasPrefix(f.skipped, "no etcd") || f.failed != "" {
		t.Fatalf("without %s: %+v, want a skip", harness.RequireServicesEnv, f)
	}
	t.Setenv(harness.RequireServicesEnv, "1")
	f = fakeT{}
	harness.SkipOrFail(&f, "no etcd")
	if !strings.HasPrefix(f.failed, "no etcd") || f.skipped != "" {
		t.Fatalf("with %s=1: %+v, want a failure", harness.RequireServicesEnv, f)
	}
}

func TestOptionsFromEnv(t *testing.T) {
	t.Setenv("HARNESS_TEST_A", "a-value")
	opts, err := harness.OptionsFromEnv(map[string]string{"a": "HARNESS_TEST_A"})
	if err != nil || opts["a"] != "a-value" {
		t.Fatalf("%v %v", opts, err)
	}
	os.Unsetenv("HARNESS_TEST_MISSING")
	if _, err := harness.OptionsFromEnv(map[string]string{"a": "HARNESS_TEST_A", "b": "HARNESS_TEST_MISSING"}); err == nil ||
		!strings.Contains(err.Error(), "HARNESS_TEST_MISSING") {
		t.Fatalf("a missing variable: %v", err)
	}
}

func TestFencedResource(t *testing.T) {
	var r harness.FencedResource
	if !r.Enter(5) {
		t.Fatal("a first token was refused")
	}
	r.Leave()
	if r.Enter(5) {
		t.Fatal("a repeated token was accepted")
	}
	r.Leave()
	var wg sync.WaitGroup
	r.Enter(7)
	wg.Go(func() { r.Enter(8); r.Leave() }) // inside while 7 holds: an overlap
	wg.Wait()
	r.Leave()
	if w, rej, ov := r.Counts(); w != 3 || rej != 1 || ov != 1 {
		t.Fatalf("counts writes=%d rejected=%d overlaps=%d, want 3 1 1", w, rej, ov)
	}
}

// A server certificate of the CA is trusted by a client of the CA, and the
// client certificate by a server that requires it.
func TestMutualTLS(t *testing.T) {
	ca := harness.NewCA(t, "test CA")
	srv, cli := ca.Issue(t, "server", true), ca.Issue(t, "client", false)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{srv.TLS}, ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			err = c.(*tls.Conn).Handshake()
			c.Close()
		}
		accepted <- err
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{cli.TLS}})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
	files := harness.WriteMutualTLS(t, t.TempDir())
	if _, err := tls.LoadX509KeyPair(files.ServerCertFile, files.ServerKeyFile); err != nil {
		t.Fatal(err)
	}
	if _, err := tls.LoadX509KeyPair(files.ClientCertFile, files.ClientKeyFile); err != nil {
		t.Fatal(err)
	}
}
