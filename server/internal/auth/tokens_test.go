package auth

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

func TestParseErrors(t *testing.T) {
	hash := strings.Repeat("ab", 32)
	for name, tc := range map[string]struct{ body, want string }{
		"empty":          {"[]", "no tokens"},
		"not a list":     {"name: x", "cannot unmarshal"},
		"unknown field":  {"- {name: x, sha256: " + hash + ", prefix: [a/]}", "field prefix not found"},
		"no name":        {"- {sha256: " + hash + ", prefixes: [a/]}", "name: required"},
		"duplicate name": {"- {name: x, sha256: " + hash + ", prefixes: [a/]}\n- {name: x, token: 0123456789abcdefgh, prefixes: [a/]}", `"x" is used twice`},
		"both":           {"- {name: x, sha256: " + hash + ", token: 0123456789abcdefgh, prefixes: [a/]}", "not both"},
		"neither":        {"- {name: x, prefixes: [a/]}", "token or sha256: required"},
		"short token":    {"- {name: x, token: short, prefixes: [a/]}", "too short"},
		"bad hash":       {"- {name: x, sha256: abc, prefixes: [a/]}", "64 hex digits"},
		"no prefixes":    {"- {name: x, sha256: " + hash + "}", "prefixes: at least one"},
		"zero quota":     {"- {name: x, sha256: " + hash + ", prefixes: [a/], max_waiters: 0}", "entry 1 (x): max_waiters: 0, want at least 1"},
		"quota typo":     {"- {name: x, sha256: " + hash + ", prefixes: [a/], max_lock: 3}", "field max_lock not found"},
		"same token": {"- {name: x, sha256: " + hash + ", prefixes: [a/]}\n- {name: y, sha256: " + strings.ToUpper(hash) + ", prefixes: [b/]}",
			"the same token as x"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := parse([]byte(tc.body))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	toks, err := parse([]byte("- {name: q, sha256: " + hash + ", prefixes: [a/], max_locks: 5, max_watch_streams: 2}"))
	if err != nil || toks[0].p.Quota != (Quota{MaxLocks: 5, MaxWatchStreams: 2}) {
		t.Fatalf("quotas: %+v %v", toks, err)
	}
	// JSON is YAML.
	toks, err = parse([]byte(`[{"name": "j", "sha256": "` + hash + `", "prefixes": ["j/"], "read_only": true}]`))
	if err != nil || len(toks) != 1 || !toks[0].p.ReadOnly || toks[0].p.Prefixes[0] != "j/" {
		t.Fatalf("JSON: %v %v", toks, err)
	}
}

func TestReloadOnChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(path+".tmp", []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
	write("- {name: one, token: token-one-0123456789, prefixes: [a/]}\n")
	var logs bytes.Buffer
	s, err := Load(path, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	s.now = func() time.Time { return now }
	if p := s.Authenticate("token-one-0123456789"); p == nil || p.Name != "one" {
		t.Fatalf("token one: %v", p)
	}

	write("- {name: two, token: token-two-0123456789, prefixes: [b/]}\n")
	// Within ReloadInterval the file is not looked at.
	if s.Authenticate("token-two-0123456789") != nil {
		t.Fatal("the file was re-read before ReloadInterval passed")
	}
	now = now.Add(ReloadInterval)
	if p := s.Authenticate("token-two-0123456789"); p == nil || p.Name != "two" || p.Prefixes[0] != "b/" {
		t.Fatalf("after the change: %v", p)
	}
	if s.Authenticate("token-one-0123456789") != nil {
		t.Fatal("a removed token still authenticates")
	}

	// An invalid change keeps the tokens in force and is logged once.
	write("- {name: three, prefixes: [c/]}\n")
	now = now.Add(ReloadInterval)
	if p := s.Authenticate("token-two-0123456789"); p == nil || p.Name != "two" {
		t.Fatalf("after an invalid change: %v", p)
	}
	now = now.Add(ReloadInterval)
	s.Authenticate("token-two-0123456789")
	if n := strings.Count(logs.String(), "invalid"); n != 1 {
		t.Fatalf("the invalid file was logged %d times, want once:\n%s", n, logs.String())
	}
	// A deleted file keeps the tokens in force too.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	now = now.Add(ReloadInterval)
	if s.Authenticate("token-two-0123456789") == nil {
		t.Fatal("a deleted file dropped the tokens in force")
	}
}

// No response message may carry an owner token except Lease (which only
// Acquire, Extend, ExtendBatch and Proclaim answer, to the acquirer, who
// already has the token on Extend, on each ExtendBatch item and on
// Proclaim); LockState, which Inspect, List, Watch and a contended Acquire
// answer, and Leader, which Observe answers, have none.
func TestOwnerTokenOnlyInLease(t *testing.T) {
	fd := lockv1.File_holdfast_lock_v1_lock_proto
	leaseName := (&lockv1.Lease{}).ProtoReflect().Descriptor().FullName()
	var holders []protoreflect.FullName
	seen := map[protoreflect.FullName]bool{}
	var walk func(md protoreflect.MessageDescriptor) bool // reports whether md can reach an owner token
	walk = func(md protoreflect.MessageDescriptor) bool {
		if md.FullName() == leaseName {
			return true
		}
		if seen[md.FullName()] {
			return false
		}
		seen[md.FullName()] = true
		reach := false
		for i := range md.Fields().Len() {
			f := md.Fields().Get(i)
			if strings.Contains(string(f.Name()), "token") && f.Name() != "fencing_token" && f.Name() != "page_token" && f.Name() != "next_page_token" {
				reach = true
			}
			if f.Message() != nil && walk(f.Message()) {
				reach = true
			}
		}
		return reach
	}
	svc := fd.Services().Get(0)
	for i := range svc.Methods().Len() {
		m := svc.Methods().Get(i)
		clear(seen)
		if walk(m.Output()) {
			holders = append(holders, m.Output().FullName())
		}
	}
	want := []protoreflect.FullName{"holdfast.lock.v1.AcquireResponse", "holdfast.lock.v1.ExtendResponse", "holdfast.lock.v1.ExtendBatchResponse", "holdfast.lock.v1.ProclaimResponse"}
	if !slices.Equal(holders, want) {
		t.Fatalf("responses that can carry an owner token: %v, want only %v", holders, want)
	}
	state := (&lockv1.LockState{}).ProtoReflect().Descriptor()
	clear(seen)
	if walk(state) {
		t.Fatal("LockState can carry an owner token")
	}
}
