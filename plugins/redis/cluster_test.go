package redis_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/plugins/redis"
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
	// Count: every master's locks.
	if n, err := b.Count(ctx); err != nil || n != int64(len(keys)) {
		t.Fatalf("Count = %d, %v; want %d", n, err, len(keys))
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
	clusterSets(t, b, addrs[0])
	// Per key: released, then acquired, and expired (each lock expires on
	// its own master; events of different keys interleave). The expiry
	// comes over another connection (the master's keyspace notifications)
	// than the published acquire, so it may overtake it: Watch promises no
	// order between them, and watchers allow for an end seen before its
	// start (the live view remembers ended tokens).
	seen := map[string][]backend.EventType{}
	for done := 0; done < len(keys); {
		e := w.next(t)
		k := e.Record.Key
		if seen[k] = append(seen[k], e.Type); len(seen[k]) == 3 {
			checkEvents(t, k, seen[k])
			done++
		}
	}
	clusterGrants(t, b, w)
	clusterFollow(t, b)
}

// clusterFollow: Follow's feed is one connection to one master, and a
// PUBLISH reaches every node, so the events of followed keys on every
// master come to it; an unfollowed key's do not, and every key's expiry
// does, from its own master.
func clusterFollow(t *testing.T, b backend.Backend) {
	t.Helper()
	f := follow(t, b)
	f.change(t, backend.FollowChange{Keys: []string{"f/k"}, Prefixes: []string{"f/p/"}})
	keys := []string{"f/k"}
	for i := range 12 {
		keys = append(keys, fmt.Sprintf("f/p/%02d", i))
	}
	for _, k := range keys {
		cycle(t, b, "f/other") // sent, it would come first
		f.expectCycle(t, k, cycle(t, b, k))
	}
	for i := range 6 {
		k := fmt.Sprintf("f/x/%02d", i)
		x := acquire(t, b, k, token(), 50*time.Millisecond)
		if e := f.next(t); e.Type != backend.EventExpired || e.Record.Key != k || e.Record.FencingToken != x.Record.FencingToken {
			t.Fatalf("event %v %+v, want the expiry of the unfollowed %q", e.Type, e.Record, k)
		}
	}
}

// clusterGrants: semaphore grants on keys spread over the masters are
// taken, renewed, read and released by scripts on each key's master, and a
// grant's expiry is announced from its master.
func clusterGrants(t *testing.T, b backend.Backend, w *watcher) {
	t.Helper()
	ctx := ctxT(t)
	for i := range 12 {
		k := fmt.Sprintf("c/sem/%02d", i)
		tok := token()
		r := grant(t, b, k, tok, backend.KindSemaphore, 3, 2, time.Minute)
		if !r.Acquired || grant(t, b, k, token(), backend.KindSemaphore, 3, 2, time.Minute).Acquired {
			t.Fatalf("grants of %q: %+v", k, r)
		}
		if e, err := b.Extend(ctx, backend.ExtendRequest{Key: k, OwnerToken: tok, TTL: time.Minute}); err != nil || !e.Extended {
			t.Fatalf("extend %q: %+v %v", k, e, err)
		}
		if rec, held, err := b.Get(ctx, k); err != nil || !held || rec.InUse != 2 {
			t.Fatalf("get %q: %+v %v %v", k, rec, held, err)
		}
		if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: k, OwnerToken: tok}); err != nil || !ok {
			t.Fatalf("release %q: %v %v", k, ok, err)
		}
		for range 2 { // acquired, released
			if e := w.next(t); e.Record.Key != k || e.Record.Kind != backend.KindSemaphore {
				t.Fatalf("event %v %+v, want one of %q's grant", e.Type, e.Record, k)
			}
		}
	}
	x := grant(t, b, "c/sem/x", token(), backend.KindSemaphore, 3, 1, 50*time.Millisecond)
	// Acquired and expired, in either order (the expiry's connection is
	// another; see TestCluster).
	var got []backend.EventType
	for range 2 {
		e := w.next(t)
		if e.Record.Key != "c/sem/x" || e.Record.FencingToken != x.Record.FencingToken {
			t.Fatalf("event %v %+v, want one of the grant %d", e.Type, e.Record, x.Record.FencingToken)
		}
		got = append(got, e.Type)
	}
	checkEvents(t, "c/sem/x", got)
}

// checkEvents fails unless got is one acquired and one expired event and,
// with three, a released one before the acquired: released and acquired
// come over the same subscription in the order they were published, an
// expiry over another that may overtake either.
func checkEvents(t *testing.T, key string, got []backend.EventType) {
	t.Helper()
	want := []backend.EventType{backend.EventAcquired, backend.EventExpired}
	if len(got) == 3 {
		want = append(want, backend.EventReleased)
	}
	sorted := slices.Clone(got)
	slices.Sort(sorted)
	slices.Sort(want)
	if !slices.Equal(sorted, want) {
		t.Fatalf("key %q: events %v, want each of %v once", key, got, want)
	}
	if len(got) == 3 && slices.Index(got, backend.EventReleased) > slices.Index(got, backend.EventAcquired) {
		t.Fatalf("key %q: events %v, want released before acquired", key, got)
	}
}

// clusterSets: in a Cluster a set whose keys share a hash tag is taken,
// extended and released as one script on the slot's master; a set whose
// keys hash to different slots is refused with ErrFailedPrecondition naming
// the rule, and nothing is taken. The backend's slot is Redis's own
// (CLUSTER KEYSLOT).
func clusterSets(t *testing.T, b backend.Backend, addr string) {
	t.Helper()
	ctx := ctxT(t)
	sets := b.(backend.SetBackend)
	c := goredis.NewClient(&goredis.Options{Addr: addr})
	defer func() { _ = c.Close() }()
	for _, k := range []string{"holdfast:{s/{acct}/1}:lock", "holdfast:{acct}s/%7Bacct%7D/2:lock", "x", "{}y", "a{b}c"} {
		want, err := c.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := redis.ClusterSlot(k); got != int(want) {
			t.Fatalf("slot of %q: %d, Redis says %d", k, got, want)
		}
	}

	tagged := []string{"s/{acct}/1", "s/{acct}/2", "s/{acct}/3"}
	claims := make([]backend.Claim, len(tagged))
	for i, k := range tagged {
		claims[i] = backend.Claim{Key: k}
	}
	tok := token()
	res, err := sets.AcquireSet(ctx, backend.AcquireSetRequest{Claims: claims, OwnerToken: tok, TTL: time.Minute})
	if err != nil || !res.Acquired || len(res.Records) != len(tagged) {
		t.Fatalf("acquire set %q: %+v %v", tagged, res, err)
	}
	ext, err := sets.ExtendSet(ctx, backend.ExtendSetRequest{Keys: tagged, OwnerToken: tok, TTL: time.Minute})
	if err != nil || !ext.Extended {
		t.Fatalf("extend set %q: %+v %v", tagged, ext, err)
	}
	if ok, err := sets.ReleaseSet(ctx, backend.ReleaseSetRequest{Keys: tagged, OwnerToken: tok}); err != nil || !ok {
		t.Fatalf("release set %q: %v %v", tagged, ok, err)
	}

	// Two untagged keys in different slots.
	spread := []string{"s/0", "s/1"}
	for i := 2; redis.ClusterSlot("holdfast:{"+spread[0]+"}:lock") == redis.ClusterSlot("holdfast:{"+spread[1]+"}:lock"); i++ {
		spread[1] = fmt.Sprintf("s/%d", i)
	}
	_, err = sets.AcquireSet(ctx, backend.AcquireSetRequest{
		Claims: []backend.Claim{{Key: spread[0]}, {Key: spread[1]}}, OwnerToken: token(), TTL: time.Minute})
	if !errors.Is(err, backend.ErrFailedPrecondition) || !strings.Contains(err.Error(), "every key of a set must hash to one slot") ||
		!strings.Contains(err.Error(), "hash tag") {
		t.Fatalf("acquire set across slots %q: %v, want failed precondition naming the rule", spread, err)
	}
	for _, k := range spread {
		if _, held, err := b.Get(ctx, k); err != nil || held {
			t.Fatalf("%q after a refused set: held %v, %v", k, held, err)
		}
	}
}
