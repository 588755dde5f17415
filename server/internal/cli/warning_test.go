package cli

import (
	"bytes"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"
)

// A server reachable from the network with neither TLS nor tokens says so
// at start-up (as the container image's does, on 0.0.0.0); loopback, TLS or
// tokens keep it quiet.
func TestWarnsWhenOpenToTheNetwork(t *testing.T) {
	const warning = "serving without TLS or tokens on a non-loopback address"
	dir := t.TempDir()
	tokens := dir + "/tokens.yaml"
	if err := os.WriteFile(tokens, []byte("- name: a\n  token: a-token-of-sixteen-chars\n  prefixes: [\"\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		o    serveOptions
		warn bool
	}{
		"all interfaces, open":   {serveOptions{addr: "0.0.0.0:7410"}, true},
		"any address, open":      {serveOptions{addr: ":7410"}, true},
		"loopback, open":         {serveOptions{addr: "127.0.0.1:7410"}, false},
		"all interfaces, tokens": {serveOptions{addr: "0.0.0.0:7410", authTokens: tokens}, false},
	} {
		t.Run(name, func(t *testing.T) {
			var logs bytes.Buffer
			tc.o.maxWait = time.Minute
			if _, err := security(tc.o, slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(logs.String(), "level=WARN msg=\""+warning); got != tc.warn {
				t.Fatalf("warned=%t, want %t; logs:\n%s", got, tc.warn, logs.String())
			}
		})
	}
}
