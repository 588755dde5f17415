package abuse

import (
	"bufio"
	"bytes"
	"context"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/harness"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// terminalSafe reports whether out holds no byte a terminal acts on other
// than the newlines that end lines.
func terminalSafe(out string) bool {
	for _, r := range out {
		if r == '\n' {
			continue
		}
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == '\u202e' {
			return false
		}
	}
	return true
}

// Issue 13, item 9: a key or holder with ESC, CR or LF (anyone may take
// one) no longer repaints the terminal of whoever runs holdfast list,
// inspect or watch; ordinary keys print as before.
func TestCLIEscapesControlCharacters(t *testing.T) {
	s := serve(t)
	ctx := t.Context()
	bin, err := harness.Binary(ctx, t.TempDir(), "holdfast")
	if err != nil {
		t.Fatal(err)
	}
	c := client(t, s, clientOpts{from: "127.0.0.2"})
	p := newProbe(t, s, clientOpts{}, "probe/")
	idle := p.p50(t)
	const evil = "evil/\x1b[2J\x1b[H\rforged\nline"
	const evilHolder = "h\x1b]0;pwned\x07\u202e"
	for _, k := range []struct{ key, holder string }{{evil, evilHolder}, {"evil/plain", "cron@host1"}} {
		r, err := c.Acquire(ctx, &lockv1.AcquireRequest{Key: k.key, Ttl: durationpb.New(time.Minute), Holder: k.holder})
		if err != nil || !r.GetAcquired() {
			t.Fatalf("acquire %q: %v %v", k.key, r, err)
		}
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, append(args, "--server", s.URL)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("holdfast %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return stdout.String() + stderr.String()
	}
	list := run("list", "evil/")
	expect(t, terminalSafe(list), "holdfast list printed control characters: %q", list)
	expect(t, strings.Contains(list, `"evil/\x1b[2J\x1b[H\rforged\nline"`), "holdfast list does not show the key escaped:\n%s", list)
	if !regexp.MustCompile(`(?m)^evil/plain +cron@host1 +\d+ `).MatchString(list) {
		t.Fatalf("an ordinary key no longer prints as it is:\n%s", list)
	}
	inspect := run("inspect", evil)
	expect(t, terminalSafe(inspect), "holdfast inspect printed control characters: %q", inspect)

	// watch: the event line of the evil key.
	cmd := exec.CommandContext(ctx, bin, "watch", "--prefix", "evil/", "--server", s.URL)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewReader(stdout)
	if l, err := lines.ReadString('\n'); err != nil || !strings.Contains(l, "synced") {
		t.Fatalf("watch: %q %v", l, err)
	}
	r, err := c.Acquire(ctx, &lockv1.AcquireRequest{Key: evil + "2", Ttl: durationpb.New(time.Minute), Holder: evilHolder})
	if err != nil || !r.GetAcquired() {
		t.Fatalf("acquire: %v %v", r, err)
	}
	event, err := lines.ReadString('\n')
	_ = cmd.Process.Signal(syscall.SIGINT)
	_ = cmd.Wait()
	if err != nil {
		t.Fatalf("watch event: %v", err)
	}
	expect(t, terminalSafe(event), "holdfast watch printed control characters: %q", event)

	// Keys like these taken and given back in a loop (every log line and
	// event carries them) beside a normal client.
	stop := during(t, func(ctx context.Context) {
		loop(ctx, 4, func(ctx context.Context, w int) {
			r, err := c.Acquire(ctx, &lockv1.AcquireRequest{Key: evil + string(rune('a'+w)), Ttl: durationpb.New(time.Minute), Holder: evilHolder})
			if err == nil && r.GetAcquired() {
				_, _ = c.Release(ctx, &lockv1.ReleaseRequest{Key: r.GetLease().GetKey(), OwnerToken: r.GetLease().GetOwnerToken()})
			}
		})
	})
	attacked := p.p50(t)
	stop()
	unaffected(t, "9 control characters in keys", idle, attacked, 10)
}
