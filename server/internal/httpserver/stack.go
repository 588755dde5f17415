package httpserver

import "net/http"

// stackReserve is the stack a request's goroutine is grown to hold, in
// bytes beyond what it uses on entering withStack: the stack becomes
// 16 KiB, which a memory c32 lock call's deepest path fits in (8 KiB did
// not: a request still grew it at 34 frames), and the largest size the
// runtime keeps per-P caches of (a larger reserve would take 32 KiB stacks
// from the heap).
const stackReserve = 12 << 10

// withStack grows the goroutine's stack once, near its bottom, before h
// runs. net/http runs each HTTP/2 request on a new goroutine, which starts
// with the runtime's starting stack (about the average in use among the
// stacks the last GC scanned, most of them parked and shallow); a lock
// call then grew it at 9 frames (the mux), 19 (Connect reading the
// request) or 33 (the engine's gRPC call to the plugin), each growth
// copying every frame below: a tenth of the server's CPU at concurrency 32
// in runtime.newstack. Growing it here, outermost, copies five frames once.
// Every request pays it, a health check or a Watch too (16 KiB for a
// stream's life, little beside its buffers; a GC halves a stack a parked
// stream uses under a quarter of).
func withStack(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reserve(0)
		h.ServeHTTP(w, r)
	})
}

// reserve has a frame of stackReserve bytes: calling it makes the runtime
// grow the stack (in one step, to a size that fits the frame) if it does
// not fit, and leaves the grown stack behind.
//
//go:noinline
func reserve(i int) byte {
	var pad [stackReserve]byte
	pad[i] = byte(i)
	return pad[(i+1)%stackReserve]
}
