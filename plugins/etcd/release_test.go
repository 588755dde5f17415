package etcd_test

import (
	"testing"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/plugins/etcd"
	"github.com/holdfast/holdfast/proto/hlc"
)

// A Release of a lock this process granted raises the key's stamp key to
// the later of the Acquire's stamp and its own, without a nested
// transaction (one transaction in all). When the stamp key was written after the Acquire (here
// behind the backend's back, with a later stamp), the Release still
// releases, in the nested form, and never lowers the stamp.
func TestReleaseRaisesStampKey(t *testing.T) {
	t.Parallel()
	eps := requireEtcd(t)
	prefix := testPrefix(t)
	var c rpcCounter
	c.take()
	ctx := ctxT(t)
	b, err := etcd.NewWithDialOptions(ctx, map[string]string{"endpoints": eps, "prefix": prefix}, c.dialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	raw := rawClient(t, eps)
	stampKey := prefix + "locks/r\x00"
	stored := func() string {
		t.Helper()
		resp, err := raw.Get(ctx, stampKey)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("stamp key: %v %v", err, resp)
		}
		return string(resp.Kvs[0].Value)
	}
	release := func(tok string, at hlc.Timestamp, txns int) {
		t.Helper()
		c.take()
		if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: "r", OwnerToken: tok, Stamp: at}); err != nil || !ok {
			t.Fatalf("release at %s: %v %v", at, ok, err)
		}
		if n := c.take()[txnMethod]; n != txns {
			t.Fatalf("release at %s: %d transactions, want %d", at, n, txns)
		}
		if _, held, err := b.Get(ctx, "r"); err != nil || held {
			t.Fatalf("after the release: held=%v %v", held, err)
		}
	}
	base := time.Now().UnixNano()

	for _, tc := range []struct {
		name    string
		release hlc.Timestamp
	}{{"release stamp later", stampAt(base+10, 0)}, {"release stamp earlier", stampAt(base-10, 0)}} {
		tok := token()
		got := acquire(t, b, "r", tok, ttl, stampAt(base, 0))
		if !got.Acquired {
			t.Fatalf("%s: not acquired", tc.name)
		}
		release(tok, tc.release, 1)
		want := etcd.EncodeStamp(tc.release)
		if !tc.release.After(got.Record.Stamp) {
			want = etcd.EncodeStamp(got.Record.Stamp)
		}
		if s := stored(); s != want {
			t.Fatalf("%s: stamp key %x, want %x", tc.name, s, want)
		}
		base = max(got.Record.Stamp.WallTime, tc.release.WallTime) + 100
	}

	tok := token()
	got := acquire(t, b, "r", tok, ttl, stampAt(base, 0))
	if !got.Acquired {
		t.Fatal("not acquired")
	}
	later := etcd.EncodeStamp(stampAt(base+1000, 0))
	if _, err := raw.Put(ctx, stampKey, later); err != nil {
		t.Fatal(err)
	}
	release(tok, stampAt(base+1, 0), 2) // the short form refused, then the nested one
	if s := stored(); s != later {
		t.Fatalf("stamp key %x after a release at an earlier stamp, want %x kept", s, later)
	}
}
