// Package holdflush lets a streaming handler put off the flush that
// Connect makes after every message, so that messages already queued for a
// stream leave in one write.
//
// A Watch event sent alone costs the server a write system call and a
// round of its HTTP/2 connection's goroutines, and its client a read, per
// watcher; when a watcher has fallen behind (the server was busy, several
// events arrived while it waited for its turn), its queued events can go
// out together. Handler wraps the stream's response writer; the handler
// calls Hold(ctx, true) before each message that has another queued behind
// it and Hold(ctx, false) before the last, whose flush sends them all.
// Nothing is ever held past the handler's next message: a message with
// none queued behind it is flushed as it is sent.
package holdflush

import (
	"context"
	"net/http"
)

type ctxKey struct{}

// writer skips flushes while held.
type writer struct {
	http.ResponseWriter
	rc   *http.ResponseController
	held bool // only the handler's goroutine reads and writes it
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush implements http.Flusher, which Connect calls after every message.
func (w *writer) Flush() { _ = w.FlushError() }

// FlushError is what http.ResponseController calls.
func (w *writer) FlushError() error {
	if w.held {
		return nil
	}
	return w.rc.Flush()
}

// Handler serves next with a response writer whose flushes Hold can put
// off, found through the request's context.
func Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hw := &writer{ResponseWriter: w, rc: http.NewResponseController(w)}
		next.ServeHTTP(hw, r.WithContext(context.WithValue(r.Context(), ctxKey{}, hw)))
	})
}

// Hold puts off (held) or lets through the flushes of the response that
// ctx's request is writing, when it is served by Handler; it must be
// called from the handler's goroutine, and a handler that holds must let
// go before its last message.
func Hold(ctx context.Context, held bool) {
	if w, ok := ctx.Value(ctxKey{}).(*writer); ok {
		w.held = held
	}
}
