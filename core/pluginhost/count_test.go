package pluginhost

import (
	"testing"
	"time"

	"github.com/holdfast/holdfast/core/backend"
)

// Count reaches the memory plugin (which counts) and answers its leases,
// each grant of a semaphore once.
func TestCountRoundTrip(t *testing.T) {
	h := start(t, Config{Name: "memory"})
	ctx := ctxT(t)
	if n, err := h.Count(ctx); err != nil || n != 0 {
		t.Fatalf("Count of an empty plugin = %d, %v", n, err)
	}
	if _, err := h.Acquire(ctx, backend.AcquireRequest{Key: "c/m", OwnerToken: "m", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"s1", "s2"} {
		res, err := h.Acquire(ctx, backend.AcquireRequest{Key: "c/sem", OwnerToken: tok, TTL: time.Minute, Kind: backend.KindSemaphore, Limit: 2, Permits: 1})
		if err != nil || !res.Acquired {
			t.Fatal(res, err)
		}
	}
	if n, err := h.Count(ctx); err != nil || n != 3 {
		t.Fatalf("Count = %d, %v; want 3 leases", n, err)
	}
}
