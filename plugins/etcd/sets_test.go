package etcd_test

import (
	"testing"
	"time"

	"github.com/holdfast/holdfast/core/backend"
)

// The keys of a set share one lease. Releasing one key of a set on its own
// must leave that lease alone: were it pooled, the pool would revoke it
// when the backend closes (or hand it to the next lock), and the set's
// other keys would go with it.
func TestSetLeaseOutlivesASingleKeyRelease(t *testing.T) {
	endpoints := requireEtcd(t)
	prefix := map[string]string{"prefix": testPrefix(t)}
	b := open(t, endpoints, prefix)
	ctx := ctxT(t)
	tok := token()
	res, err := b.AcquireSet(ctx, backend.AcquireSetRequest{
		Claims: []backend.Claim{{Key: "a"}, {Key: "b"}}, OwnerToken: tok, TTL: time.Minute, Stamp: stampAt(1, 0)})
	if err != nil || !res.Acquired {
		t.Fatalf("acquire set: %+v %v", res, err)
	}
	if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: "a", OwnerToken: tok, Stamp: stampAt(2, 0)}); err != nil || !ok {
		t.Fatalf("release a: %v %v", ok, err)
	}
	if err := b.Close(); err != nil { // revokes every pooled lease
		t.Fatal(err)
	}
	other := open(t, endpoints, prefix)
	rec, held, err := other.Get(ctx, "b")
	if err != nil || !held || rec.FencingToken != res.Records[1].FencingToken {
		t.Fatalf("b after a's release and the backend's close: %+v held=%v %v", rec, held, err)
	}
	if ok, err := other.ReleaseSet(ctx, backend.ReleaseSetRequest{Keys: []string{"a", "b"}, OwnerToken: tok}); err != nil || ok {
		t.Fatalf("release set with a gone: %v %v, want false", ok, err)
	}
	if ok, err := other.Release(ctx, backend.ReleaseRequest{Key: "b", OwnerToken: tok, Stamp: stampAt(3, 0)}); err != nil || !ok {
		t.Fatalf("release b: %v %v", ok, err)
	}
}
