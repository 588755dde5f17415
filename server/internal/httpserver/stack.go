package httpserver

import "net/http"

// stackReserve is the stack a lock call's goroutine is grown to hold, in
// bytes beyond what it uses when the call reaches the handler.
const stackReserve = 12 << 10

// withStack grows the goroutine's stack once, near its bottom, before h
// runs. net/http runs each HTTP/2 request on a new goroutine, which starts
// with the runtime's starting stack (about the average in use among the
// stacks the last GC scanned, most of them parked and shallow); a lock
// call then went 19 frames deep (Connect reading the request) and 33 (the
// engine's gRPC call to the plugin) and grew the stack at each, copying
// every frame below: a tenth of the server's CPU at concurrency 32 in
// runtime.newstack. Growing it here, for a frame as large as what the call
// will need, copies a handful of frames once.
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
