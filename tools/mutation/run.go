package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// verdict is what one mutant's run came to.
type verdict string

const (
	killed   verdict = "killed"   // a spec failed (twice: see runner.one)
	timedOut verdict = "timeout"  // the run hung: counted as killed
	survived verdict = "survived" // every spec passed
	flaky    verdict = "flaky"    // failed once, passed the second time: counted as survived
	invalid  verdict = "invalid"  // does not build: not a mutant
)

// job is one mutant of one target's source.
type job struct {
	t   target
	m   mutant
	src []byte
}

// result is one mutant's verdict, with the spec that failed.
type result struct {
	job
	verdict verdict
	spec    string // the first failed spec, for a kill
	took    time.Duration
	output  string // the run's output, kept for errors
	err     error  // the driver could not judge the mutant
}

// runner builds mutants and runs the suite on them.
type runner struct {
	root        string // the checkout
	work        string // temporary files
	conformance string // holdfast-conformance
	timeout     time.Duration
	labels      string
	log         io.Writer

	mu   sync.Mutex
	done int
}

// restartStore kills the plugin, whose process is the store of both targets,
// and waits until it is gone (the suite's PID for it, from any directory).
const restartStore = `pid=$HOLDFAST_CONFORMANCE_PLUGIN_PID; kill -9 "$pid" && while kill -0 "$pid" 2>/dev/null; do sleep 0.01; done`

// baseline runs the suite on the unmutated target.
func (r *runner) baseline(ctx context.Context, t target) result {
	dir := filepath.Join(r.work, "baseline-"+t.name)
	exe, out, err := r.build(ctx, dir, t, nil)
	if err != nil {
		return result{err: err, output: out}
	}
	v, spec, out, err := r.suite(ctx, exe)
	return result{verdict: v, spec: spec, output: out, err: err}
}

// runAll runs every job, n at a time, and returns the results in order.
func (r *runner) runAll(ctx context.Context, jobs []job, n int) []result {
	out := make([]result, len(jobs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range max(n, 1) {
		wg.Go(func() {
			for i := range next {
				out[i] = r.one(ctx, jobs[i])
				r.progress(out[i], len(jobs))
			}
		})
	}
	for i := range jobs {
		select {
		case next <- i:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(next)
	wg.Wait()
	return out
}

func (r *runner) progress(res result, total int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done++
	detail := res.spec
	if res.err != nil {
		detail = res.err.Error()
	}
	fmt.Fprintf(r.log, "[%d/%d] %-8s %s (%s) %s\n", r.done, total, res.verdict, res.m.ID, res.took.Round(time.Second), detail)
}

// one builds and runs a mutant. A kill is confirmed by a second run of the
// spec that failed, so that a spec failing for a loaded machine's sake is not
// taken for a kill.
func (r *runner) one(ctx context.Context, j job) result {
	start := time.Now()
	sum := sha256.Sum256([]byte(j.m.ID))
	dir := filepath.Join(r.work, hex.EncodeToString(sum[:8]))
	defer os.RemoveAll(dir)
	res := result{job: j}
	exe, out, err := r.build(ctx, dir, j.t, j.m.apply(j.src))
	switch {
	case errors.Is(err, errNoBuild):
		res.verdict, res.output = invalid, out
	case err != nil:
		res.err, res.output = err, out
	default:
		res.verdict, res.spec, res.output, res.err = r.suite(ctx, exe)
		if res.err == nil && res.verdict == killed && res.spec != "" {
			// (ginkgo matches --focus against more than the spec's text:
			// anchored at its end only)
			again, _, _, err := r.suite(ctx, exe, "--focus", regexp.QuoteMeta(res.spec)+"$")
			switch {
			case err != nil:
				res.err = fmt.Errorf("confirming the kill by %q: %w", res.spec, err)
			case again == survived:
				res.verdict = flaky
			}
		}
	}
	res.took = time.Since(start)
	return res
}

var errNoBuild = errors.New("the mutant does not build")

// build writes the plugin of t into dir, with src in place of t.file when
// src is not nil (go build -overlay), from the checkout's workspace.
func (r *runner) build(ctx context.Context, dir string, t target, src []byte) (string, string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	args := []string{"build"}
	if src != nil {
		mutated := filepath.Join(dir, filepath.Base(t.file))
		if err := os.WriteFile(mutated, src, 0o644); err != nil {
			return "", "", err
		}
		overlay, err := json.Marshal(map[string]map[string]string{"Replace": {filepath.Join(r.root, t.file): mutated}})
		if err != nil {
			return "", "", err
		}
		overlayFile := filepath.Join(dir, "overlay.json")
		if err := os.WriteFile(overlayFile, overlay, 0o644); err != nil {
			return "", "", err
		}
		args = append(args, "-overlay", overlayFile)
	}
	exe := filepath.Join(dir, "holdfast-backend-"+t.name)
	args = append(args, "-o", exe, t.pkg)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = r.root
	// The checkout's go.work, even when this runs with GOWORK=off.
	cmd.Env = append(os.Environ(), "GOWORK=")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit) && src != nil:
		return "", string(out), fmt.Errorf("%w: %s", errNoBuild, compileError(string(out)))
	case err != nil:
		return "", string(out), fmt.Errorf("go build %s: %w", t.pkg, err)
	}
	return exe, "", nil
}

// suite runs holdfast-conformance backend on exe, stopping at the first
// failed spec.
func (r *runner) suite(ctx context.Context, exe string, extra ...string) (verdict, string, string, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	args := []string{"backend", "--plugin", exe, "--restart-store", restartStore, "--ginkgo.fail-fast", "--ginkgo.seed=1"}
	if r.labels != "" {
		args = append(args, "--label-filter", r.labels)
	}
	args = append(args, extra...)
	cmd := exec.CommandContext(ctx, r.conformance, args...)
	cmd.WaitDelay = 10 * time.Second
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	out := buf.String()
	var exit *exec.ExitError
	switch {
	case strings.Contains(out, "\nWill run 0 of "):
		return "", "", out, errors.New("holdfast-conformance selected no spec")
	case ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		return timedOut, "", out, nil
	case ctx.Err() != nil:
		return "", "", out, ctx.Err()
	case err == nil:
		return survived, "", out, nil
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		return killed, failedSpec(out), out, nil
	}
	return "", "", out, fmt.Errorf("holdfast-conformance: %w: %s", err, lastLines(out, 5))
}

// failedSpec is the first spec the summary lists as failed, or "" (then
// the set-up failed: the plugin did not start).
func failedSpec(out string) string {
	for _, line := range strings.Split(out, "\n") {
		if s, ok := strings.CutPrefix(line, "  FAIL  "); ok && !strings.HasPrefix(s, "[") {
			return strings.TrimSpace(s)
		}
	}
	return ""
}

// compileError is the first line of go build's output that is not a
// package header.
func compileError(out string) string {
	for _, line := range strings.Split(out, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			return line
		}
	}
	return strings.TrimSpace(out)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
