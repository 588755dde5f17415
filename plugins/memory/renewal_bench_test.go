package memory

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/holdfast/holdfast/core/backend"
)

// renewalBatches holds n locks and returns them as ExtendBatch requests of
// size items each, as watchdogs send them.
func renewalBatches(b *testing.B, be *Backend, n, size int) [][]backend.ExtendRequest {
	b.Helper()
	ctx := context.Background()
	var batches [][]backend.ExtendRequest
	for i := range n {
		key := fmt.Sprintf("renew/%06d", i)
		if _, err := be.Acquire(ctx, backend.AcquireRequest{Key: key, OwnerToken: "t", TTL: 30 * time.Second}); err != nil {
			b.Fatal(err)
		}
		if i%size == 0 {
			batches = append(batches, make([]backend.ExtendRequest, 0, size))
		}
		last := &batches[len(batches)-1]
		*last = append(*last, backend.ExtendRequest{Key: key, OwnerToken: "t", TTL: 30 * time.Second})
	}
	return batches
}

// BenchmarkExtendBatch renews 100,000 held locks in batches of 500 (one
// op: one batch), from one caller and from many at once (the renewal
// bench's 100 clients, on this process's cores).
func BenchmarkExtendBatch(b *testing.B) {
	const locks, size = 100_000, 500
	for _, parallel := range []bool{false, true} {
		b.Run(fmt.Sprintf("parallel=%v", parallel), func(b *testing.B) {
			be := New()
			defer be.Close()
			batches := renewalBatches(b, be, locks, size)
			ctx := context.Background()
			renew := func(i int) {
				out, err := be.ExtendBatch(ctx, batches[i%len(batches)])
				if err != nil || !out[0].Value.Extended {
					b.Errorf("ExtendBatch: %v", err)
				}
			}
			b.ResetTimer()
			if !parallel {
				for i := 0; b.Loop(); i++ {
					renew(i)
				}
				return
			}
			b.SetParallelism(50)
			b.RunParallel(func(pb *testing.PB) {
				for i := 0; pb.Next(); i++ {
					renew(i)
				}
			})
		})
	}
}

// BenchmarkReaperResift: the reaper's pass over 100,000 leases that were
// all renewed since they were put in the expiry heap (one op: every entry
// moved from its old deadline to its renewed one), the heap work a server
// renewing 100,000 leases does once per TTL under the backend's mutex.
func BenchmarkReaperResift(b *testing.B) {
	const locks = 100_000
	ctx := context.Background()
	for b.Loop() {
		b.StopTimer()
		be := New()
		for i := range locks {
			key := fmt.Sprintf("renew/%06d", i)
			ttl := time.Minute + time.Duration(i%1000)*time.Millisecond
			if _, err := be.Acquire(ctx, backend.AcquireRequest{Key: key, OwnerToken: "t", TTL: ttl}); err != nil {
				b.Fatal(err)
			}
			if _, err := be.Extend(ctx, backend.ExtendRequest{Key: key, OwnerToken: "t", TTL: 2*time.Hour - ttl}); err != nil {
				b.Fatal(err)
			}
		}
		at := time.Now().Add(2 * time.Minute) // every old deadline passed, no renewed one
		b.StartTimer()
		be.mu.Lock()
		be.sweep(at)
		held := len(be.locks)
		be.mu.Unlock()
		b.StopTimer()
		if held != locks {
			b.Fatalf("%d of %d renewed leases held after the pass", held, locks)
		}
		be.Close()
		b.StartTimer()
	}
}
