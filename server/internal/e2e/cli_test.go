package e2e

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast/holdfast/harness"
)

// cliResult is one finished client command.
type cliResult struct {
	code           int
	stdout, stderr string
}

// holdfastCmd is the holdfast binary with args, talking to server.
func holdfastCmd(server string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(binDir, "holdfast"), args...)
	cmd.Env = append(os.Environ(), "HOLDFAST_SERVER=http://"+server)
	return cmd
}

// waitCmd waits for cmd, started, in the background: the channel is closed
// once it exited, and its status is then in cmd.ProcessState (Wait's error
// only restates a non-zero status: the outputs are buffers).
func waitCmd(cmd *exec.Cmd) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	return done
}

// runCLI runs the holdfast binary with args against server and waits.
func runCLI(t *testing.T, server string, args ...string) cliResult {
	t.Helper()
	cmd := holdfastCmd(server, args...)
	var out, errb syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := waitCmd(cmd)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("holdfast %v did not finish within 30s; stderr:\n%s", args, errb.String())
	}
	return cliResult{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errb.String()}
}

// waitFile polls until path contains want (the command under the lock
// writes it: an event from another process, polled with a deadline).
func waitFile(t *testing.T, path, want string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not contain %q: %q", path, want, b)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Two `holdfast lock demo -- CMD` started at once: the second runs only
// after the first finished, and sees a larger fencing token.
func TestCLILockRunsOneAtATime(t *testing.T) {
	s := startServer(t, nil, "--addr", "127.0.0.1:0")
	log := filepath.Join(t.TempDir(), "log")
	script := `echo "start $HOLDFAST_LOCK_KEY $HOLDFAST_FENCING_TOKEN" >> "$LOG"; sleep 1; echo "end $HOLDFAST_LOCK_KEY $HOLDFAST_FENCING_TOKEN" >> "$LOG"`
	var wg sync.WaitGroup
	results := make([]cliResult, 2)
	for i := range results {
		wg.Go(func() {
			cmd := holdfastCmd(s.addr, "lock", "demo", "--", "sh", "-c", script)
			cmd.Env = append(cmd.Env, "LOG="+log)
			var out, errb syncBuffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			err := cmd.Run()
			var ee *exec.ExitError
			if err != nil && !errors.As(err, &ee) {
				t.Errorf("run: %v", err)
				return
			}
			results[i] = cliResult{cmd.ProcessState.ExitCode(), out.String(), errb.String()}
		})
	}
	wg.Wait()
	for i, r := range results {
		if r.code != 0 {
			t.Fatalf("lock #%d exited %d: %s", i, r.code, r.stderr)
		}
	}
	raw, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if len(lines) != 4 {
		t.Fatalf("want 4 lines, got %q", lines)
	}
	var tokens [4]uint64
	for i, want := range []string{"start", "end", "start", "end"} {
		f := strings.Fields(lines[i])
		if len(f) != 3 || f[0] != want || f[1] != "demo" {
			t.Fatalf("line %d is %q, want %q demo TOKEN; all: %q", i, lines[i], want, lines)
		}
		if tokens[i], err = strconv.ParseUint(f[2], 10, 64); err != nil {
			t.Fatalf("line %d: fencing token %q: %v", i, f[2], err)
		}
	}
	if tokens[0] != tokens[1] || tokens[2] != tokens[3] || tokens[2] <= tokens[0] {
		t.Fatalf("fencing tokens %v: want the second holder's larger than the first's", tokens)
	}
	for _, r := range results {
		if !strings.Contains(r.stderr, `holdfast: acquired "demo"`) || !strings.Contains(r.stderr, `holdfast: released "demo"`) {
			t.Fatalf("stderr does not say acquired/released: %q", r.stderr)
		}
	}
}

// A server frozen past the TTL: the watchdog cannot renew, the lease is
// lost on the client's clock, the command gets SIGTERM and lock exits 75.
func TestCLILeaseLossStopsTheCommand(t *testing.T) {
	s := startServer(t, nil, "--addr", "127.0.0.1:0")
	log := filepath.Join(t.TempDir(), "log")
	cmd := holdfastCmd(s.addr, "lock", "frozen", "--ttl", "1s", "--grace", "10s", "--",
		"sh", "-c", `trap 'echo TERM >> "$LOG"; exit 143' TERM; echo started >> "$LOG"; while :; do sleep 0.05; done`)
	cmd.Env = append(cmd.Env, "LOG="+log)
	var out, errb syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := waitCmd(cmd)
	waitFile(t, log, "started")

	if err := s.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	defer func() { _ = s.Signal(syscall.SIGCONT) }()

	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("lock did not exit after the lease was lost; stderr:\n%s", errb.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 75 {
		t.Fatalf("exit code %d, want 75; stderr:\n%s", code, errb.String())
	}
	// Lost within the TTL of the last renewal, stopped by SIGTERM (not by
	// SIGKILL after the 10s grace).
	if d := time.Since(stopped); d > 8*time.Second {
		t.Fatalf("took %s to stop the command", d)
	}
	waitFile(t, log, "TERM")
	if !strings.Contains(errb.String(), "lease on \"frozen\"") || !strings.Contains(errb.String(), "lost") {
		t.Fatalf("stderr does not explain the loss:\n%s", errb.String())
	}
	_ = s.Signal(syscall.SIGCONT)
}

// SIGINT to holdfast reaches the command; the lock is released after it.
func TestCLISignalIsForwarded(t *testing.T) {
	s := startServer(t, nil, "--addr", "127.0.0.1:0")
	log := filepath.Join(t.TempDir(), "log")
	cmd := holdfastCmd(s.addr, "lock", "sig", "--",
		"sh", "-c", `trap 'echo INT >> "$LOG"; exit 5' INT; echo started >> "$LOG"; while :; do sleep 0.05; done`)
	cmd.Env = append(cmd.Env, "LOG="+log)
	var errb syncBuffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := waitCmd(cmd)
	waitFile(t, log, "started")
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatal("lock did not exit after SIGINT")
	}
	if code := cmd.ProcessState.ExitCode(); code != 5 {
		t.Fatalf("exit code %d, want the command's 5; stderr:\n%s", code, errb.String())
	}
	waitFile(t, log, "INT")
	r := runCLI(t, s.addr, "inspect", "sig", "-o", "json")
	var insp struct{ Held bool }
	if err := json.Unmarshal([]byte(r.stdout), &insp); err != nil || r.code != 0 || insp.Held {
		t.Fatalf("after the command: inspect %d %q %v", r.code, r.stdout, err)
	}
}

func TestCLILeaseCommandsAndJSON(t *testing.T) {
	s := startServer(t, nil, "--addr", "127.0.0.1:0")

	r := runCLI(t, s.addr, "acquire", "jobs/a", "--ttl", "1m", "--holder", "e2e-holder", "-o", "json")
	var acq struct {
		Acquired bool
		Lease    struct {
			Key          string
			OwnerToken   string
			FencingToken uint64 `json:"fencingToken,string"`
			TTL          string
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &acq); err != nil || r.code != 0 {
		t.Fatalf("acquire -o json: %d %q %v %s", r.code, r.stdout, err, r.stderr)
	}
	if !acq.Acquired || acq.Lease.Key != "jobs/a" || acq.Lease.OwnerToken == "" || acq.Lease.FencingToken == 0 || acq.Lease.TTL != "1m0s" {
		t.Fatalf("acquire: %+v", acq)
	}

	// Contended: exit 3, the holder in the output.
	r = runCLI(t, s.addr, "acquire", "jobs/a")
	if r.code != 3 || !strings.Contains(r.stdout, "e2e-holder") {
		t.Fatalf("contended acquire: %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, s.addr, "lock", "jobs/a", "--no-wait", "--", "true")
	if r.code != 3 || !strings.Contains(r.stderr, `held by "e2e-holder"`) {
		t.Fatalf("lock --no-wait on a held key: %d %q", r.code, r.stderr)
	}

	r = runCLI(t, s.addr, "list", "jobs/", "-o", "json")
	var list []struct {
		Key          string
		Holder       string
		FencingToken uint64 `json:"fencingToken,string"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || r.code != 0 || len(list) != 1 ||
		list[0].Key != "jobs/a" || list[0].Holder != "e2e-holder" || list[0].FencingToken != acq.Lease.FencingToken {
		t.Fatalf("list -o json: %d %q %v", r.code, r.stdout, err)
	}
	r = runCLI(t, s.addr, "list")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "KEY") || !strings.Contains(r.stdout, "jobs/a") {
		t.Fatalf("list: %d %q", r.code, r.stdout)
	}

	r = runCLI(t, s.addr, "extend", "jobs/a", acq.Lease.OwnerToken, "--ttl", "2m", "-o", "json")
	if r.code != 0 || !strings.Contains(r.stdout, `"extended": true`) {
		t.Fatalf("extend: %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, s.addr, "release", "jobs/a", acq.Lease.OwnerToken)
	if r.code != 0 || !strings.Contains(r.stdout, "released  true") {
		t.Fatalf("release: %d %q %q", r.code, r.stdout, r.stderr)
	}
	// The token no longer holds: exit 3, never an error that could delete
	// a successor's lock.
	r = runCLI(t, s.addr, "release", "jobs/a", acq.Lease.OwnerToken)
	if r.code != 3 || !strings.Contains(r.stderr, "does not hold") {
		t.Fatalf("stale release: %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, s.addr, "extend", "jobs/a", acq.Lease.OwnerToken)
	if r.code != 3 || !strings.Contains(r.stderr, "lease lost") {
		t.Fatalf("stale extend: %d %q %q", r.code, r.stdout, r.stderr)
	}

	// HOLDFAST_FENCING_TOKEN reaches the command, larger than the last.
	r = runCLI(t, s.addr, "lock", "jobs/a", "-q", "--", "sh", "-c", `echo "$HOLDFAST_LOCK_KEY $HOLDFAST_FENCING_TOKEN"`)
	f := strings.Fields(r.stdout)
	if r.code != 0 || len(f) != 2 || f[0] != "jobs/a" || r.stderr != "" {
		t.Fatalf("lock: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if tok, err := strconv.ParseUint(f[1], 10, 64); err != nil || tok <= acq.Lease.FencingToken {
		t.Fatalf("HOLDFAST_FENCING_TOKEN %q not above %d", f[1], acq.Lease.FencingToken)
	}
	r = runCLI(t, s.addr, "lock", "jobs/a", "--", "sh", "-c", "exit 7")
	if r.code != 7 {
		t.Fatalf("lock exits with the command's status: %d", r.code)
	}
	r = runCLI(t, s.addr, "lock", "jobs/a", "--", "/nonexistent/command")
	if r.code != 127 || !strings.Contains(r.stderr, "cannot run") {
		t.Fatalf("lock with a missing command: %d %q", r.code, r.stderr)
	}
	r = runCLI(t, s.addr, "lock", "jobs/a", "true")
	if r.code != 1 || !strings.Contains(r.stderr, `"--"`) {
		t.Fatalf("lock without --: %d %q", r.code, r.stderr)
	}

	r = runCLI(t, s.addr, "inspect", "jobs/a", "-o", "json")
	if r.code != 0 || !strings.Contains(r.stdout, `"held": false`) {
		t.Fatalf("inspect: %d %q", r.code, r.stdout)
	}
	r = runCLI(t, s.addr, "info", "-o", "json")
	var info struct {
		Version string
		Backend struct {
			Name   string
			Shared bool
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &info); err != nil || r.code != 0 || info.Backend.Name != "memory" || info.Version != binVersion {
		t.Fatalf("info -o json: %d %q %v", r.code, r.stdout, err)
	}
	r = runCLI(t, s.addr, "info")
	if r.code != 0 || !strings.Contains(r.stdout, "shared") || !strings.Contains(r.stdout, "false") {
		t.Fatalf("info: %d %q", r.code, r.stdout)
	}
	r = runCLI(t, s.addr, "info", "-o", "yaml")
	if r.code != 1 || !strings.Contains(r.stderr, "--output") {
		t.Fatalf("bad --output: %d %q", r.code, r.stderr)
	}
	r = runCLI(t, s.addr, "acquire", "jobs/a", "--ttl", "48h")
	if r.code != 1 || !strings.Contains(r.stderr, "invalid_argument: ttl") {
		t.Fatalf("bad ttl: %d %q", r.code, r.stderr)
	}
}

func TestCLIWatchStreams(t *testing.T) {
	s := startServer(t, nil, "--addr", "127.0.0.1:0")
	cmd := holdfastCmd(s.addr, "watch", "--prefix", "w/", "-o", "json")
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
	events := make(chan map[string]any, 16)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Errorf("watch line %q is not JSON: %v", sc.Text(), err)
				continue
			}
			events <- m
		}
	}()
	next := func(want string) map[string]any {
		t.Helper()
		select {
		case m, ok := <-events:
			if !ok || m["type"] != want {
				t.Fatalf("watch: got %v (open %t), want type %q; stderr %s", m, ok, want, errb.String())
			}
			return m
		case <-time.After(15 * time.Second):
			t.Fatalf("no %q event", want)
			return nil
		}
	}
	next("synced")
	if r := runCLI(t, s.addr, "lock", "w/x", "-q", "--", "true"); r.code != 0 {
		t.Fatalf("lock: %d %s", r.code, r.stderr)
	}
	if m := next("acquired"); m["state"].(map[string]any)["key"] != "w/x" {
		t.Fatalf("acquired event %v", m)
	}
	next("released")
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for range events {
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("watch after SIGINT: %v; stderr %s", err, errb.String())
	}
}

func TestCLIUnreachableServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nobody listens there now
	for _, args := range [][]string{{"info"}, {"list"}, {"acquire", "k"}, {"lock", "k", "--", "true"}, {"watch"}} {
		r := runCLI(t, addr, args...)
		want := fmt.Sprintf("holdfast: cannot reach server at http://%s: connection refused\n", addr)
		if r.code != 69 || r.stderr != want {
			t.Errorf("holdfast %v: exit %d, stderr %q; want 69, %q", args, r.code, r.stderr, want)
		}
	}
	// --server wins over HOLDFAST_SERVER.
	r := runCLI(t, "127.0.0.1:1", "info", "--server", "http://"+addr)
	if r.code != 69 || !strings.Contains(r.stderr, addr) {
		t.Fatalf("--server: %d %q", r.code, r.stderr)
	}
}

// The client over TLS with a private CA and a bearer token, from flags and
// from the environment.
func TestCLIWithTLSAndToken(t *testing.T) {
	dir := t.TempDir()
	ca := harness.NewCA(t, "server CA")
	cert, key := harness.WriteLeaf(t, dir, "server", ca.Issue(t, "server", true))
	caFile := harness.WriteFile(t, dir, "ca.pem", ca.PEM)
	const tok = "cli-team-a-token-0123456789"
	sum := sha256.Sum256([]byte(tok))
	tokens := harness.WriteFile(t, dir, "tokens.yaml", []byte("- name: team-a\n  sha256: "+hex.EncodeToString(sum[:])+"\n  prefixes: [\"a/\"]\n"))
	s := startServer(t, nil, "--addr", "127.0.0.1:0", "--tls-cert", cert, "--tls-key", key, "--auth-tokens", tokens)
	server := "https://" + s.addr

	r := runCLI(t, s.addr, "lock", "a/job", "-q", "--server", server, "--ca-cert", caFile, "--token", tok, "--", "sh", "-c", `echo "$HOLDFAST_FENCING_TOKEN"`)
	if r.code != 0 || strings.TrimSpace(r.stdout) == "" {
		t.Fatalf("lock over TLS with a token: %d %q %q", r.code, r.stdout, r.stderr)
	}
	cmd := holdfastCmd(s.addr, "list", "a/", "--server", server)
	cmd.Env = append(cmd.Env, "HOLDFAST_CA_CERT="+caFile, "HOLDFAST_TOKEN="+tok)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "KEY") {
		t.Fatalf("list with HOLDFAST_CA_CERT and HOLDFAST_TOKEN: %v %q", err, out)
	}
	r = runCLI(t, s.addr, "list", "--server", server, "--ca-cert", caFile)
	if r.code != 1 || !strings.Contains(r.stderr, "unauthenticated") || !strings.Contains(r.stderr, "--token") {
		t.Fatalf("no token: %d %q", r.code, r.stderr)
	}
	r = runCLI(t, s.addr, "acquire", "b/job", "--server", server, "--ca-cert", caFile, "--token", tok)
	if r.code != 1 || !strings.Contains(r.stderr, "permission_denied") {
		t.Fatalf("outside the token's namespace: %d %q", r.code, r.stderr)
	}
	r = runCLI(t, s.addr, "info", "--server", server, "--token", tok)
	if r.code == 0 || !strings.Contains(r.stderr, "certificate") {
		t.Fatalf("a server certificate from an unknown CA was accepted: %d %q", r.code, r.stderr)
	}
}

// Every client command teaches: a long description and examples; and
// completion scripts come out of the binary.
func TestCLIHelpAndCompletion(t *testing.T) {
	for _, c := range []string{"lock", "semaphore", "rwlock", "acquire", "release", "extend", "inspect", "list", "watch", "info"} {
		r := runCLI(t, "127.0.0.1:1", c, "--help")
		runsCommand := c == "lock" || c == "semaphore" || c == "rwlock" // they print nothing of their own
		if r.code != 0 || !strings.Contains(r.stdout, "Examples:") || !strings.Contains(r.stdout, "Exit status") ||
			!strings.Contains(r.stdout, "--server") || strings.Contains(r.stdout, "--output") == runsCommand {
			t.Errorf("holdfast %s --help: %d\n%s", c, r.code, r.stdout)
		}
	}
	for _, sh := range []string{"bash", "zsh", "fish"} {
		r := runCLI(t, "127.0.0.1:1", "completion", sh)
		if r.code != 0 || !strings.Contains(r.stdout, "holdfast") {
			t.Errorf("completion %s: %d %q", sh, r.code, r.stderr)
		}
	}
	r := runCLI(t, "127.0.0.1:1", "__complete", "list", "--output", "")
	if r.code != 0 || !strings.Contains(r.stdout, "table\njson\n") {
		t.Errorf("--output completion: %q", r.stdout)
	}
}

// Waiting for a held lock: --wait bounds it (exit 3), Ctrl-C ends it (exit
// 130), and neither runs the command.
func TestCLILockWaitEnds(t *testing.T) {
	s := startServer(t, nil, "--addr", "127.0.0.1:0")
	if r := runCLI(t, s.addr, "acquire", "busy", "--ttl", "1m", "--holder", "someone"); r.code != 0 {
		t.Fatalf("acquire: %d %s", r.code, r.stderr)
	}
	start := time.Now()
	r := runCLI(t, s.addr, "lock", "busy", "--wait", "300ms", "--", "sh", "-c", "echo ran")
	if r.code != 3 || r.stdout != "" || !strings.Contains(r.stderr, `"busy" not acquired within 300ms: held by "someone"`) {
		t.Fatalf("--wait: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("gave up after %s, before --wait", d)
	}

	cmd := holdfastCmd(s.addr, "lock", "busy", "--", "sh", "-c", "echo ran")
	var out, errb syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := waitCmd(cmd)
	// It is queued once the server counts a waiter on the key.
	deadline := time.Now().Add(15 * time.Second)
	for {
		r := runCLI(t, s.addr, "inspect", "busy", "-o", "json")
		if strings.Contains(r.stdout, `"waiters": 1`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lock never queued: %q", r.stdout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatal("lock did not stop waiting on SIGINT")
	}
	if code := cmd.ProcessState.ExitCode(); code != 130 || out.String() != "" || !strings.Contains(errb.String(), `interrupted while waiting for "busy"`) {
		t.Fatalf("SIGINT while waiting: %d %q %q", code, out.String(), errb.String())
	}
}

// `holdfast lock k1 k2 -- CMD` holds both keys while CMD runs, gives CMD
// each key's fencing token, and two such commands naming the keys in
// opposite orders take turns instead of deadlocking.
func TestCLILockSeveralKeys(t *testing.T) {
	s := startServer(t, nil, "--addr", "127.0.0.1:0")
	log := filepath.Join(t.TempDir(), "log")
	script := `echo "start $HOLDFAST_LOCK_KEYS $HOLDFAST_LOCK_KEY_0=$HOLDFAST_FENCING_TOKEN_0 $HOLDFAST_LOCK_KEY_1=$HOLDFAST_FENCING_TOKEN_1" >> "$LOG"; sleep 0.5; echo end >> "$LOG"`
	var wg sync.WaitGroup
	results := make([]cliResult, 2)
	for i, keys := range [][]string{{"acct/1", "acct/2"}, {"acct/2", "acct/1"}} {
		wg.Go(func() {
			cmd := holdfastCmd(s.addr, append(append([]string{"lock"}, keys...), "--", "sh", "-c", script)...)
			cmd.Env = append(cmd.Env, "LOG="+log)
			var out, errb syncBuffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			err := cmd.Run()
			var ee *exec.ExitError
			if err != nil && !errors.As(err, &ee) {
				t.Errorf("run: %v", err)
				return
			}
			results[i] = cliResult{cmd.ProcessState.ExitCode(), out.String(), errb.String()}
		})
	}
	wg.Wait()
	for i, r := range results {
		if r.code != 0 {
			t.Fatalf("lock #%d exited %d: %s", i, r.code, r.stderr)
		}
	}
	raw, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if len(lines) != 4 || lines[1] != "end" || lines[3] != "end" {
		t.Fatalf("the two commands overlapped or did not run: %q", lines)
	}
	for _, l := range []string{lines[0], lines[2]} {
		f := strings.Fields(l)
		if len(f) != 4 || f[0] != "start" || f[1] != "2" || !strings.Contains(l, "acct/1=") || !strings.Contains(l, "acct/2=") {
			t.Fatalf("line %q: want start 2 KEY=TOKEN KEY=TOKEN", l)
		}
	}

	// acquire, release with several keys; a lock-delay shown by inspect.
	r := runCLI(t, s.addr, "acquire", "set/a", "set/b", "--ttl", "1m", "-o", "json")
	var acq struct {
		Acquired bool
		Lease    struct {
			OwnerToken string
			Keys       []struct {
				Key          string
				FencingToken uint64 `json:"fencingToken,string"`
			}
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &acq); err != nil || r.code != 0 || !acq.Acquired || len(acq.Lease.Keys) != 2 {
		t.Fatalf("acquire of two keys: %d %q %v %s", r.code, r.stdout, err, r.stderr)
	}
	if r := runCLI(t, s.addr, "release", "set/a", "set/b", acq.Lease.OwnerToken); r.code != 0 {
		t.Fatalf("release of two keys: %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, s.addr, "acquire", "delay/k", "--ttl", "200ms", "--lock-delay", "30s")
	if r.code != 0 {
		t.Fatalf("acquire with a lock-delay: %d %q", r.code, r.stderr)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r = runCLI(t, s.addr, "inspect", "delay/k")
		if strings.Contains(r.stdout, "its last lease expired") || time.Now().After(deadline) {
			break
		}
	}
	if !strings.Contains(r.stdout, "lock-delay") || !strings.Contains(r.stdout, "its last lease expired") {
		t.Fatalf("inspect after the expiry: %q, want the lock-delay", r.stdout)
	}
	r = runCLI(t, s.addr, "lock", "delay/k", "--no-wait", "--", "true")
	if r.code != 3 || !strings.Contains(r.stderr, "lock-delay") {
		t.Fatalf("lock --no-wait in the lock-delay: %d %q", r.code, r.stderr)
	}
}
