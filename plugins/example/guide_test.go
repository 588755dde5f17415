package example_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holdfast/holdfast/harness"
)

// The guide (docs/writing-a-backend.md) quotes this package's code. Every
// line of its Go snippets must still be in the sources it quotes, so the
// guide cannot drift from the code that the suite proves.
func TestGuideSnippetsMatchTheCode(t *testing.T) {
	guide, err := os.ReadFile(filepath.Join("..", "..", "docs", "writing-a-backend.md"))
	if err != nil {
		t.Fatal(err)
	}
	var sources strings.Builder
	for _, f := range []string{
		"example.go", "example_test.go", "cmd/holdfast-backend-example/main.go",
		"../../core/backend/backend.go", "../../core/backend/backendserver/serve.go",
	} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			sources.WriteString(strings.TrimSpace(line) + "\n")
		}
	}
	code := sources.String()
	inGo, checked := false, 0
	for i, line := range strings.Split(string(guide), "\n") {
		switch {
		case strings.HasPrefix(line, "```go"):
			inGo = true
			continue
		case strings.HasPrefix(line, "```"):
			inGo = false
			continue
		}
		l := strings.TrimSpace(line)
		if !inGo || l == "" || l == "}" || l == ")" {
			continue
		}
		checked++
		if !strings.Contains(code, l) {
			t.Errorf("docs/writing-a-backend.md:%d: %q is not in the code it quotes", i+1, l)
		}
	}
	if checked < 50 {
		t.Fatalf("checked only %d lines of Go snippets: did the guide's format change?", checked)
	}
}

// Every flag the guide gives holdfast-conformance must be one it accepts.
func TestGuideFlagsExist(t *testing.T) {
	guide, err := os.ReadFile(filepath.Join("..", "..", "docs", "writing-a-backend.md"))
	if err != nil {
		t.Fatal(err)
	}
	cli, err := harness.Binary(t.Context(), t.TempDir(), "holdfast-conformance")
	if err != nil {
		t.Fatal(err)
	}
	help, _ := exec.CommandContext(t.Context(), cli, "backend", "-h").CombinedOutput()
	// The flags of every holdfast-conformance command line in the guide
	// (with its continuation lines).
	flags := map[string]bool{}
	inCommand := false
	for _, line := range strings.Split(string(guide), "\n") {
		if strings.HasPrefix(line, "$ ./bin/holdfast-conformance ") {
			inCommand = true
		}
		if !inCommand {
			continue
		}
		for _, w := range strings.Fields(line) {
			if strings.HasPrefix(w, "--") && !strings.HasPrefix(w, "--ginkgo.") {
				flags[strings.SplitN(w, "=", 2)[0]] = true
			}
		}
		inCommand = strings.HasSuffix(line, "\\")
	}
	for _, f := range []string{"--plugin", "--plugin-opt", "--junit-report", "--label-filter", "--restart-store"} {
		if !flags[f] {
			t.Errorf("the guide no longer mentions %s", f)
		}
	}
	for f := range flags {
		if !strings.Contains(string(help), "  -"+strings.TrimPrefix(f, "--")+" ") && !strings.Contains(string(help), "  -"+strings.TrimPrefix(f, "--")+"\n") {
			t.Errorf("the guide uses %s, which `holdfast-conformance backend -h` does not list:\n%s", f, help)
		}
	}
}
