package harness

import "sync"

// Tail is an io.Writer that keeps the last bytes written to it: a process's
// stderr, for the error that says why it failed. It is safe for concurrent
// use.
type Tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

// NewTail keeps the last n bytes.
func NewTail(n int) *Tail { return &Tail{max: n} }

// Write keeps p, dropping the oldest bytes over the bound. It never fails.
func (t *Tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// String is what is kept.
func (t *Tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
