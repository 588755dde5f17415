package holdfast_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// README.md and the scheduled-jobs recipe quote code that runs: every line
// of their Go snippets must be in readme_examples_test.go (run against a
// real server by its tests) or holdfasttest/example_test.go (a user's test
// of their loss handling), so the docs cannot drift from code that works.
func TestDocSnippetsAreTestedCode(t *testing.T) {
	var sources strings.Builder
	for _, f := range []string{"readme_examples_test.go", filepath.Join("holdfasttest", "example_test.go")} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			sources.WriteString(strings.TrimSpace(line) + "\n")
		}
	}
	code := sources.String()
	for _, doc := range []struct {
		path     string
		minLines int
	}{
		{"README.md", 45},
		{filepath.Join("..", "docs", "recipes", "scheduled-jobs.md"), 10},
	} {
		b, err := os.ReadFile(doc.path)
		if err != nil {
			t.Fatal(err)
		}
		inGo, checked := false, 0
		for i, line := range strings.Split(string(b), "\n") {
			switch {
			case strings.HasPrefix(line, "```go"):
				inGo = true
				continue
			case strings.HasPrefix(line, "```"):
				inGo = false
				continue
			}
			l := strings.TrimSpace(line)
			if !inGo || l == "" || l == "}" || l == ")" || l == "})" {
				continue
			}
			checked++
			if !strings.Contains(code, "\n"+l+"\n") {
				t.Errorf("%s:%d: %q is not a line of the tested code it quotes", doc.path, i+1, l)
			}
		}
		if checked < doc.minLines {
			t.Errorf("%s: checked only %d lines of Go snippets: did its format change?", doc.path, checked)
		}
	}
}
