package holdfast

import (
	"fmt"
	"sync"
)

// StaleTokenError reports a write refused by fencing. errors.Is(err,
// ErrStaleToken) holds.
type StaleTokenError struct {
	Token     uint64 // the token the write carried
	Watermark uint64 // the newest token the resource had seen
}

func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("holdfast: stale fencing token %d: the resource has seen %d", e.Token, e.Watermark)
}

// Unwrap lets errors.Is match ErrStaleToken.
func (e *StaleTokenError) Unwrap() error { return ErrStaleToken }

// ValidateWrite is the check a resource makes before accepting a write
// fenced by a holdfast lease: a token older than the newest token it has
// accepted (its watermark) comes from a holder that has since lost the lock,
// and is refused with a *StaleTokenError. The holder's own repeated writes
// (token equal to the watermark) pass. On success it returns the new
// watermark, max(token, watermark), i.e. token. The resource must store the
// new watermark in the same atomic step as the write it admits (for a
// database: the same transaction, or a conditional update such as
// "UPDATE ... SET token = $t WHERE token <= $t").
func ValidateWrite(token, watermark uint64) (uint64, error) {
	if token < watermark {
		return watermark, &StaleTokenError{Token: token, Watermark: watermark}
	}
	return token, nil
}

// Fence is an in-memory resource-side watermark: Admit accepts a token not
// older than every token admitted before and raises the watermark to it.
// It shows the protocol; a real resource keeps the watermark with its data.
// The zero Fence admits any token. A Fence is safe for concurrent use.
type Fence struct {
	mu        sync.Mutex
	watermark uint64
}

// Admit checks token with ValidateWrite and, when it passes, raises the
// watermark to it, atomically.
func (f *Fence) Admit(token uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	w, err := ValidateWrite(token, f.watermark)
	if err != nil {
		return err
	}
	f.watermark = w
	return nil
}

// Watermark is the newest token admitted so far.
func (f *Fence) Watermark() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.watermark
}
