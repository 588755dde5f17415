package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startHeld starts `holdfast ARGS -- sh -c ...` whose command writes
// "start TOKEN" to log, then holds its lease until the file gate exists.
// The returned func waits for it and fails the test unless it exited 0.
func startHeld(t *testing.T, addr, log, gate string, args ...string) (wait func()) {
	t.Helper()
	script := `echo "start $HOLDFAST_FENCING_TOKEN" >> "$LOG"; while [ ! -e "$GATE" ]; do sleep 0.01; done`
	cmd := holdfastCmd(addr, append(append(args, "-q", "--"), "sh", "-c", script)...)
	cmd.Env = append(cmd.Env, "LOG="+log, "GATE="+gate)
	var errb syncBuffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := waitCmd(cmd)
	return func() {
		t.Helper()
		<-done
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("holdfast %v exited %d: %s", args, code, errb.String())
		}
	}
}

// eventually polls cond until it holds, failing the test after 15s (each
// poll is another process's state: a file, the server's answer).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 15s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// inspectJSON is `holdfast inspect KEY -o json`.
func inspectJSON(t *testing.T, addr, key string) (held bool, state map[string]any) {
	t.Helper()
	r := runCLI(t, addr, "inspect", key, "-o", "json")
	if r.code != 0 {
		t.Fatalf("inspect %s: %d %s", key, r.code, r.stderr)
	}
	var out struct {
		Held  bool           `json:"held"`
		State map[string]any `json:"state"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("inspect JSON %q: %v", r.stdout, err)
	}
	return out.Held, out.State
}

// Three `holdfast semaphore jobs --limit 2` at once: two run together, the
// third queues until one is done; inspect shows both holders.
func TestCLISemaphoreRunsAtMostLimit(t *testing.T) {
	s := startServer(t, nil, "--addr", "127.0.0.1:0")
	dir := t.TempDir()
	log, gate := filepath.Join(dir, "log"), filepath.Join(dir, "gate")
	a := startHeld(t, s.addr, log, gate, "semaphore", "jobs", "--limit", "2")
	b := startHeld(t, s.addr, log, gate, "semaphore", "jobs", "--limit", "2")
	eventually(t, "two holders of the semaphore", func() bool {
		b, _ := os.ReadFile(log)
		return strings.Count(string(b), "start") == 2
	})
	c := startHeld(t, s.addr, log, gate, "semaphore", "jobs", "--limit", "2")
	eventually(t, "the third queues", func() bool {
		_, st := inspectJSON(t, s.addr, "jobs")
		return st["waiters"] == float64(1)
	})
	held, st := inspectJSON(t, s.addr, "jobs")
	if !held || st["kind"] != "semaphore" || st["limit"] != float64(2) || st["permitsInUse"] != float64(2) {
		t.Fatalf("inspect: held=%v %v", held, st)
	}
	if hs, _ := st["holders"].([]any); len(hs) != 2 {
		t.Fatalf("inspect shows %d holders, want 2: %v", len(hs), st)
	}
	if raw, _ := os.ReadFile(log); strings.Count(string(raw), "start") != 2 {
		t.Fatalf("a third command ran beside two holders of a limit of 2: %q", raw)
	}
	text := runCLI(t, s.addr, "inspect", "jobs")
	if !strings.Contains(text.stdout, "permits in use") || !strings.Contains(text.stdout, "2 of 2") || !strings.Contains(text.stdout, "holder 2") {
		t.Fatalf("inspect's text does not show the holders:\n%s", text.stdout)
	}
	// Another limit is refused, not queued.
	r := runCLI(t, s.addr, "semaphore", "jobs", "--limit", "3", "--no-wait", "--", "true")
	if r.code != 1 || !strings.Contains(r.stderr, "limit 2") || !strings.Contains(r.stderr, "limit 3") {
		t.Fatalf("another limit: %d %q", r.code, r.stderr)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	a()
	b()
	c()
	if raw, _ := os.ReadFile(log); strings.Count(string(raw), "start") != 3 {
		t.Fatalf("the queued command did not run: %q", raw)
	}
}

// Two readers run together; a writer waits for them and runs alone.
func TestCLIRWLockReadersShareWriterAlone(t *testing.T) {
	s := startServer(t, nil, "--addr", "127.0.0.1:0")
	dir := t.TempDir()
	log, gate := filepath.Join(dir, "log"), filepath.Join(dir, "gate")
	r1 := startHeld(t, s.addr, log, gate, "rwlock", "cfg", "--shared")
	r2 := startHeld(t, s.addr, log, gate, "rwlock", "cfg", "--shared")
	eventually(t, "two readers", func() bool {
		b, _ := os.ReadFile(log)
		return strings.Count(string(b), "start") == 2
	})
	r := runCLI(t, s.addr, "rwlock", "cfg", "--exclusive", "--no-wait", "--", "true")
	if r.code != 3 || !strings.Contains(r.stderr, "not acquired") {
		t.Fatalf("a writer beside readers: %d %q", r.code, r.stderr)
	}
	_, st := inspectJSON(t, s.addr, "cfg")
	if hs, _ := st["holders"].([]any); len(hs) != 2 || hs[0].(map[string]any)["mode"] != "shared" {
		t.Fatalf("inspect: %v", st)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r1()
	r2()
	if r := runCLI(t, s.addr, "rwlock", "cfg", "--exclusive", "-q", "--", "true"); r.code != 0 {
		t.Fatalf("the writer once the readers left: %d %q", r.code, r.stderr)
	}
	for _, args := range [][]string{{"rwlock", "cfg", "--", "true"}, {"rwlock", "cfg", "--shared", "--exclusive", "--", "true"}, {"semaphore", "s", "--", "true"}, {"semaphore", "s", "--limit", "2", "--permits", "3", "--", "true"}, {"semaphore", "a", "b", "--limit", "2", "--", "true"}} {
		if r := runCLI(t, s.addr, args...); r.code != 1 || r.stderr == "" {
			t.Errorf("holdfast %v: %d %q, want a usage error", args, r.code, r.stderr)
		}
	}
}
