package holdflush

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

// flushCounter counts the flushes that reach the server's writer.
type flushCounter struct {
	*httptest.ResponseRecorder
	flushes int
}

func (f *flushCounter) Flush() { f.flushes++; f.ResponseRecorder.Flush() }

func TestHeldFlushesWaitForTheLastMessage(t *testing.T) {
	rec := &flushCounter{ResponseRecorder: httptest.NewRecorder()}
	h := Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f := w.(http.Flusher)
		for i := range 3 { // three queued messages: one flush
			Hold(r.Context(), i < 2)
			fmt.Fprintf(w, "queued %d\n", i)
			f.Flush()
		}
		Hold(r.Context(), false)
		fmt.Fprintln(w, "alone") // a message with none behind it: flushed at once
		f.Flush()
	}))
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.flushes != 2 {
		t.Fatalf("%d flushes reached the server, want 2 (the last queued message, the one alone)", rec.flushes)
	}
	if got, want := rec.Body.String(), "queued 0\nqueued 1\nqueued 2\nalone\n"; got != want {
		t.Fatalf("body %q, want %q", got, want)
	}
}
