package redis_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/plugins/redis"
	"github.com/holdfast/holdfast/plugins/redis/redistest"
	"github.com/holdfast/holdfast/proto/hlc"
)

// eachMode runs test with a single node's batches in one EVAL and
// pipelined.
func eachMode(t *testing.T, test func(t *testing.T)) {
	for _, script := range []bool{true, false} {
		t.Run(map[bool]string{true: "one EVAL", false: "pipelined"}[script], func(t *testing.T) {
			defer redis.SetBatchScript(script)()
			test(t)
		})
	}
}

// A batch is one round trip of the items' own scripts: each item is decided
// on its own (taken, refused with its holder, its own error), including a
// request id repeated with other arguments.
func TestBatchItemsAreDecidedEachOnItsOwn(t *testing.T) {
	eachMode(t, testBatchItemsAreDecidedEachOnItsOwn)
}

func testBatchItemsAreDecidedEachOnItsOwn(t *testing.T) {
	b := open(t, redistest.Addr(t))
	ctx := ctxT(t)
	clock := hlc.NewClock(nil, 0)
	holder := acquire(t, b, "held", token(), time.Minute)
	if !holder.Acquired {
		t.Fatal(holder)
	}
	rid := backend.Request{ID: "rid-0123456789abcdef", Fingerprint: "first"}
	if r, err := b.Acquire(ctx, backend.AcquireRequest{Key: "kept", OwnerToken: token(), TTL: time.Minute, Stamp: clock.Now(), Request: rid}); err != nil || !r.Acquired {
		t.Fatal(r, err)
	}
	tok := token()
	outs, err := b.AcquireBatch(ctx, []backend.AcquireRequest{
		{Key: "free", OwnerToken: tok, TTL: time.Minute, Holder: "batch", Stamp: clock.Now()},
		{Key: "held", OwnerToken: token(), TTL: time.Minute, Stamp: clock.Now()},
		{Key: "too-long", OwnerToken: token(), TTL: 1000 * time.Hour, Stamp: clock.Now()},
		{Key: "kept", OwnerToken: token(), TTL: time.Minute, Stamp: clock.Now(), Request: backend.Request{ID: rid.ID, Fingerprint: "other"}},
	})
	if err != nil || len(outs) != 4 {
		t.Fatalf("AcquireBatch = %v, %v", outs, err)
	}
	if o := outs[0]; o.Err != nil || !o.Value.Acquired || o.Value.Record.Key != "free" || o.Value.Record.Holder != "batch" || o.Value.Record.FencingToken == 0 {
		t.Errorf("the free key: %+v", o)
	}
	if o := outs[1]; o.Err != nil || o.Value.Acquired || o.Value.Record.FencingToken != holder.Record.FencingToken {
		t.Errorf("the held key: %+v, want refused with its holder's record", o)
	}
	if o := outs[2]; !errors.Is(o.Err, backend.ErrInvalidArgument) {
		t.Errorf("a TTL out of range: %+v, want that item's invalid argument", o)
	}
	if o := outs[3]; !errors.Is(o.Err, backend.ErrRequestConflict) {
		t.Errorf("a request id reused with other arguments: %+v, want that item's request conflict", o)
	}
	exts, err := b.ExtendBatch(ctx, []backend.ExtendRequest{
		{Key: "free", OwnerToken: tok, TTL: 2 * time.Minute, Stamp: clock.Now()},
		{Key: "held", OwnerToken: "stale", TTL: time.Minute, Stamp: clock.Now()},
	})
	if err != nil || exts[0].Err != nil || !exts[0].Value.Extended || exts[0].Value.Record.Remaining <= time.Minute ||
		exts[1].Err != nil || exts[1].Value.Extended {
		t.Fatalf("ExtendBatch = %+v, %v", exts, err)
	}
	rels, err := b.ReleaseBatch(ctx, []backend.ReleaseRequest{
		{Key: "free", OwnerToken: tok, Stamp: clock.Now()},
		{Key: "held", OwnerToken: "stale", Stamp: clock.Now()},
		{Key: "nobody", OwnerToken: "", Stamp: clock.Now()},
	})
	if err != nil || rels[0].Err != nil || !rels[0].Value || rels[1].Err != nil || rels[1].Value || rels[2].Err != nil || rels[2].Value {
		t.Fatalf("ReleaseBatch = %+v, %v", rels, err)
	}
	if _, held, _ := b.Get(ctx, "held"); !held {
		t.Fatal("a stale token's release item released the holder")
	}
}

// A Redis that lost its scripts (SCRIPT FLUSH, a restart, a new node)
// refuses EVALSHA without running it; the batch sends its script's text
// then, which loads it.
func TestBatchReloadsFlushedScripts(t *testing.T) { eachMode(t, testBatchReloadsFlushedScripts) }

func testBatchReloadsFlushedScripts(t *testing.T) {
	addr := redistest.Addr(t)
	b := open(t, addr)
	ctx := ctxT(t)
	acquire(t, b, "warm", token(), time.Minute) // the scripts are loaded now
	raw := goredis.NewClient(&goredis.Options{Addr: addr})
	defer raw.Close()
	if err := raw.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	outs, err := b.AcquireBatch(ctx, []backend.AcquireRequest{
		{Key: "after-flush/1", OwnerToken: token(), TTL: time.Minute},
		{Key: "after-flush/2", OwnerToken: token(), TTL: time.Minute},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range outs {
		if o.Err != nil || !o.Value.Acquired {
			t.Fatalf("item %d after SCRIPT FLUSH: %+v", i, o)
		}
	}
}

// Every item of a batch sent to a Redis that is gone answers unavailable,
// at once.
func TestBatchItemsAnswerUnavailableWhenRedisIsGone(t *testing.T) {
	srv := redistest.Start(t)
	b := open(t, srv.Addr)
	acquire(t, b, "k", token(), time.Minute)
	srv.Kill(t)
	start := time.Now()
	outs, err := b.ReleaseBatch(ctxT(t), []backend.ReleaseRequest{{Key: "k", OwnerToken: "x"}, {Key: "j", OwnerToken: "y"}})
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range outs {
		if !errors.Is(o.Err, backend.ErrUnavailable) {
			t.Errorf("item %d: %+v, want unavailable", i, o)
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the batch took %s to fail", d)
	}
}

// In a Redis Cluster the items of a batch live on several masters (one
// EVAL cannot span slots): the batch is pipelined, each item to its key's
// master, and each still answered on its own.
func TestClusterBatch(t *testing.T) {
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
	held := acquire(t, b, "cb/held", token(), time.Minute)
	reqs := []backend.AcquireRequest{{Key: "cb/held", OwnerToken: token(), TTL: time.Minute}}
	for i := range 24 {
		reqs = append(reqs, backend.AcquireRequest{Key: fmt.Sprintf("cb/%02d", i), OwnerToken: token(), TTL: time.Minute})
	}
	outs, err := b.AcquireBatch(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	if o := outs[0]; o.Err != nil || o.Value.Acquired || o.Value.Record.FencingToken != held.Record.FencingToken {
		t.Fatalf("the held key: %+v", o)
	}
	rels := make([]backend.ReleaseRequest, 0, len(reqs)-1)
	for i, o := range outs[1:] {
		if o.Err != nil || !o.Value.Acquired || o.Value.Record.Key != reqs[i+1].Key {
			t.Fatalf("item %d (%s): %+v", i+1, reqs[i+1].Key, o)
		}
		rels = append(rels, backend.ReleaseRequest{Key: reqs[i+1].Key, OwnerToken: reqs[i+1].OwnerToken})
	}
	// The keys really were spread: every master holds some.
	for _, n := range nodes {
		c := goredis.NewClient(&goredis.Options{Addr: n.Addr})
		size, err := c.DBSize(ctx).Result()
		_ = c.Close()
		if err != nil || size == 0 {
			t.Fatalf("master %s holds %d keys (%v)", n.Addr, size, err)
		}
	}
	released, err := b.ReleaseBatch(ctx, rels)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range released {
		if o.Err != nil || !o.Value {
			t.Fatalf("release %s: %+v", rels[i].Key, o)
		}
	}
}

// An item whose script Redis refuses (here its lock key holds a string,
// written by someone else) gets its own error; the other items of the
// batch are decided and answered.
func TestBatchItemRefusedByRedisIsItsOwnError(t *testing.T) { eachMode(t, testBatchItemRefusedByRedis) }

func testBatchItemRefusedByRedis(t *testing.T) {
	addr := redistest.Addr(t)
	prefix := "bt" + token()[:8] + ":"
	b := open(t, addr, "key_prefix", prefix)
	ctx := ctxT(t)
	raw := goredis.NewClient(&goredis.Options{Addr: addr})
	defer raw.Close()
	if err := raw.Set(ctx, prefix+"{wrongtype}:lock", "not a hash", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	outs, err := b.AcquireBatch(ctx, []backend.AcquireRequest{
		{Key: "before", OwnerToken: token(), TTL: time.Minute},
		{Key: "wrongtype", OwnerToken: token(), TTL: time.Minute},
		{Key: "after", OwnerToken: token(), TTL: time.Minute},
	})
	if err != nil {
		t.Fatal(err)
	}
	if o := outs[1]; !errors.Is(o.Err, backend.ErrUnavailable) || !strings.Contains(o.Err.Error(), "WRONGTYPE") {
		t.Errorf("the refused item: %+v, want its own unavailable error naming WRONGTYPE", o)
	}
	for _, i := range []int{0, 2} {
		if o := outs[i]; o.Err != nil || !o.Value.Acquired {
			t.Errorf("item %d beside the refused one: %+v", i, o)
		}
	}
}
