package abuse

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
)

// Issue 13, item 1: a token with two namespaces lists "" and pages on. The
// pages hold its own keys only, no page token names (or counts) another
// tenant's keys, and a forged or foreign page token answers
// invalid_argument.
func TestPageTokensStayInTheCallersView(t *testing.T) {
	billing := token{name: "billing", prefixes: []string{"billing/", "shared/billing/"}}
	ops := token{name: "ops", prefixes: []string{"ops/"}}
	normal := token{name: "normal", prefixes: []string{"probe/"}}
	s := serve(t, "--auth-tokens", tokensFile(t, billing, ops, normal))
	ctx := t.Context()
	bc := client(t, s, clientOpts{bearer: billing.secret()})
	oc := client(t, s, clientOpts{bearer: ops.secret()})

	acquire := func(c lockv1connect.LockServiceClient, key string) {
		t.Helper()
		r, err := c.Acquire(ctx, &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(time.Minute)})
		if err != nil || !r.GetAcquired() {
			t.Fatalf("acquire %s: %v %v", key, r, err)
		}
	}
	for i := range 12 {
		acquire(oc, fmt.Sprintf("ops/secret-%02d", i))
	}
	mine := []string{"billing/a", "billing/b", "shared/billing/x"}
	for _, k := range mine {
		acquire(bc, k)
	}
	// Keys that sort between billing's two namespaces and after them.
	acquire(oc, "ops/zz")

	// Page through "" one lock at a time.
	var got []string
	var tokens []string
	tok := ""
	for pages := 0; ; pages++ {
		if pages > 20 {
			t.Fatalf("paging did not end after %d pages: %v", pages, got)
		}
		r, err := bc.List(ctx, &lockv1.ListRequest{Prefix: "", PageSize: 1, PageToken: tok})
		if err != nil {
			t.Fatalf("list page %d: %v", pages, err)
		}
		for _, l := range r.GetLocks() {
			got = append(got, l.GetKey())
		}
		tok = r.GetNextPageToken()
		if tok == "" {
			break
		}
		tokens = append(tokens, tok)
		expect(t, len(r.GetLocks()) == 1, "page %d: %d locks with a next page token (empty pages count another tenant's keys)", pages, len(r.GetLocks()))
	}
	if strings.Join(got, ",") != strings.Join(mine, ",") {
		t.Fatalf("billing's pages: %v, want %v", got, mine)
	}
	for _, tk := range tokens {
		raw, _ := base64.RawURLEncoding.DecodeString(tk)
		expect(t, !strings.Contains(string(raw), "ops/") && !strings.Contains(tk, "ops"),
			"page token %q (%q) names another tenant's key", tk, raw)
	}

	// Forged tokens, and real tokens used outside the view they were
	// issued for.
	forged := map[string]*lockv1.ListRequest{
		"forged m1:billing/zzz":   {Prefix: "", PageToken: base64.RawURLEncoding.EncodeToString([]byte("m1:billing/zzz"))},
		"forged m1:ops/":          {Prefix: "billing/", PageToken: base64.RawURLEncoding.EncodeToString([]byte("m1:ops/"))},
		"garbage":                 {Prefix: "", PageToken: "not-a-token"},
		"another prefix's token":  {Prefix: "billing/", PageToken: tokens[0]},
		"a token one byte off":    {Prefix: "", PageToken: flipMiddle(tokens[0])},
		"billing's token for ops": {Prefix: "ops/"},
	}
	for name, req := range forged {
		c := bc
		if name == "billing's token for ops" {
			c, req.PageToken = oc, tokens[0]
		}
		req.PageSize = 1
		r, err := c.List(ctx, req)
		expect(t, code(err) == "invalid_argument" && strings.Contains(err.Error(), "page_token"),
			"%s: %v %v, want invalid_argument naming page_token", name, r, err)
		for _, l := range r.GetLocks() {
			expect(t, strings.HasPrefix(l.GetKey(), "billing/") || strings.HasPrefix(l.GetKey(), "shared/billing/") || c == oc,
				"%s: listed %q", name, l.GetKey())
		}
	}

	// A normal client while another pages with forged tokens in a loop.
	p := newProbe(t, s, clientOpts{bearer: normal.secret()}, "probe/")
	idle := p.p50(t)
	forgedToken := base64.RawURLEncoding.EncodeToString([]byte("m1:billing/"))
	stop := during(t, func(ctx context.Context) {
		loop(ctx, 4, func(ctx context.Context, w int) {
			_, _ = bc.List(ctx, &lockv1.ListRequest{Prefix: "", PageSize: 1000, PageToken: forgedToken + strings.Repeat("A", w)})
		})
	})
	attacked := p.p50(t)
	stop()
	unaffected(t, "1 forged page tokens", idle, attacked, 10)
}

// flipMiddle changes the middle character of a base64url token.
func flipMiddle(tok string) string {
	b := []byte(tok)
	i := len(b) / 2
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}
