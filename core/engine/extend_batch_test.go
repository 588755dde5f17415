package engine_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/core/engine"
	"github.com/holdfast/holdfast/core/internal/fakebackend"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// Every item of a batch keeps its own request identity, though a batch's
// identities are derived together: after a batch of many leases, some items
// with a request id and some without, each item's id retried as an Extend
// of its own lease renews again, and that id with another ttl is a conflict
// of that lease alone (an item given another item's ID, or its own ID with
// another item's fingerprint, would answer the other way round).
func TestExtendBatchKeepsEachItemsOwnRequestIdentity(t *testing.T) {
	e := newBatchingEngine(t, fakebackend.NewBatching(), engine.Config{})
	ctx := t.Context()
	const n = 9
	keys, toks := make([]string, n), make([]string, n)
	items := make([]*lockv1.ExtendBatchItem, n)
	for i := range n {
		keys[i] = fmt.Sprintf("ebid/%d", i)
		resp, err := e.Acquire(ctx, acquireReq(keys[i]))
		if err != nil || !resp.GetAcquired() {
			t.Fatal(resp, err)
		}
		toks[i] = resp.GetLease().GetOwnerToken()
		items[i] = &lockv1.ExtendBatchItem{Key: keys[i], OwnerToken: toks[i], Ttl: durationpb.New(time.Duration(i+1) * time.Minute)}
		if i%3 != 1 {
			items[i].RequestId = fmt.Sprintf("renewal-%d-0123456789abcdef", i)
		}
	}
	resp, err := e.ExtendBatch(ctx, &lockv1.ExtendBatchRequest{Items: items})
	if err != nil {
		t.Fatal(err)
	}
	for i, res := range resp.GetResults() {
		if !res.GetExtended() {
			t.Fatalf("item %d = %v, want extended", i, res)
		}
	}
	for i, it := range items {
		if it.GetRequestId() == "" {
			continue
		}
		same := &lockv1.ExtendRequest{Key: keys[i], OwnerToken: toks[i], Ttl: it.GetTtl(), RequestId: it.GetRequestId()}
		if ext, err := e.Extend(ctx, same); err != nil || !ext.GetExtended() {
			t.Fatalf("item %d's renewal retried as an Extend = %v, %v; want renewed again", i, ext, err)
		}
		other := &lockv1.ExtendRequest{Key: keys[i], OwnerToken: toks[i], Ttl: durationpb.New(time.Hour), RequestId: it.GetRequestId()}
		if ext, err := e.Extend(ctx, other); !errors.Is(err, engine.ErrInvalidArgument) {
			t.Fatalf("item %d's request id with another ttl = %v, %v; want a request conflict", i, ext, err)
		}
	}
}

// BenchmarkExtendBatch: one watchdog's renewal of 500 leases through the
// engine on the in-process fake (no plugin, no network), with a request id
// per item as the SDKs send and without: the engine's own cost per batch
// (allocations are what the GC pays for on a server renewing 100,000 leases).
func BenchmarkExtendBatch(b *testing.B) {
	const n = 500
	for _, ids := range []bool{false, true} {
		b.Run(fmt.Sprintf("request_ids=%v", ids), func(b *testing.B) {
			f := fakebackend.NewBatching()
			e, err := engine.New(b.Context(), f, engine.Config{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { e.Close(); f.Close() })
			ttl := durationpb.New(time.Minute)
			items := make([]*lockv1.ExtendBatchItem, n)
			for i := range items {
				key := fmt.Sprintf("bench/renew/%03d", i)
				resp, err := e.Acquire(b.Context(), acquireReq(key))
				if err != nil || !resp.GetAcquired() {
					b.Fatal(resp, err)
				}
				items[i] = &lockv1.ExtendBatchItem{Key: key, OwnerToken: resp.GetLease().GetOwnerToken(), Ttl: ttl}
				if ids {
					items[i].RequestId = fmt.Sprintf("renewal-%03d-0123456789abcdef", i)
				}
			}
			req := &lockv1.ExtendBatchRequest{Items: items}
			b.ReportAllocs()
			for b.Loop() {
				resp, err := e.ExtendBatch(b.Context(), req)
				if err != nil || !resp.GetResults()[n-1].GetExtended() {
					b.Fatal(resp, err)
				}
			}
		})
	}
}
