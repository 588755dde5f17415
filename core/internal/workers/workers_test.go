package workers_test

import (
	"bytes"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/holdfast/holdfast/core/internal/workers"
)

// goid is the calling goroutine's id, from its stack's header line
// ("goroutine 7 [running]:").
func goid() uint64 {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	buf = bytes.TrimPrefix(buf, []byte("goroutine "))
	id, _ := strconv.ParseUint(string(buf[:bytes.IndexByte(buf, ' ')]), 10, 64)
	return id
}

// until polls cond for up to five seconds.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
	}
}

// Calls one after the other run on the worker the first one started, not
// on a goroutine each.
func TestGoReusesAParkedWorker(t *testing.T) {
	p := workers.New(4)
	seen := map[uint64]bool{}
	ids := make(chan uint64)
	for range 100 {
		p.Go(func() { ids <- goid() })
		seen[<-ids] = true
		until(t, "a worker parks", func() bool { return p.Idle() >= 1 })
	}
	// Go can find the worker between its count and its park (a few
	// instructions) and start another: a handful, never one a call.
	if len(seen) > 10 {
		t.Fatalf("100 calls one after the other ran on %d goroutines", len(seen))
	}
	p.Close()
	until(t, "the workers end", func() bool { return p.Live() == 0 })
}

// No more than maxIdle workers stay parked after a burst, and Close lets
// them go; Go still runs a call after Close.
func TestIdleBoundAndClose(t *testing.T) {
	p := workers.New(2)
	release := make(chan struct{})
	started := make(chan struct{})
	for range 10 {
		p.Go(func() { started <- struct{}{}; <-release })
	}
	for range 10 {
		<-started
	}
	close(release)
	until(t, "two workers stay parked", func() bool { return p.Idle() == 2 && p.Live() == 2 })
	p.Close()
	until(t, "the parked workers end", func() bool { return p.Live() == 0 })
	ran := make(chan struct{})
	p.Go(func() { close(ran) })
	<-ran
	until(t, "the call's goroutine ends", func() bool { return p.Live() == 0 })
}
