package postgres_test

import (
	"errors"
	"testing"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/proto/hlc"
)

// A batch carries its mutex items, with or without a request identity, in
// one round trip; each item is answered on its own, as its single call
// would be, and a conflict of request ids is that item's answer, not a
// failure of the batch.
func TestBatchItemsAreDecidedEachOnItsOwn(t *testing.T) {
	b := open(t, nil)
	ctx := t.Context()
	clock := hlc.NewClock(nil, 0)
	_, held := acquire(t, b, "held", time.Minute)
	rid := backend.Request{ID: "rid-0123456789abcdef", Fingerprint: "first"}
	tok, kept := token(), token()
	reqs := []backend.AcquireRequest{
		{Key: "free", OwnerToken: tok, TTL: time.Minute, Holder: "batch", Stamp: clock.Now()},
		{Key: "held", OwnerToken: token(), TTL: time.Minute, Stamp: clock.Now()},
		{Key: "too-long", OwnerToken: token(), TTL: 1000 * time.Hour, Stamp: clock.Now()},
		{Key: "kept", OwnerToken: kept, TTL: time.Minute, Stamp: clock.Now(), Request: rid},
	}
	outs, err := b.AcquireBatch(ctx, reqs)
	if err != nil || len(outs) != len(reqs) {
		t.Fatalf("AcquireBatch = %v, %v", outs, err)
	}
	if o := outs[0]; o.Err != nil || !o.Value.Acquired || o.Value.Record.Key != "free" || o.Value.Record.Holder != "batch" {
		t.Errorf("the free key: %+v", o)
	}
	if o := outs[1]; o.Err != nil || o.Value.Acquired || o.Value.Record.FencingToken != held.Record.FencingToken {
		t.Errorf("the held key: %+v, want refused with its holder's record", o)
	}
	if o := outs[2]; !errors.Is(o.Err, backend.ErrInvalidArgument) {
		t.Errorf("a TTL out of range: %+v, want that item's invalid argument", o)
	}
	if o := outs[3]; o.Err != nil || !o.Value.Acquired {
		t.Errorf("an item with a request id: %+v", o)
	}
	// The repeat of the kept request is a replay; with other arguments, a
	// conflict; beside them, a plain item and another item with an
	// identity are decided as if alone.
	fresh := backend.Request{ID: "rid-fresh-0123456789", Fingerprint: "f"}
	again, err := b.AcquireBatch(ctx, []backend.AcquireRequest{
		{Key: "kept", OwnerToken: token(), TTL: time.Minute, Stamp: clock.Now(), Request: rid},
		{Key: "free/2", OwnerToken: token(), TTL: time.Minute, Stamp: clock.Now()},
		{Key: "kept", OwnerToken: token(), TTL: time.Minute, Stamp: clock.Now(),
			Request: backend.Request{ID: rid.ID, Fingerprint: "other"}},
		{Key: "fresh", OwnerToken: token(), TTL: time.Minute, Stamp: clock.Now(), Request: fresh},
	})
	if err != nil || again[0].Err != nil || !again[0].Value.Replayed || again[0].Value.Record.FencingToken != outs[3].Value.Record.FencingToken {
		t.Fatalf("the repeat of a kept request: %+v, %v (first: %+v)", again, err, outs[3])
	}
	if o := again[1]; o.Err != nil || !o.Value.Acquired {
		t.Errorf("a plain item beside a replay: %+v", o)
	}
	if o := again[2]; !errors.Is(o.Err, backend.ErrRequestConflict) {
		t.Errorf("a kept request id with other arguments: %+v, want a request conflict", o)
	}
	if o := again[3]; o.Err != nil || !o.Value.Acquired || o.Value.Replayed {
		t.Errorf("a new request id beside a conflict: %+v", o)
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
		{Key: "kept", OwnerToken: kept, Stamp: clock.Now(), Request: backend.Request{ID: "rel-0123456789abcdef", Fingerprint: "r"}},
	})
	if err != nil || rels[0].Err != nil || !rels[0].Value || rels[1].Err != nil || rels[1].Value || rels[2].Err != nil || !rels[2].Value {
		t.Fatalf("ReleaseBatch = %+v, %v", rels, err)
	}
	if _, isHeld, _ := b.Get(ctx, "held"); !isHeld {
		t.Fatal("a stale token's release item released the holder")
	}
	// The repeat of the Release with a request id is answered true; the
	// same id with other arguments is a conflict.
	rels, err = b.ReleaseBatch(ctx, []backend.ReleaseRequest{
		{Key: "kept", OwnerToken: kept, Stamp: clock.Now(), Request: backend.Request{ID: "rel-0123456789abcdef", Fingerprint: "r"}},
		{Key: "kept", OwnerToken: kept, Stamp: clock.Now(), Request: backend.Request{ID: "rel-0123456789abcdef", Fingerprint: "x"}},
	})
	if err != nil || rels[0].Err != nil || !rels[0].Value || !errors.Is(rels[1].Err, backend.ErrRequestConflict) {
		t.Fatalf("repeats of a Release in a batch = %+v, %v", rels, err)
	}
}
