package auth

import (
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// FuzzAuthorize: whatever request bytes a caller with namespaces "a/" and
// "c/x" sends, authorize either refuses with permission_denied or lets
// through only what lies in the namespaces: a named key under one of them,
// a List whose view is ranges inside them, and a Watch prefix inside one
// of them or filtered to them.
func FuzzAuthorize(f *testing.F) {
	for kind, m := range []proto.Message{
		&lockv1.AcquireRequest{Key: "a/1"},
		&lockv1.ReleaseRequest{Key: "b/1"},
		&lockv1.ExtendRequest{Key: "c/x1"},
		&lockv1.InspectRequest{Key: "c/"},
		&lockv1.ListRequest{Prefix: ""},
		&lockv1.WatchRequest{Target: &lockv1.WatchRequest_Prefix{Prefix: "c"}},
		&lockv1.WatchRequest{},
		&lockv1.ProclaimRequest{Key: "a/1", OwnerToken: "t", Value: "v"},
		&lockv1.ObserveRequest{Key: "b/1"},
	} {
		b, _ := proto.Marshal(m)
		f.Add(uint8(kind), b, false)
	}
	f.Fuzz(func(t *testing.T, kind uint8, data []byte, readOnly bool) {
		p := &Principal{Name: "fuzz", Prefixes: []string{"a/", "c/x"}, ReadOnly: readOnly}
		msgs := []proto.Message{&lockv1.AcquireRequest{}, &lockv1.ReleaseRequest{}, &lockv1.ExtendRequest{},
			&lockv1.InspectRequest{}, &lockv1.ListRequest{}, &lockv1.WatchRequest{}, &lockv1.ProclaimRequest{}, &lockv1.ObserveRequest{}}
		m := msgs[int(kind)%len(msgs)]
		if proto.Unmarshal(data, m) != nil {
			return
		}
		g, err := authorize(p, m)
		if err != nil {
			if connect.CodeOf(err) != connect.CodePermissionDenied {
				t.Fatalf("refusal %v is not permission_denied", err)
			}
			if strings.Contains(err.Error(), "fuzz") {
				t.Fatalf("refusal %v names the token", err)
			}
			return
		}
		inside := func(s string) bool { return strings.HasPrefix(s, "a/") || strings.HasPrefix(s, "c/x") }
		switch r := m.(type) {
		case *lockv1.AcquireRequest, *lockv1.ReleaseRequest, *lockv1.ExtendRequest, *lockv1.ProclaimRequest:
			if readOnly {
				t.Fatal("a read-only token may write")
			}
			// Every key the request names (key, or a set's claims/keys)
			// must lie inside.
			keys := writtenKeys(r)
			if len(keys) == 0 {
				t.Fatalf("allowed %v, which names no key", r)
			}
			for _, k := range keys {
				if !inside(k) {
					t.Fatalf("allowed %v: key %q", r, k)
				}
			}
		case *lockv1.InspectRequest:
			if !inside(r.GetKey()) {
				t.Fatalf("allowed %v", r)
			}
		case *lockv1.ObserveRequest:
			if !inside(r.GetKey()) {
				t.Fatalf("allowed %v", r)
			}
		case *lockv1.ListRequest:
			if len(g.view) == 0 {
				t.Fatalf("list of %q without a view", r.GetPrefix())
			}
			for i, pre := range g.view {
				if !inside(pre) {
					t.Fatalf("list of %q reads %q", r.GetPrefix(), pre)
				}
				if i > 0 && (pre <= g.view[i-1] || strings.HasPrefix(pre, g.view[i-1])) {
					t.Fatalf("list of %q: view %q is not disjoint ranges in key order", r.GetPrefix(), g.view)
				}
			}
		case *lockv1.WatchRequest:
			if k, ok := r.GetTarget().(*lockv1.WatchRequest_Key); ok {
				if !inside(k.Key) {
					t.Fatalf("allowed %v", r)
				}
			} else if g.allow == nil && !inside(r.GetPrefix()) {
				t.Fatalf("watch of %q unfiltered", r.GetPrefix())
			}
		}
		if g.allow != nil && (g.allow("b/1") || g.allow("c/") || !g.allow("a/1") || !g.allow("c/x1")) {
			t.Fatal("the filter lets the wrong keys through")
		}
	})
}

// FuzzTokensFile: parsing any file never panics, and what it accepts has a
// name, a 32-byte hash and at least one prefix per token.
func FuzzTokensFile(f *testing.F) {
	f.Add([]byte("- {name: a, token: 0123456789abcdefgh, prefixes: [a/]}\n"))
	f.Add([]byte(`[{"name": "j", "sha256": "` + strings.Repeat("ab", 32) + `", "prefixes": [""], "read_only": true}]`))
	f.Add([]byte("- name: x\n  prefixes: [a/]\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		toks, err := parse(raw)
		if err != nil {
			return
		}
		for _, tk := range toks {
			if tk.p.Name == "" || len(tk.p.Prefixes) == 0 {
				t.Fatalf("accepted %+v", tk.p)
			}
		}
	})
}

// writtenKeys is every non-empty key a write request names.
func writtenKeys(m proto.Message) []string {
	var keys []string
	add := func(k string) {
		if k != "" {
			keys = append(keys, k)
		}
	}
	switch r := m.(type) {
	case *lockv1.AcquireRequest:
		add(r.GetKey())
		for _, c := range r.GetClaims() {
			add(c.GetKey())
		}
	case *lockv1.ReleaseRequest:
		add(r.GetKey())
		for _, k := range r.GetKeys() {
			add(k)
		}
	case *lockv1.ExtendRequest:
		add(r.GetKey())
		for _, k := range r.GetKeys() {
			add(k)
		}
	case *lockv1.ProclaimRequest:
		add(r.GetKey())
	}
	return keys
}
