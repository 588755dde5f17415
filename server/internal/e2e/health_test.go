package e2e

import (
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holdfast/holdfast/harness"
)

// TestHealthCommandProbesAServer: `holdfast health` as a probe runs it
// against a TLS server with client certificates: dialing 127.0.0.1 and
// checking the certificate for a name, with the probe's own certificate.
func TestHealthCommandProbesAServer(t *testing.T) {
	dir := t.TempDir()
	ca := harness.NewCA(t, "server CA")
	clients := harness.NewCA(t, "client CA")
	cert, key := harness.WriteLeaf(t, dir, "server", ca.Issue(t, "server", true))
	probeCert, probeKey := harness.WriteLeaf(t, dir, "probe", clients.Issue(t, "probe", false))
	caFile := harness.WriteFile(t, dir, "ca.pem", ca.PEM)
	s := startServer(t, nil, "--addr", "127.0.0.1:0", "--tls-cert", cert, "--tls-key", key,
		"--tls-client-ca", harness.WriteFile(t, dir, "clients.pem", clients.PEM))

	health := func(args ...string) (int, string) {
		cmd := exec.Command(filepath.Join(binDir, "holdfast"), append([]string{"health", "--server", "https://" + s.addr, "--ca-cert", caFile}, args...)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		return cmd.ProcessState.ExitCode(), strings.TrimSpace(out.String() + errb.String())
	}
	if code, out := health("--client-cert", probeCert, "--client-key", probeKey, "--tls-server-name", "localhost"); code != 0 || out != "SERVING" {
		t.Fatalf("probe with a client certificate: exit %d, %q; want 0, SERVING", code, out)
	}
	// Without a client certificate the handshake fails: not healthy.
	if code, out := health("--tls-server-name", "localhost"); code == 0 {
		t.Fatalf("probe without a client certificate: exit 0, %q", out)
	}
	if err := s.stop(t); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
}
