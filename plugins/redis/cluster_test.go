package redis_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/plugins/redis/redistest"
)

// TestCluster runs the backend on a real three-master Redis Cluster: keys
// spread over every slot owner, each key's lock and meta hash share a slot
// (hash tags, braces in keys escaped), List scans every master, and Watch
// hears releases (PUBLISH is cluster-wide) and expiries (keyspace
// notifications, subscribed on every master).
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node Redis Cluster")
	}
	nodes := redistest.StartCluster(t, 3)
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr
	}
	b := open(t, strings.Join(addrs, ","), "cluster", "true")
	ctx := ctxT(t)
	w := watch(t, b, "c/")

	var keys []string
	for i := range 24 {
		keys = append(keys, fmt.Sprintf("c/%02d", i))
	}
	keys = append(keys, "c/{x}", "c/}", "c/{", "c/%")
	toks := map[string]string{}
	fences := map[string]uint64{}
	for _, k := range keys {
		tok := token()
		r := acquire(t, b, k, tok, time.Minute)
		if !r.Acquired {
			t.Fatalf("acquire %q: %+v", k, r)
		}
		toks[k], fences[k] = tok, r.Record.FencingToken
		if e := w.next(t); e.Type != backend.EventAcquired || e.Record.Key != k {
			t.Fatalf("event %v %q, want acquired %q", e.Type, e.Record.Key, k)
		}
	}
	// The keys really are spread: every master holds some.
	for _, n := range nodes {
		c := goredis.NewClient(&goredis.Options{Addr: n.Addr})
		size, err := c.DBSize(ctx).Result()
		_ = c.Close()
		if err != nil || size == 0 {
			t.Fatalf("master %s holds %d keys (%v)", n.Addr, size, err)
		}
	}
	// List: every key, from every master, in key order.
	var listed []string
	pageToken := ""
	for {
		p, err := b.List(ctx, backend.ListRequest{Prefix: "c/", PageSize: 7, PageToken: pageToken})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Records {
			listed = append(listed, r.Key)
		}
		if pageToken = p.NextPageToken; pageToken == "" {
			break
		}
	}
	if len(listed) != len(keys) {
		t.Fatalf("listed %d keys, want %d: %q", len(listed), len(keys), listed)
	}
	for i := 1; i < len(listed); i++ {
		if listed[i-1] >= listed[i] {
			t.Fatalf("list not in key order: %q", listed)
		}
	}
	for _, k := range keys {
		e, err := b.Extend(ctx, backend.ExtendRequest{Key: k, OwnerToken: toks[k], TTL: time.Minute})
		if err != nil || !e.Extended {
			t.Fatalf("extend %q: %+v %v", k, e, err)
		}
		ok, err := b.Release(ctx, backend.ReleaseRequest{Key: k, OwnerToken: toks[k]})
		if err != nil || !ok {
			t.Fatalf("release %q: %v %v", k, ok, err)
		}
		r := acquire(t, b, k, token(), 50*time.Millisecond)
		if !r.Acquired || r.Record.FencingToken <= fences[k] {
			t.Fatalf("reacquire %q: %+v after fencing %d", k, r, fences[k])
		}
	}
	// Per key, in this order: released, acquired, expired (each lock expires
	// on its own master; events of different keys interleave).
	order := []backend.EventType{backend.EventReleased, backend.EventAcquired, backend.EventExpired}
	seen := map[string]int{}
	for done := 0; done < len(keys); {
		e := w.next(t)
		k := e.Record.Key
		if seen[k] >= len(order) || e.Type != order[seen[k]] {
			t.Fatalf("key %q: event %v after %d events, want %v", k, e.Type, seen[k], order)
		}
		if seen[k]++; seen[k] == len(order) {
			done++
		}
	}
}
