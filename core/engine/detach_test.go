package engine

import (
	"bytes"
	"runtime"
	"testing"
	"time"
)

// goroutineID is the calling goroutine's id, from its stack trace's first
// line ("goroutine 42 [running]:").
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _, _ := bytes.Cut(bytes.TrimPrefix(buf, []byte("goroutine ")), []byte(" "))
	return string(id)
}

// A goroutine of background carries later calls once its own is done, and
// Close ends the idle ones (goleak checks) and refuses more calls.
func TestBackgroundReusesGoroutines(t *testing.T) {
	var b background
	ran := make(chan string, 1)
	call := func() string {
		if !b.Go(func() { ran <- goroutineID() }) {
			t.Fatal("Go refused a call before Close")
		}
		return <-ran
	}
	first := call()
	// The first goroutine takes a call again once it is back waiting;
	// until then a call may start another.
	deadline := time.Now().Add(5 * time.Second)
	for call() != first {
		if time.Now().After(deadline) {
			t.Fatal("no later call ran on the goroutine of the first one")
		}
		runtime.Gosched()
	}
	b.Close()
	if b.Go(func() { t.Error("a call ran after Close") }) {
		t.Fatal("Go accepted a call after Close")
	}
}
