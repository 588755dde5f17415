package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/harness"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
)

type withBearer struct {
	tok  string
	next http.RoundTripper
}

func (b withBearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.tok != "" {
		r.Header.Set("Authorization", "Bearer "+b.tok)
	}
	return b.next.RoundTrip(r)
}

// TLS with client certificates, bearer tokens and a stream limit, all from
// the config file and the environment, against the binary.
func TestSecureServe(t *testing.T) {
	dir := t.TempDir()
	ca := harness.NewCA(t, "server CA")
	clients := harness.NewCA(t, "client CA")
	cert, key := harness.WriteLeaf(t, dir, "server", ca.Issue(t, "server", true))
	clientCA := harness.WriteFile(t, dir, "clients.pem", clients.PEM)
	const tok = "e2e-team-a-token-0123456789"
	sum := sha256.Sum256([]byte(tok))
	tokens := harness.WriteFile(t, dir, "tokens.yaml", []byte("- name: team-a\n  sha256: "+hex.EncodeToString(sum[:])+"\n  prefixes: [\"a/\"]\n"))
	cfg := harness.WriteFile(t, dir, "holdfast.yaml", []byte(
		"addr: 127.0.0.1:0\ntls-cert: "+cert+"\ntls-key: "+key+"\ntls_client_ca: "+clientCA+"\n"))
	s := startServer(t, []string{"HOLDFAST_AUTH_TOKENS=" + tokens, "HOLDFAST_MAX_WATCH_STREAMS_PER_CLIENT=1"}, "--config", cfg)
	s.waitStderr(t, "bearer tokens required")

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client := func(tlsCfg *tls.Config, bearer string) (lockv1connect.LockServiceClient, func()) {
		tr := &http.Transport{TLSClientConfig: tlsCfg, ForceAttemptHTTP2: true}
		return lockv1connect.NewLockServiceClient(&http.Client{Transport: withBearer{bearer, tr}}, "https://"+s.addr, connect.WithGRPC()),
			tr.CloseIdleConnections
	}
	withCert := &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{clients.Issue(t, "alice", false).TLS}}

	c, closeC := client(withCert, tok)
	defer closeC()
	r, err := c.Acquire(ctx, &lockv1.AcquireRequest{Key: "a/job", Ttl: durationpb.New(time.Minute)})
	if err != nil || !r.GetAcquired() {
		t.Fatalf("acquire in the namespace: %v %v", r, err)
	}
	_, err = c.Acquire(ctx, &lockv1.AcquireRequest{Key: "b/job", Ttl: durationpb.New(time.Minute)})
	if connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), `"b/job"`) {
		t.Fatalf("acquire outside the namespace: %v, want permission_denied", err)
	}
	anon, closeAnon := client(withCert, "")
	defer closeAnon()
	if _, err := anon.Inspect(ctx, &lockv1.InspectRequest{Key: "a/job"}); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("no token: %v, want unauthenticated", err)
	}
	noCert, closeNoCert := client(&tls.Config{RootCAs: ca.Pool()}, tok)
	defer closeNoCert()
	if _, err := noCert.Inspect(ctx, &lockv1.InspectRequest{Key: "a/job"}); err == nil {
		t.Fatal("served a client without a certificate")
	}

	// One Watch per client (from the environment).
	w, err := c.Watch(ctx, &lockv1.WatchRequest{Target: &lockv1.WatchRequest_Prefix{Prefix: "a/"}})
	if err != nil || !w.Receive() {
		t.Fatalf("watch: %v", err)
	}
	w2, err := c.Watch(ctx, &lockv1.WatchRequest{Target: &lockv1.WatchRequest_Prefix{Prefix: "a/"}})
	if err == nil {
		for w2.Receive() {
		}
		err = w2.Err()
		w2.Close()
	}
	if connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("second watch of one client: %v, want resource_exhausted", err)
	}
	w.Close()
	closeC()

	// A renewed certificate is served from the next handshake on.
	harness.WriteLeaf(t, dir, "server", ca.Issue(t, "server-renewed", true))
	conn, err := tls.Dial("tcp", s.addr, withCert)
	if err != nil {
		t.Fatal(err)
	}
	cn := conn.ConnectionState().PeerCertificates[0].Subject.CommonName
	conn.Close()
	if cn != "server-renewed" {
		t.Fatalf("after renewal the server presents %q", cn)
	}
	s.waitStderr(t, "tls certificate reloaded")
	if err := s.stop(t); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
}

func TestSecurityStartFailures(t *testing.T) {
	dir := t.TempDir()
	ca := harness.NewCA(t, "CA")
	cert, _ := harness.WriteLeaf(t, dir, "server", ca.Issue(t, "server", true))
	badTokens := harness.WriteFile(t, dir, "tokens.yaml", []byte("- name: x\n  token: short\n  prefixes: [a/]\n"))
	pinCfg := harness.WriteFile(t, dir, "pin.yaml", []byte("backend-sha256: "+strings.Repeat("ab", 32)+"\n"))
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"cert without key":              {[]string{"--tls-cert", cert}, "--tls-cert and --tls-key go together"},
		"missing cert":                  {[]string{"--tls-cert", filepath.Join(dir, "nope.crt"), "--tls-key", filepath.Join(dir, "nope.key")}, "no such file"},
		"bad tokens file":               {[]string{"--auth-tokens", badTokens}, "--auth-tokens: auth tokens " + badTokens + ": entry 1 (x): token: 5 characters is too short"},
		"missing tokens file":           {[]string{"--auth-tokens", filepath.Join(dir, "nope.yaml")}, "no such file"},
		"request deadline below wait":   {[]string{"--max-wait", "5m", "--max-request-duration", "1m"}, "--max-request-duration 1m0s is not above --max-wait 5m0s"},
		"checksum pin from config file": {[]string{"--config", pinCfg}, "checksum mismatch"},
	} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(filepath.Join(binDir, "holdfast"), append([]string{"serve", "--addr", "127.0.0.1:0"}, tc.args...)...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("exit: %v, want status 1\n%s", err, stderr.String())
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout %q, want nothing", stdout.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("stderr does not say %q:\n%s", tc.want, stderr.String())
			}
		})
	}
}
