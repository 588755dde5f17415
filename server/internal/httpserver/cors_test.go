package httpserver

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holdfast/holdfast/core/engine"
	"github.com/holdfast/holdfast/plugins/memory"
)

const acquirePath = "/holdfast.lock.v1.LockService/Acquire"

// startCORS serves a real engine on a free port with opts.
func startCORS(t *testing.T, opts ...Option) string {
	t.Helper()
	b := memory.New()
	t.Cleanup(func() { _ = b.Close() })
	e, err := engine.New(context.Background(), b, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	srv, err := Start("127.0.0.1:0", e, slog.New(slog.DiscardHandler), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	return "http://" + srv.Addr().String()
}

// do sends one request with a fresh keep-alive-free client, so no idle
// connection outlives the test (goleak).
// answer is what the CORS tests look at of a response: its status and
// headers (the body is closed).
type answer struct {
	StatusCode int
	Header     http.Header
}

func do(t *testing.T, req *http.Request) answer {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return answer{StatusCode: resp.StatusCode, Header: resp.Header}
}

// preflight is what a browser sends before a cross-origin Connect call
// carrying a bearer token.
func preflight(t *testing.T, base, origin string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodOptions, base+acquirePath, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Origin", origin)
	req.Header.Set("Access-Control-Request-Method", "POST")
	req.Header.Set("Access-Control-Request-Headers", "authorization,connect-protocol-version,connect-timeout-ms,content-type") // as browsers send it: lower case, sorted
	return do(t, req)
}

// headerList splits a comma-separated header into lower-case items.
func headerList(h http.Header, name string) []string {
	var out []string
	for _, v := range h.Values(name) {
		for _, item := range strings.Split(v, ",") {
			if item = strings.ToLower(strings.TrimSpace(item)); item != "" {
				out = append(out, item)
			}
		}
	}
	return out
}

var corsHeaders = []string{
	"Access-Control-Allow-Origin", "Access-Control-Allow-Methods", "Access-Control-Allow-Headers",
	"Access-Control-Expose-Headers", "Access-Control-Max-Age", "Access-Control-Allow-Credentials",
}

func noCORSHeaders(t *testing.T, what string, resp answer) {
	t.Helper()
	for _, h := range corsHeaders {
		if v := resp.Header.Get(h); v != "" {
			t.Errorf("%s: %s: %q, want none", what, h, v)
		}
	}
}

func TestCORSPreflightFromAllowedOrigin(t *testing.T) {
	const origin = "https://app.example.com"
	base := startCORS(t, WithCORS(origin, "https://other.example.com"))

	resp := preflight(t, base, origin)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("preflight status %d", resp.StatusCode)
	}
	if got := resp.Header.Get("Access-Control-Allow-Origin"); got != origin {
		t.Errorf("Access-Control-Allow-Origin %q, want %q", got, origin)
	}
	if got := headerList(resp.Header, "Access-Control-Allow-Methods"); !slices.Contains(got, "post") {
		t.Errorf("Access-Control-Allow-Methods %q lacks POST", got)
	}
	allowed := headerList(resp.Header, "Access-Control-Allow-Headers")
	for _, h := range []string{"content-type", "connect-protocol-version", "connect-timeout-ms", "authorization"} {
		if !slices.Contains(allowed, h) {
			t.Errorf("Access-Control-Allow-Headers %q lacks %s", allowed, h)
		}
	}
	if resp.Header.Get("Access-Control-Max-Age") == "" {
		t.Error("no Access-Control-Max-Age: browsers would repeat the preflight before every call")
	}

	// The call itself (Connect, JSON) answers with the origin and exposes
	// the headers gRPC-Web clients read.
	req, err := http.NewRequest(http.MethodPost, base+"/holdfast.lock.v1.LockService/GetServerInfo", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Origin", origin)
	req.Header.Set("Content-Type", "application/json")
	resp = do(t, req)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GetServerInfo status %d", resp.StatusCode)
	}
	if got := resp.Header.Get("Access-Control-Allow-Origin"); got != origin {
		t.Errorf("call: Access-Control-Allow-Origin %q, want %q", got, origin)
	}
	exposed := headerList(resp.Header, "Access-Control-Expose-Headers")
	for _, h := range []string{"grpc-status", "grpc-message", "grpc-status-details-bin"} {
		if !slices.Contains(exposed, h) {
			t.Errorf("Access-Control-Expose-Headers %q lacks %s", exposed, h)
		}
	}
}

func TestCORSDisallowedOriginGetsNoHeaders(t *testing.T) {
	base := startCORS(t, WithCORS("https://app.example.com"))
	resp := preflight(t, base, "https://evil.example.net")
	noCORSHeaders(t, "preflight from a disallowed origin", resp)

	req, err := http.NewRequest(http.MethodPost, base+"/holdfast.lock.v1.LockService/GetServerInfo", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Origin", "https://evil.example.net")
	req.Header.Set("Content-Type", "application/json")
	noCORSHeaders(t, "call from a disallowed origin", do(t, req))
}

func TestCORSOffByDefault(t *testing.T) {
	base := startCORS(t)
	noCORSHeaders(t, "preflight without --cors-origin", preflight(t, base, "https://app.example.com"))
}
