package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestResolveBackend(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p, err := resolveBackend("memory")
	if err != nil || p.path != self || strings.Join(p.args, " ") != "backend memory" {
		t.Fatalf("memory: %+v %v, want this executable as its own plugin", p, err)
	}

	dir := t.TempDir()
	exe := filepath.Join(dir, "holdfast-backend-fromPATH")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	if p, err := resolveBackend("fromPATH"); err != nil || p.path != exe || p.name != "fromPATH" {
		t.Fatalf("by name from PATH: %+v %v", p, err)
	}
	if p, err := resolveBackend(exe); err != nil || p.path != exe || len(p.args) != 0 {
		t.Fatalf("by path: %+v %v", p, err)
	}
	if _, err := resolveBackend("nope"); err == nil || !strings.Contains(err.Error(), "no holdfast-backend-nope next to") {
		t.Fatalf("unknown name: %v", err)
	}
	if _, err := resolveBackend("./does/not/exist"); err == nil {
		t.Fatal("a missing path was accepted")
	}
}

func TestParseBackendOpts(t *testing.T) {
	m, err := parseBackendOpts([]string{"endpoints=a:1,b:2", "dsn=postgres://u@h/db?x=y", "empty="})
	if err != nil || m["endpoints"] != "a:1,b:2" || m["dsn"] != "postgres://u@h/db?x=y" || m["empty"] != "" {
		t.Fatalf("%v %v", m, err)
	}
	for _, bad := range []string{"novalue", "=v"} {
		if _, err := parseBackendOpts([]string{bad}); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
}

func TestVersionAndBadFlags(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main(context.Background(), "v9.9.9", []string{"version"}, &out, &errb); code != 0 || out.String() != "v9.9.9\n" {
		t.Fatalf("version: code %d out %q err %q", code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	if code := Main(context.Background(), "dev", []string{"serve", "--log-level", "loud"}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), "--log-level") || out.Len() != 0 {
		t.Fatalf("bad log level: code %d out %q err %q", code, out.String(), errb.String())
	}
	errb.Reset()
	if code := Main(context.Background(), "dev", []string{"serve", "--max-ttl", "forever"}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), "max-ttl") {
		t.Fatalf("bad duration: code %d err %q", code, errb.String())
	}
}

// --compression takes none or gzip, from the command line or from
// HOLDFAST_COMPRESSION; anything else refuses to start, naming the choices.
func TestCompressionFlag(t *testing.T) {
	const want = `--compression: "zstd" is not none or gzip`
	var out, errb bytes.Buffer
	if code := Main(context.Background(), "dev", []string{"serve", "--compression", "zstd"}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), want) {
		t.Fatalf("--compression zstd: code %d err %q, want %q", code, errb.String(), want)
	}
	errb.Reset()
	t.Setenv("HOLDFAST_COMPRESSION", "zstd")
	if code := Main(context.Background(), "dev", []string{"serve"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), want) {
		t.Fatalf("HOLDFAST_COMPRESSION=zstd: code %d err %q, want %q", code, errb.String(), want)
	}
}
