package example_test

import (
	"fmt"
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

// A command of the guide's console examples, with what the guide shows of
// its output.
type guideCommand struct {
	line    int    // in the guide
	command string // as typed, continuation lines joined
	output  []string
}

// guideConsoleBlocks returns the guide's console blocks that run
// holdfast-conformance, each as its commands.
func guideConsoleBlocks(guide string) [][]guideCommand {
	var blocks [][]guideCommand
	var cur []guideCommand
	in, cont := false, false
	for i, line := range strings.Split(guide, "\n") {
		switch {
		case !in && strings.HasPrefix(line, "```console"):
			in, cur = true, nil
			continue
		case in && strings.HasPrefix(line, "```"):
			in = false
			for _, c := range cur {
				if strings.HasPrefix(c.command, "./bin/holdfast-conformance ") {
					blocks = append(blocks, cur)
					break
				}
			}
			continue
		case !in:
			continue
		}
		switch {
		case cont:
			cur[len(cur)-1].command += "\n" + line
		case strings.HasPrefix(line, "$ "):
			cur = append(cur, guideCommand{line: i + 1, command: strings.TrimPrefix(line, "$ ")})
		case len(cur) > 0:
			cur[len(cur)-1].output = append(cur[len(cur)-1].output, line)
		}
		cont = len(cur) > 0 && strings.HasSuffix(line, "\\")
	}
	return blocks
}

// verdictLines are the lines of a holdfast-conformance run that must be as
// the guide prints them: the counts, the verdict, and each spec named as
// failed, passing or not applicable (not the messages: they carry source
// lines).
func verdictLines(output []string) []string {
	var out []string
	for _, l := range output {
		for _, p := range []string{"=== holdfast conformance", "=== PASS", "=== FAIL", "Will run ", "  FAIL  ", "  N/A   ", "  XFAIL "} {
			if strings.HasPrefix(l, p) {
				out = append(out, strings.TrimRight(l, " "))
			}
		}
	}
	return out
}

// Every holdfast-conformance example of the guide runs as the guide shows
// it, from a directory that is not the checkout's root: one of its own, with
// bin/ (the binaries the examples name) and scripts/ linked into it. Its
// counts, verdicts, spec names and exit statuses must be the ones printed.
func TestGuideExamplesRun(t *testing.T) {
	guide, err := os.ReadFile(filepath.Join("..", "..", "docs", "writing-a-backend.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := guideConsoleBlocks(string(guide))
	if len(blocks) < 4 {
		t.Fatalf("found %d console blocks that run holdfast-conformance: did the guide's format change?", len(blocks))
	}
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	binaries := map[string]string{"holdfast-backend-example": pluginBinary(t)}
	for _, name := range []string{"holdfast-conformance", "holdfast-backend-redis"} {
		if binaries[name], err = harness.Binary(t.Context(), t.TempDir(), name); err != nil {
			t.Fatal(err)
		}
	}
	for name, path := range binaries {
		if err := os.Symlink(path, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(root, "scripts"), filepath.Join(dir, "scripts")); err != nil {
		t.Fatal(err)
	}
	for _, block := range blocks {
		t.Run(fmt.Sprintf("line%d", block[0].line), func(t *testing.T) {
			t.Parallel() // each block's runs mostly wait on leases running out
			script := &strings.Builder{}
			if strings.Contains(block[0].command, "scripts/redis.sh") {
				if _, err := exec.LookPath("redis-server"); err != nil {
					harness.SkipOrFail(t, "the example needs redis-server: "+err.Error())
				}
				// Whatever happens, stop the Redis the example starts.
				script.WriteString(`trap '[ -n "${dir:-}" ] && scripts/redis.sh stop "$dir" >/dev/null 2>&1' EXIT` + "\n")
			}
			for i, c := range block {
				fmt.Fprintf(script, "echo '@@@ %d'\n%s\nrc=$?\n", i, strings.ReplaceAll(c.command, "echo $?", "echo $rc"))
			}
			cmd := exec.CommandContext(t.Context(), "bash", "-c", script.String())
			cmd.Dir = dir
			out, _ := cmd.CombinedOutput()
			got := strings.Split("\n"+string(out), "\n@@@ ")
			if len(got) != len(block)+1 {
				t.Fatalf("the example's commands did not all run; output:\n%s", out)
			}
			for i, c := range block {
				_, lines, _ := strings.Cut(got[i+1], "\n")
				actual := strings.Split(lines, "\n")
				want := verdictLines(c.output)
				if strings.HasPrefix(c.command, "echo $?") || strings.HasPrefix(c.command, "grep -c ") {
					want = c.output
				}
				have := map[string]bool{}
				for _, l := range actual {
					have[strings.TrimRight(l, " ")] = true
				}
				for _, w := range want {
					if w = strings.TrimRight(w, " "); w != "" && !have[w] {
						t.Errorf("docs/writing-a-backend.md:%d: `%s` printed no line %q; it printed:\n%s", c.line, firstLine(c.command), w, lines)
					}
				}
			}
		})
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
