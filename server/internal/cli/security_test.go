package cli

import (
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holdfast/holdfast/server/internal/config"
	"github.com/holdfast/holdfast/server/internal/httpserver"
)

func TestSecurityOptions(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	// No TLS and no tokens: only the limits (the interceptors, with the
	// derived deadline, and the connection-level bounds).
	opts, err := security(serveOptions{addr: "127.0.0.1:0", maxWait: time.Hour, maxWatchStreams: 1, maxWatchStreamsPerClient: 1}, log)
	if err != nil || len(opts) != 2 {
		t.Fatalf("defaults: %d options, %v", len(opts), err)
	}
	for name, tc := range map[string]struct {
		o    serveOptions
		want string
	}{
		"key without cert":         {serveOptions{tlsKey: "k.pem", maxWait: time.Minute}, "--tls-cert and --tls-key go together"},
		"client CA without a cert": {serveOptions{tlsClientCA: "ca.pem", maxWait: time.Minute}, "--tls-cert and --tls-key go together"},
		"deadline below wait":      {serveOptions{maxWait: time.Hour, maxRequestDuration: time.Minute}, "is not above --max-wait"},
		"negative stream limit":    {serveOptions{maxWait: time.Minute, maxWatchStreams: -1}, "--max-watch-streams: -1 is negative"},
		"negative lock limit":      {serveOptions{maxWait: time.Minute, maxLocksPerClient: -1}, "--max-locks-per-client: -1 is negative"},
		"empty CORS origin":        {serveOptions{maxWait: time.Minute, corsOrigins: []string{""}}, "--cors-origin: empty origin"},
		"negative body timeout":    {serveOptions{maxWait: time.Minute, conn: httpserver.Limits{BodyTimeout: -time.Second}}, "--body-timeout: -1s is negative"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := security(tc.o, log); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// The per-connection spellings still work, with a warning, and now count
// per client.
func TestDeprecatedPerConnectionFlags(t *testing.T) {
	cmd := newServe("test", io.Discard, io.Discard)
	fs := cmd.Flags()
	if err := fs.Parse([]string{"--max-waiters-per-connection", "7"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"HOLDFAST_MAX_WATCH_STREAMS_PER_CONNECTION": "3"}
	if err := config.Apply(fs, "", func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	o := serveOptions{}
	o.maxWaitersPerClient, _ = fs.GetInt("max-waiters-per-client")
	o.oldMaxWaitersPerConn, _ = fs.GetInt("max-waiters-per-connection")
	o.maxWatchStreamsPerClient, _ = fs.GetInt("max-watch-streams-per-client")
	o.oldMaxWatchStreamsPerConn, _ = fs.GetInt("max-watch-streams-per-connection")
	deprecatedFlags(&o, slog.New(slog.NewTextHandler(&logs, nil)))
	if o.maxWaitersPerClient != 7 || o.maxWatchStreamsPerClient != 3 {
		t.Fatalf("per client: %d waiters, %d streams; want 7 and 3", o.maxWaitersPerClient, o.maxWatchStreamsPerClient)
	}
	for _, want := range []string{"--max-waiters-per-connection is deprecated: use --max-waiters-per-client", "--max-watch-streams-per-connection is deprecated"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log does not say %q:\n%s", want, logs.String())
		}
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
	if err != nil || len(opts) != 3 {
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
