package cli

import (
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestSecurityOptions(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	// No TLS and no tokens: only the limits, with the derived deadline.
	opts, err := security(serveOptions{addr: "127.0.0.1:0", maxWait: time.Hour, maxWatchStreams: 1, maxWatchStreamsPerConn: 1}, log)
	if err != nil || len(opts) != 1 {
		t.Fatalf("defaults: %d options, %v", len(opts), err)
	}
	for name, tc := range map[string]struct {
		o    serveOptions
		want string
	}{
		"key without cert":         {serveOptions{tlsKey: "k.pem", maxWait: time.Minute}, "--tls-cert and --tls-key go together"},
		"client CA without a cert": {serveOptions{tlsClientCA: "ca.pem", maxWait: time.Minute}, "--tls-cert and --tls-key go together"},
		"deadline below wait":      {serveOptions{maxWait: time.Hour, maxRequestDuration: time.Minute}, "is not above --max-wait"},
		"negative stream limit":    {serveOptions{maxWait: time.Minute, maxWatchStreams: -1}, "must not be negative"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := security(tc.o, log); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:7410": true, "[::1]:7410": true, "localhost:7410": true,
		"0.0.0.0:7410": false, ":7410": false, "10.0.0.1:7410": false, "nonsense": false,
	} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %t, want %t", addr, got, want)
		}
	}
}
