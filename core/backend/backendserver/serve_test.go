package backendserver

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestParseOptions(t *testing.T) {
	opts, err := parseOptions(`{"endpoints":"a,b","prefix":"/x"}`)
	if err != nil || opts["endpoints"] != "a,b" || len(opts) != 2 {
		t.Fatalf("parseOptions = %v, %v", opts, err)
	}
	if opts, err := parseOptions(""); err != nil || len(opts) != 0 {
		t.Fatalf("empty: %v, %v", opts, err)
	}
	if _, err := parseOptions(`{"n":1}`); err == nil {
		t.Fatal("a non-string value was accepted")
	}
}

func TestHCLogHandlerFormat(t *testing.T) {
	var buf bytes.Buffer
	slog.New(newHCLogHandler(&buf, slog.LevelDebug)).Warn("disk slow", "ms", 12)
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatal(err)
	}
	if line["@level"] != "warn" || line["@message"] != "disk slow" || line["ms"] != float64(12) {
		t.Fatalf("line = %s", buf.String())
	}
	if _, ok := line["@timestamp"].(string); !ok {
		t.Fatalf("no @timestamp: %s", buf.String())
	}
}

// A plugin that imports backendserver (and with it core/backend) serves
// nothing on http.DefaultServeMux: its profiles, when the host asks for
// them, are on a listener and a mux of their own.
func TestNothingOnDefaultServeMux(t *testing.T) {
	for _, path := range []string{"/", "/debug/pprof/", "/debug/pprof/heap", "/debug/vars"} {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		if _, pattern := http.DefaultServeMux.Handler(req); pattern != "" {
			t.Errorf("http.DefaultServeMux serves %s (pattern %q)", path, pattern)
		}
	}
}
