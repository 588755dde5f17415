package cli

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"connectrpc.com/grpchealth"

	"github.com/holdfast/holdfast/harness"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
)

// healthServer serves grpc.health.v1 (connect's grpchealth, as holdfast
// serve does) over TLS with a certificate for 127.0.0.1 and localhost, and
// returns its URL, the CA's PEM file and the checker to flip.
func healthServer(t *testing.T) (string, string, *grpchealth.StaticChecker) {
	t.Helper()
	checker := grpchealth.NewStaticChecker(lockv1connect.LockServiceName)
	mux := http.NewServeMux()
	mux.Handle(grpchealth.NewHandler(checker))
	ca := harness.NewCA(t, "health test CA")
	leaf := ca.Issue(t, "holdfast", true)
	srv := httptest.NewUnstartedServer(mux)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{leaf.TLS}}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake below
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL, harness.WriteFile(t, t.TempDir(), "ca.pem", ca.PEM), checker
}

func runHealth(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(context.Background(), "test", append([]string{"health"}, args...), &out, &errb)
	return code, strings.TrimSpace(out.String()), errb.String()
}

func TestHealth(t *testing.T) {
	url, caFile, checker := healthServer(t)
	tls := []string{"--server", url, "--ca-cert", caFile}

	if code, out, errs := runHealth(t, tls...); code != ExitOK || out != "SERVING" {
		t.Fatalf("serving: exit %d, out %q, err %q", code, out, errs)
	}
	if code, out, _ := runHealth(t, append(tls, "-o", "json")...); code != ExitOK || !strings.Contains(out, `"status": "SERVING"`) {
		t.Fatalf("serving, json: exit %d, out %q", code, out)
	}

	checker.SetStatus(lockv1connect.LockServiceName, grpchealth.StatusNotServing)
	if code, out, _ := runHealth(t, tls...); code != ExitUnavailable || out != "NOT_SERVING" {
		t.Fatalf("not serving: exit %d, out %q; want %d, NOT_SERVING", code, out, ExitUnavailable)
	}
	// A liveness probe passes on any answer.
	if code, out, _ := runHealth(t, append(tls, "--live")...); code != ExitOK || out != "NOT_SERVING" {
		t.Fatalf("not serving, --live: exit %d, out %q; want 0", code, out)
	}
	// The whole server's status is its own entry.
	if code, out, _ := runHealth(t, append(tls, "--service", "")...); code != ExitOK || out != "SERVING" {
		t.Fatalf(`--service "": exit %d, out %q`, code, out)
	}

	// The certificate is checked for --tls-server-name, not the host dialed.
	checker.SetStatus(lockv1connect.LockServiceName, grpchealth.StatusServing)
	if code, _, errs := runHealth(t, append(tls, "--tls-server-name", "localhost")...); code != ExitOK {
		t.Fatalf("--tls-server-name localhost (in the certificate): exit %d, err %q", code, errs)
	}
	if code, _, errs := runHealth(t, append(tls, "--tls-server-name", "holdfast.example")...); code != ExitUnavailable || !strings.Contains(errs, "not holdfast.example") {
		t.Fatalf("--tls-server-name holdfast.example (not in the certificate): exit %d, err %q; want %d naming it", code, errs, ExitUnavailable)
	}
	if code, _, errs := runHealth(t, "--server", "http://127.0.0.1:1", "--tls-server-name", "x"); code != ExitError || !strings.Contains(errs, "https://") {
		t.Fatalf("--tls-server-name with http://: exit %d, err %q", code, errs)
	}
}

func TestHealthUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	code, _, errs := runHealth(t, "--server", "http://"+addr)
	if code != ExitUnavailable || !strings.Contains(errs, "cannot reach") {
		t.Fatalf("unreachable: exit %d, err %q; want %d", code, errs, ExitUnavailable)
	}
}
