package cli

import (
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holdfast/holdfast/server/internal/config"
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
		"empty CORS origin":        {serveOptions{maxWait: time.Minute, corsOrigins: []string{""}}, "--cors-origin: empty origin"},
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

func TestCORSOriginFlag(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	opts, err := security(serveOptions{addr: "127.0.0.1:0", maxWait: time.Hour, corsOrigins: []string{"https://app.example.com"}}, log)
	if err != nil || len(opts) != 2 {
		t.Fatalf("with --cors-origin: %d options (want CORS and the limits), %v", len(opts), err)
	}
	// Like every flag: repeatable on the command line, several values in
	// HOLDFAST_CORS_ORIGIN separated by ";", a list in the config file.
	cmd := newServe("test", io.Discard, io.Discard)
	fs := cmd.Flags()
	if err := fs.Parse([]string{"--cors-origin", "https://a.example.com", "--cors-origin", "https://b.example.com"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := fs.GetStringArray("cors-origin"); !slices.Equal(got, []string{"https://a.example.com", "https://b.example.com"}) {
		t.Fatalf("command line: %q", got)
	}
	cmd = newServe("test", io.Discard, io.Discard)
	fs = cmd.Flags()
	env := map[string]string{"HOLDFAST_CORS_ORIGIN": "https://a.example.com;https://b.example.com"}
	if err := config.Apply(fs, "", func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	if got, _ := fs.GetStringArray("cors-origin"); !slices.Equal(got, []string{"https://a.example.com", "https://b.example.com"}) {
		t.Fatalf("HOLDFAST_CORS_ORIGIN: %q", got)
	}
	if got, _ := newServe("test", io.Discard, io.Discard).Flags().GetStringArray("cors-origin"); len(got) != 0 {
		t.Fatalf("default: %q, want off", got)
	}
}
