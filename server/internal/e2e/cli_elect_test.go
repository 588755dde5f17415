package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
)

// `holdfast observe KEY -o json` prints the leader of now, then each change
// (a leader, its proclaimed value, no leader), one JSON line each, and
// exits 0 on SIGINT.
func TestCLIObserveStreams(t *testing.T) {
	s := startServer(t, nil, "--addr", "127.0.0.1:0")
	rpc := lockv1connect.NewLockServiceClient(http.DefaultClient, "http://"+s.addr)
	cmd := holdfastCmd(s.addr, "observe", "svc/leader", "-o", "json")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb syncBuffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	lines := make(chan map[string]any, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Errorf("observe line %q is not JSON: %v", sc.Text(), err)
				continue
			}
			lines <- m
		}
	}()
	// next is the next line's leader (nil: no leader).
	next := func() map[string]any {
		t.Helper()
		select {
		case m, ok := <-lines:
			if !ok {
				t.Fatalf("observe ended; stderr %s", errb.String())
			}
			l, _ := m["leader"].(map[string]any)
			return l
		case <-time.After(15 * time.Second):
			t.Fatalf("no observe line; stderr %s", errb.String())
			return nil
		}
	}
	if l := next(); l != nil {
		t.Fatalf("first line: leader %v, want none", l)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	res, err := rpc.Acquire(ctx, &lockv1.AcquireRequest{Key: "svc/leader", Ttl: durationpb.New(time.Minute), Holder: "h1",
		Kind: lockv1.Kind_KIND_ELECTION, Value: "10.0.0.1:80"})
	if err != nil || !res.GetAcquired() {
		t.Fatalf("campaign: %v %v", res, err)
	}
	lease := res.GetLease()
	if l := next(); l["value"] != "10.0.0.1:80" || l["holder"] != "h1" || l["term"] == nil {
		t.Fatalf("leader line %v", l)
	}
	if r, err := rpc.Proclaim(ctx, &lockv1.ProclaimRequest{Key: "svc/leader", OwnerToken: lease.GetOwnerToken(), Value: "10.0.0.2:80"}); err != nil || !r.GetProclaimed() {
		t.Fatalf("proclaim: %v %v", r, err)
	}
	if l := next(); l["value"] != "10.0.0.2:80" {
		t.Fatalf("proclaimed line %v", l)
	}
	if r, err := rpc.Release(ctx, &lockv1.ReleaseRequest{Key: "svc/leader", OwnerToken: lease.GetOwnerToken()}); err != nil || !r.GetReleased() {
		t.Fatalf("resign: %v %v", r, err)
	}
	if l := next(); l != nil {
		t.Fatalf("after the resignation: leader %v, want none", l)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for range lines {
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("observe after SIGINT: %v; stderr %s", err, errb.String())
	}

	// A key held as a lock is refused: exit 1, the server's words.
	if r := runCLI(t, s.addr, "acquire", "svc/mutex"); r.code != 0 {
		t.Fatalf("acquire: %d %s", r.code, r.stderr)
	}
	r := runCLI(t, s.addr, "observe", "svc/mutex")
	if r.code != 1 || !strings.Contains(r.stderr, "Observe follows elections only") {
		t.Fatalf("observe of a mutex: exit %d, stderr %q", r.code, r.stderr)
	}
}

// Two `holdfast elect` at once: the first leads and runs its command with
// its term, the second queues until the first resigns and then leads with
// a higher term; a third with --no-wait is refused (exit 3) naming the
// leader; inspect shows the leader's value.
func TestCLIElectRunsOneLeaderAtATime(t *testing.T) {
	s := startServer(t, nil, "--addr", "127.0.0.1:0")
	dir := t.TempDir()
	log, gate := filepath.Join(dir, "log"), filepath.Join(dir, "gate")
	script := `[ "$HOLDFAST_TERM" = "$HOLDFAST_FENCING_TOKEN" ] && [ "$HOLDFAST_ELECTION_KEY" = svc/sched ] && echo "start $HOLDFAST_TERM" >> "$LOG"; while [ ! -e "$GATE" ]; do sleep 0.01; done`
	start := func(value string) (wait func()) {
		cmd := holdfastCmd(s.addr, "elect", "svc/sched", "--value", value, "--holder", value, "-q", "--", "sh", "-c", script)
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
				t.Errorf("holdfast elect --value %s exited %d: %s", value, code, errb.String())
			}
		}
	}
	a := start("node-a")
	eventually(t, "the first leads", func() bool {
		b, _ := os.ReadFile(log)
		return strings.Count(string(b), "start") == 1
	})
	b := start("node-b")
	eventually(t, "the second queues", func() bool {
		_, st := inspectJSON(t, s.addr, "svc/sched")
		return st["waiters"] == float64(1)
	})
	held, st := inspectJSON(t, s.addr, "svc/sched")
	hs, _ := st["holders"].([]any)
	if !held || st["kind"] != "election" || len(hs) != 1 || hs[0].(map[string]any)["value"] != "node-a" {
		t.Fatalf("inspect: held=%v %v", held, st)
	}
	if text := runCLI(t, s.addr, "inspect", "svc/sched"); !strings.Contains(text.stdout, `"node-a", value "node-a", term`) {
		t.Fatalf("inspect's text does not show the leader:\n%s", text.stdout)
	}
	r := runCLI(t, s.addr, "elect", "svc/sched", "--no-wait", "--", "true")
	if r.code != 3 || !strings.Contains(r.stderr, `led by "node-a"`) {
		t.Fatalf("a third campaigner with --no-wait: exit %d, stderr %q", r.code, r.stderr)
	}
	if raw, _ := os.ReadFile(log); strings.Count(string(raw), "start") != 1 {
		t.Fatalf("a second leader ran beside the first: %q", raw)
	}
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	a()
	b()
	raw, _ := os.ReadFile(log)
	var terms []uint64
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		term, err := strconv.ParseUint(strings.TrimPrefix(line, "start "), 10, 64)
		if err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		terms = append(terms, term)
	}
	if len(terms) != 2 || terms[1] <= terms[0] {
		t.Fatalf("terms %v: want two, the second above the first", terms)
	}
	// A key held as a lock is refused, not queued.
	if r := runCLI(t, s.addr, "acquire", "svc/mutex"); r.code != 0 {
		t.Fatalf("acquire: %d %s", r.code, r.stderr)
	}
	if r := runCLI(t, s.addr, "elect", "svc/mutex", "--", "true"); r.code != 1 || r.stderr == "" {
		t.Fatalf("elect on a mutex: exit %d, stderr %q", r.code, r.stderr)
	}
}
