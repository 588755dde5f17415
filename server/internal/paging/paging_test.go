package paging_test

import (
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/core/engine"
	"github.com/holdfast/holdfast/plugins/memory"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/server/internal/paging"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newEngine is a real engine on the in-process memory backend, holding
// keys.
func newEngine(t *testing.T, keys ...string) *engine.Engine {
	t.Helper()
	b := memory.New()
	e, err := engine.New(t.Context(), b, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(); b.Close() })
	for _, k := range keys {
		if r, err := e.Acquire(t.Context(), &lockv1.AcquireRequest{Key: k, Ttl: durationpb.New(time.Minute)}); err != nil || !r.GetAcquired() {
			t.Fatalf("acquire %s: %v %v", k, r, err)
		}
	}
	return e
}

// all pages through req's view and returns the keys and the number of
// pages.
func all(t *testing.T, s *paging.Sealer, e *engine.Engine, v paging.View, prefix string, size uint32) ([]string, int) {
	t.Helper()
	var keys []string
	tok := ""
	for pages := 1; pages < 100; pages++ {
		r, err := s.List(t.Context(), v, &lockv1.ListRequest{Prefix: prefix, PageSize: size, PageToken: tok}, e.List)
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		for _, l := range r.GetLocks() {
			keys = append(keys, l.GetKey())
		}
		if tok = r.GetNextPageToken(); tok == "" {
			return keys, pages
		}
		if len(r.GetLocks()) != int(size) {
			t.Fatalf("page %d: %d locks and a next page (page size %d)", pages, len(r.GetLocks()), size)
		}
	}
	t.Fatal("pages never end")
	return nil, 0
}

func TestPagesFollowTheViewInKeyOrder(t *testing.T) {
	e := newEngine(t, "a/1", "a/2", "b/1", "b/2", "b/3", "c/1", "d/1")
	s := paging.RandomSealer()
	view := paging.View{Caller: "ac", Prefixes: []string{"a/", "c/", "d/"}}
	for _, size := range []uint32{1, 2, 3, 1000} {
		keys, _ := all(t, s, e, view, "", size)
		if want := []string{"a/1", "a/2", "c/1", "d/1"}; !slices.Equal(keys, want) {
			t.Fatalf("page size %d: %v, want %v", size, keys, want)
		}
	}
	// Exactly full pages end without an empty page after them.
	if _, pages := all(t, s, e, paging.View{Prefixes: []string{"b/"}}, "b/", 3); pages != 1 {
		t.Fatalf("3 locks in pages of 3 took %d pages", pages)
	}
}

func TestTokensAreSealedAndBound(t *testing.T) {
	e := newEngine(t, "a/1", "a/2", "a/3", "b/1")
	s := paging.RandomSealer()
	view := paging.View{Caller: "alice", Prefixes: []string{"a/"}}
	r, err := s.List(t.Context(), view, &lockv1.ListRequest{Prefix: "", PageSize: 1}, e.List)
	if err != nil || r.GetNextPageToken() == "" {
		t.Fatalf("first page: %v %v", r, err)
	}
	tok := r.GetNextPageToken()
	raw, _ := base64.RawURLEncoding.DecodeString(tok)
	if strings.Contains(string(raw), "a/1") {
		t.Fatalf("the token %q carries the last key", raw)
	}
	flipped := []byte(tok)
	flipped[len(flipped)/2] ^= 1
	for name, tc := range map[string]struct {
		s      *paging.Sealer
		view   paging.View
		prefix string
		token  string
	}{
		"another caller":        {s, paging.View{Caller: "bob", Prefixes: []string{"a/"}}, "", tok},
		"another prefix":        {s, view, "a/", tok},
		"another view":          {s, paging.View{Caller: "alice", Prefixes: []string{"a/", "b/"}}, "", tok},
		"another server's key":  {paging.RandomSealer(), view, "", tok},
		"altered":               {s, view, "", string(flipped)},
		"the backend's own":     {s, view, "", base64.RawURLEncoding.EncodeToString([]byte("m1:a/1"))},
		"not base64":            {s, view, "", "!!"},
		"longer than the limit": {s, view, "", strings.Repeat("A", paging.MaxTokenBytes+1)},
	} {
		_, err := tc.s.List(t.Context(), tc.view, &lockv1.ListRequest{Prefix: tc.prefix, PageSize: 1, PageToken: tc.token}, e.List)
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "page_token") {
			t.Errorf("%s: %v, want invalid_argument naming page_token", name, err)
		}
	}
	// The right caller goes on where it left off.
	r, err = s.List(t.Context(), view, &lockv1.ListRequest{Prefix: "", PageSize: 1, PageToken: tok}, e.List)
	if err != nil || len(r.GetLocks()) != 1 || r.GetLocks()[0].GetKey() != "a/2" {
		t.Fatalf("second page: %v %v", r, err)
	}
}

func TestKeyFileSharesTokensAcrossServers(t *testing.T) {
	e := newEngine(t, "k/1", "k/2")
	path := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(path, []byte(strings.Repeat("s3cr3t-", 6)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	one, err := paging.LoadSealer(path)
	if err != nil {
		t.Fatal(err)
	}
	two, err := paging.LoadSealer(path)
	if err != nil {
		t.Fatal(err)
	}
	view := paging.View{Prefixes: []string{"k/"}}
	r, err := one.List(t.Context(), view, &lockv1.ListRequest{Prefix: "k/", PageSize: 1}, e.List)
	if err != nil {
		t.Fatal(err)
	}
	r, err = two.List(t.Context(), view, &lockv1.ListRequest{Prefix: "k/", PageSize: 1, PageToken: r.GetNextPageToken()}, e.List)
	if err != nil || len(r.GetLocks()) != 1 || r.GetLocks()[0].GetKey() != "k/2" {
		t.Fatalf("the second server's page: %v %v", r, err)
	}
	if err := os.WriteFile(path, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := paging.LoadSealer(path); err == nil || !strings.Contains(err.Error(), "too short") {
		t.Fatalf("a short key file: %v", err)
	}
}

// A backend error reaches the caller as it is.
func TestBackendErrorsPassThrough(t *testing.T) {
	s := paging.RandomSealer()
	boom := errors.New("boom")
	_, err := s.List(context.Background(), paging.View{Prefixes: []string{""}}, &lockv1.ListRequest{},
		func(context.Context, *lockv1.ListRequest) (*lockv1.ListResponse, error) { return nil, boom })
	if !errors.Is(err, boom) {
		t.Fatalf("%v, want the backend's error", err)
	}
}
