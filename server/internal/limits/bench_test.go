package limits

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// heldLeases counts n leases of 64 callers, as a server holding n locks.
func heldLeases(b *testing.B, n int) *leases {
	l := newLeases(0)
	now := time.Now()
	for i := range n {
		id := fmt.Sprintf("address 10.0.0.%d", i%64)
		if err := l.reserve(id, 0, 1, now); err != nil {
			b.Fatal(err)
		}
		l.granted(id, fmt.Sprintf("bench/held/%07d", i), "token", false, now.Add(time.Hour))
	}
	return l
}

// A garbage collection with 300,000 leases counted: what every GC cycle of
// a server holding that many locks pays for the limits' records.
func BenchmarkGCWith300kLeases(b *testing.B) {
	l := heldLeases(b, 300_000)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	for b.Loop() {
		runtime.GC()
	}
	b.ReportMetric(float64(before.HeapAlloc)/300_000, "heap-B/lease")
	runtime.KeepAlive(l)
}

// Grant and release of one lease beside 300,000 counted.
func BenchmarkGrantReleaseBeside300k(b *testing.B) {
	l := heldLeases(b, 300_000)
	now := time.Now()
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("bench/churn/%04d", i)
	}
	n := 0
	for b.Loop() {
		k := keys[n%len(keys)]
		n++
		if err := l.reserve("address 10.0.0.1", 0, 1, now); err != nil {
			b.Fatal(err)
		}
		l.granted("address 10.0.0.1", k, "token", false, now.Add(time.Minute))
		l.released(k, "token")
	}
}
