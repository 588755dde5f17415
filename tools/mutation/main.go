// Command holdfast-mutation measures how strong the conformance suite is:
// it makes mutants of the lock logic of plugins/example and plugins/memory
// (a comparison turned round, a condition negated, a +1 dropped, a write
// left out: see mutate.go), builds each into its plugin executable with `go
// build -overlay` (the tree is never touched), runs `holdfast-conformance
// backend` on it, and reports which mutants the suite killed (a spec failed,
// or the run hung) and which survived. A survivor is a gap in the suite
// (then a spec is added), equivalent to the original (the reason in
// equivalent.txt), or a known survivor the suite cannot kill from outside
// the plugin (the reason in survivors.txt); the score is killed / (killed +
// survived), the equivalent ones left out. A survivor with no reason, or an
// entry that a run contradicts or that names no mutant, fails the run.
//
//	holdfast-mutation -repo . -bin bin [-targets example,memory] [-j 2] [-report bin/mutation.md]
//	holdfast-mutation -list                 # the mutants, without running them
//	holdfast-mutation -only 'SUBSTRING' ... # the mutants whose ID contains it
//
// It runs from tools/ (outside go.work) and needs bin/holdfast-conformance
// (make build); `make mutation` runs it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// target is a backend whose lock logic is mutated.
type target struct {
	name string // holdfast-backend-<name>
	file string // the source file mutated, from the repository root
	pkg  string // its plugin's main package, from the repository root
	sc   scope
}

// targets are the backends mutated. Open (option parsing) and Close
// (shutdown) are left alone: the suite sees a plugin that starts, and
// nothing of how it stops; so is memory's Expire, a hook for tests that run
// the backend in their own process, which no plugin call reaches.
var targets = []target{
	{name: "example", file: "plugins/example/example.go", pkg: "./plugins/example/cmd/holdfast-backend-example",
		sc: scope{skip: map[string]bool{"Open": true, "Store.Close": true}}},
	{name: "memory", file: "plugins/memory/memory.go", pkg: "./plugins/memory/cmd/holdfast-backend-memory",
		sc: scope{skip: map[string]bool{"Open": true, "Backend.Close": true, "Backend.Expire": true}}},
}

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("holdfast-mutation", flag.ContinueOnError)
	fs.SetOutput(stderr)
	repo := fs.String("repo", "..", "root of the holdfast checkout")
	bin := fs.String("bin", "", "directory holding holdfast-conformance (default: REPO/bin)")
	names := fs.String("targets", "example,memory", "backends to mutate (comma-separated)")
	only := fs.String("only", "", "run only the mutants whose ID contains this")
	list := fs.Bool("list", false, "list the mutants and exit")
	jobs := fs.Int("j", 2, "mutants run at once")
	timeout := fs.Duration("timeout", 4*time.Minute, "a mutant whose run takes longer is killed (it hung)")
	report := fs.String("report", "", "write the report (Markdown) to this file")
	equivFile := fs.String("equivalent", "", "file of mutants judged equivalent, with the reason (ID<TAB>reason; default: REPO/tools/mutation/equivalent.txt)")
	survFile := fs.String("survivors", "", "file of known survivors, with why the suite cannot kill them (ID<TAB>reason; default: REPO/tools/mutation/survivors.txt)")
	labels := fs.String("label-filter", "", "pass --label-filter to holdfast-conformance (a smoke run)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *bin == "" {
		*bin = filepath.Join(*repo, "bin")
	}
	root, err := filepath.Abs(*repo)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if *equivFile == "" {
		*equivFile = filepath.Join(root, "tools", "mutation", "equivalent.txt")
	}
	if *survFile == "" {
		*survFile = filepath.Join(root, "tools", "mutation", "survivors.txt")
	}
	equivalent, err := readReasons(*equivFile)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	survivors, err := readReasons(*survFile)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}

	var all []job
	var every []mutant // of the targets, whatever -only selects
	for _, name := range strings.Split(*names, ",") {
		t, ok := targetNamed(name)
		if !ok {
			fmt.Fprintf(stderr, "unknown target %q\n", name)
			return 2
		}
		src, err := os.ReadFile(filepath.Join(root, t.file))
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 2
		}
		ms, err := mutants(t.file, src, t.sc)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 2
		}
		every = append(every, ms...)
		for _, m := range ms {
			if strings.Contains(m.ID, *only) {
				all = append(all, job{t: t, m: m, src: src})
			}
		}
	}
	if *list {
		for _, j := range all {
			fmt.Fprintf(stdout, "%s\n\t%s:%d  %s  ->  %s\n", j.m.ID, j.m.File, j.m.Line, oneLine(j.m.Original), oneLine(j.m.Mutated))
		}
		fmt.Fprintf(stdout, "%d mutants\n", len(all))
		return 0
	}
	if len(all) == 0 {
		fmt.Fprintln(stderr, "no mutant selected")
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r := &runner{
		root: root, conformance: filepath.Join(*bin, "holdfast-conformance"),
		timeout: *timeout, labels: *labels, log: stderr,
	}
	if _, err := os.Stat(r.conformance); err != nil {
		fmt.Fprintf(stderr, "%v: run make build first\n", err)
		return 2
	}
	work, err := os.MkdirTemp("", "holdfast-mutation-")
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	defer os.RemoveAll(work)
	r.work = work

	// The unmutated backends first: a suite that fails them would kill
	// every mutant.
	for _, t := range targetsOf(all) {
		res := r.baseline(ctx, t)
		if res.err != nil || res.verdict != survived {
			fmt.Fprintf(stderr, "the suite does not pass the unmutated %s backend (%v %v): fix that first\n%s\n", t.name, res.verdict, res.err, res.output)
			return 1
		}
	}
	results := r.runAll(ctx, all, *jobs)
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "interrupted")
		return 1
	}
	rep := summarize(results, every, equivalent, survivors)
	text := rep.markdown()
	fmt.Fprint(stdout, rep.summaryLine())
	if *report != "" {
		if err := os.WriteFile(*report, []byte(text), 0o644); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		fmt.Fprintf(stdout, "report: %s\n", *report)
	} else {
		fmt.Fprint(stdout, text)
	}
	if len(rep.errors) > 0 || len(rep.stale) > 0 || len(rep.unexplained) > 0 {
		return 1
	}
	return 0
}

func targetNamed(name string) (target, bool) {
	for _, t := range targets {
		if t.name == strings.TrimSpace(name) {
			return t, true
		}
	}
	return target{}, false
}

func targetsOf(jobs []job) []target {
	var out []target
	seen := map[string]bool{}
	for _, j := range jobs {
		if !seen[j.t.name] {
			seen[j.t.name] = true
			out = append(out, j.t)
		}
	}
	return out
}

// readReasons reads ID<TAB>reason lines (# comments, blank lines).
func readReasons(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for i, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, reason, ok := strings.Cut(line, "\t")
		if !ok || strings.TrimSpace(reason) == "" {
			return nil, fmt.Errorf("%s:%d: want ID<TAB>reason", path, i+1)
		}
		out[strings.TrimSpace(id)] = strings.TrimSpace(reason)
	}
	return out, nil
}
