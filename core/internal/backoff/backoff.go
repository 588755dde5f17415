// Package backoff is the one exponential backoff of core: a delay that
// doubles from a minimum up to a maximum each time it is used, and goes back
// to the minimum when things work again.
package backoff

import "time"

// Backoff is a doubling delay. The zero value is not usable; call New.
type Backoff struct {
	min, max, next time.Duration
}

// New returns a backoff whose first delay is lo and whose delays never
// exceed hi (hi below lo is raised to lo).
func New(lo, hi time.Duration) Backoff {
	return Backoff{min: lo, max: max(lo, hi), next: lo}
}

// Next returns the delay to wait now and doubles the one after it.
func (b *Backoff) Next() time.Duration {
	d := b.next
	b.next = min(2*b.next, b.max)
	return d
}

// Peek returns the delay Next would return, without using it.
func (b *Backoff) Peek() time.Duration { return b.next }

// Reset makes the next delay the minimum again.
func (b *Backoff) Reset() { b.next = b.min }
