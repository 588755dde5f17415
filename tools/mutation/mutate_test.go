package main

import (
	"bytes"
	"errors"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every operator makes the mutants it names, each of which still parses,
// with IDs that tell them apart; skipped functions are left alone.
func TestMutantsOfASample(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("testdata", "sample.go.txt"))
	if err != nil {
		t.Fatal(err)
	}
	ms, err := mutants("sample.go", src, scope{skip: map[string]bool{"skipped": true}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, m := range ms {
		if _, dup := got[m.ID]; dup {
			t.Errorf("two mutants with ID %s", m.ID)
		}
		got[m.ID] = m.Mutated
		out := m.apply(src)
		if _, err := parser.ParseFile(token.NewFileSet(), "m.go", out, 0); err != nil {
			t.Errorf("%s does not parse: %v\n%s", m.ID, err, out)
		}
		if bytes.Equal(out, src) {
			t.Errorf("%s changes nothing", m.ID)
		}
		if m.Func == "skipped" {
			t.Errorf("a mutant of a skipped function: %s", m.ID)
		}
	}
	for id, mutated := range map[string]string{
		`sample.go store.put boundary "v < 0"#1`:                               "v <= 0",
		`sample.go store.put negate-cmp "v < 0"#1`:                             "v >= 0",
		`sample.go store.put negate-cmp "k == \"\""#1`:                         `k != ""`,
		`sample.go store.put and-or "v < 0 || k == \"\""#1`:                    `v < 0 && k == ""`,
		`sample.go store.put flip-bool "false"#1`:                              "true",
		`sample.go store.put drop-write "s.items[k] = v"#1`:                    dropped,
		`sample.go store.put drop-write "s.n++"#1`:                             dropped,
		`sample.go store.put off-by-one "s.last+1"#1`:                          "s.last",
		`sample.go store.put min-max "max(s.last+1, uint64(v))"#1`:             "min(s.last+1, uint64(v))",
		`sample.go store.put drop-not "!s.full()"#1`:                           "s.full()",
		`sample.go store.full boundary "len(s.items) >= 10"#1`:                 "len(s.items) > 10",
		`sample.go store.put drop-write "s.last = max(s.last+1, uint64(v))"#1`: dropped,
	} {
		if got[id] != mutated {
			t.Errorf("mutant %s = %q, want %q (mutants: %v)", id, got[id], mutated, ids(ms))
		}
	}
	// Locking is never left out: the mutant would deadlock or race.
	for _, m := range ms {
		if strings.Contains(m.Original, "Lock()") {
			t.Errorf("a mutant of the locking: %s", m.ID)
		}
	}
}

func ids(ms []mutant) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.ID)
	}
	return out
}

// A smoke of the whole pipeline: one mutant of the example backend (its
// release no longer compares the owner token) is built with an overlay and
// killed by the owner-token specs of holdfast-conformance.
func TestDriverKillsAMutant(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	bin := os.Getenv("HOLDFAST_BIN_DIR")
	if bin == "" {
		bin = filepath.Join(root, "bin")
	}
	if _, err := os.Stat(filepath.Join(bin, "holdfast-conformance")); errors.Is(err, os.ErrNotExist) {
		if os.Getenv("HOLDFAST_REQUIRE_SERVICES") == "1" {
			t.Fatalf("%s/holdfast-conformance is missing: run make build", bin)
		}
		t.Skipf("%s/holdfast-conformance is missing: run make build", bin)
	}
	report := filepath.Join(t.TempDir(), "mutation.md")
	var stdout, stderr bytes.Buffer
	code := run([]string{"-repo", root, "-bin", bin, "-targets", "example", "-only", `Store.Release drop-not "!holds(l, req.OwnerToken)"`,
		"-label-filter", "owner-token", "-j", "1", "-report", report}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, &stdout, &stderr)
	}
	if !strings.Contains(stdout.String(), "mutation example: 1 mutants: 1 killed") {
		t.Fatalf("the mutant was not killed:\n%s\n%s", &stdout, &stderr)
	}
	b, err := os.ReadFile(report)
	if err != nil || !strings.Contains(string(b), "| `drop-not` | plugins/example/example.go:") || !strings.Contains(string(b), "owner token") {
		t.Fatalf("report %v:\n%s", err, b)
	}
}
