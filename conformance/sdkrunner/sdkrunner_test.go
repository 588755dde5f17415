package sdkrunner

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSplitCommandLine(t *testing.T) {
	for in, want := range map[string][]string{
		"node main.js":                 {"node", "main.js"},
		"  a   b\tc ":                  {"a", "b", "c"},
		`python "my dir/runner.py" -v`: {"python", "my dir/runner.py", "-v"},
		`sh -c 'echo "$X" > y'`:        {"sh", "-c", `echo "$X" > y`},
		`a\ b c`:                       {"a b", "c"},
		`x "" y`:                       {"x", "", "y"},
	} {
		got, err := SplitCommandLine(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("SplitCommandLine(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{`a "b`, `a 'b`, `a\`} {
		if _, err := SplitCommandLine(bad); err == nil {
			t.Errorf("SplitCommandLine(%q): no error", bad)
		}
	}
}

func TestIntegersTravelAsDecimalStrings(t *testing.T) {
	b, err := json.Marshal(LockResult{Guard: "g1", FencingToken: math.MaxUint64, Stamp: Stamp{WallTimeNs: math.MaxInt64, Logical: 3}})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"guard":"g1","fencing_token":"18446744073709551615","stamp":{"wall_time_ns":"9223372036854775807","logical":3}}`
	if string(b) != want {
		t.Fatalf("got %s, want %s", b, want)
	}
	var back LockResult
	if err := json.Unmarshal(b, &back); err != nil || back.FencingToken != math.MaxUint64 || back.Stamp.WallTimeNs != math.MaxInt64 {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
	// A JSON number is accepted too, leniently.
	var u U64
	if err := json.Unmarshal([]byte("42"), &u); err != nil || u != 42 {
		t.Fatalf("number: %d, %v", u, err)
	}
	if err := json.Unmarshal([]byte(`"x"`), &u); err == nil {
		t.Fatal("a non-decimal string was accepted")
	}
}

func TestStampCompare(t *testing.T) {
	a, b := Stamp{WallTimeNs: 5, Logical: 1}, Stamp{WallTimeNs: 5, Logical: 2}
	if a.Compare(b) != -1 || b.Compare(a) != 1 || a.Compare(a) != 0 || (Stamp{WallTimeNs: 6}).Compare(b) != 1 {
		t.Fatal("Compare orders by wall time, then logical")
	}
}

// script is an adapter written in sh: it answers hello, then runs body.
func script(body string) []string {
	return []string{"sh", "-c", `read -r l; echo '{"id":1,"result":{"protocol_version":1,"sdk":"sh","capabilities":["x"]}}'; ` + body}
}

func start(t *testing.T, argv []string) (*Adapter, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return Start(ctx, argv, Options{})
}

func TestCallsMatchAnswersByIDAndEventsArrive(t *testing.T) {
	// Emits an event once it has read the next command, then answers the
	// two commands after it in reverse order.
	a, err := start(t, script(`read -r l2; `+
		`echo '{"event":"lease_lost","guard":"g1","reason":"expired"}'; read -r l3; `+
		`echo '{"id":3,"error":{"kind":"not_acquired","message":"held"}}'; `+
		`echo '{"id":2,"result":{"fencing_token":"7"}}'; read -r l4; echo '{"id":4,"result":{}}'`))
	if err != nil {
		t.Fatal(err)
	}
	if a.Hello.SDK != "sh" || !a.Has("x") || a.Has("y") {
		t.Fatalf("hello: %+v", a.Hello)
	}
	ctx := t.Context()
	type out struct {
		tok uint64
		err error
	}
	first := make(chan out, 1)
	go func() {
		var r FencingTokenResult
		err := a.Call(ctx, CmdFencingToken, GuardArgs{Guard: "g1"}, &r)
		first <- out{uint64(r.FencingToken), err}
	}()
	// The event says the adapter has read the first command (id 2).
	ev, err := a.LeaseLost(ctx, "g1")
	if err != nil || ev.Reason != ReasonExpired {
		t.Fatalf("event: %+v, %v", ev, err)
	}
	err = a.Call(ctx, CmdLock, LockArgs{Client: "c1", Key: "k"}, nil)
	var e *Error
	if !errors.As(err, &e) || e.Kind != KindNotAcquired || KindOf(err) != KindNotAcquired {
		t.Fatalf("second call: %v, want a not_acquired error", err)
	}
	if r := <-first; r.err != nil || r.tok != 7 {
		t.Fatalf("first call: %+v", r)
	}
	if err := a.Close(5 * time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestStartRefusesAnotherProtocolVersion(t *testing.T) {
	_, err := start(t, []string{"sh", "-c", `read -r l; echo '{"id":1,"result":{"protocol_version":2,"sdk":"sh","capabilities":[]}}'; read -r l`})
	if err == nil || !strings.Contains(err.Error(), "version 2") {
		t.Fatalf("Start: %v, want a version error", err)
	}
}

func TestStdoutThatIsNotTheProtocolEndsTheAdapter(t *testing.T) {
	_, err := start(t, []string{"sh", "-c", `read -r l; echo 'hello from a log line'; sleep 5`})
	if !errors.Is(err, ErrAdapterGone) || !strings.Contains(err.Error(), "stderr") {
		t.Fatalf("Start: %v, want ErrAdapterGone naming stderr as the place for logs", err)
	}
}

func TestAnAdapterThatDiesFailsItsCalls(t *testing.T) {
	a, err := start(t, script(`read -r l2; echo dying >&2; exit 3`))
	if err != nil {
		t.Fatal(err)
	}
	err = a.Call(t.Context(), CmdClockNow, ClientArgs{Client: "c1"}, nil)
	if !errors.Is(err, ErrAdapterGone) || !strings.Contains(err.Error(), "dying") {
		t.Fatalf("Call: %v, want ErrAdapterGone with the adapter's stderr", err)
	}
	if err := a.Close(time.Second); err == nil {
		t.Fatal("Close of an adapter that exited 3: no error")
	}
}
