package httpserver

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"unsafe"
)

// depth recurses with a 256-byte frame a level, needing about n*256 bytes
// of stack.
//
//go:noinline
func depth(n int) byte {
	var pad [256]byte
	pad[n%256] = byte(n)
	if n == 0 {
		return pad[0]
	}
	return depth(n-1) + pad[(n+1)%256]
}

// movesStack reports whether a call needing 8 KiB of stack, made by h's
// handler on a new goroutine (as net/http runs each HTTP/2 request), moved
// the goroutine's stack: a local's address differs after a stack growth,
// which copies the stack elsewhere.
func movesStack(wrap func(http.Handler) http.Handler) bool {
	moved := make(chan bool)
	h := wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		var local byte
		before := uintptr(unsafe.Pointer(&local))
		local = depth(32)
		moved <- uintptr(unsafe.Pointer(&local)) != before
	}))
	go h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", nil))
	return <-moved
}

// A lock call's goroutine has the stack it will need before the handler
// runs: the handler's deep calls do not grow (copy) it again.
func TestWithStackGrowsTheStackFirst(t *testing.T) {
	if !movesStack(func(h http.Handler) http.Handler { return h }) {
		t.Fatal("without withStack an 8 KiB call did not grow a new goroutine's stack: the test cannot see growth")
	}
	if movesStack(withStack) {
		t.Fatal("behind withStack an 8 KiB call grew the stack")
	}
}
