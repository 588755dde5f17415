// Package hlc is holdfast's Hybrid Logical Clock (Kulkarni et al., "Logical
// Physical Clocks", 2014), the one implementation that the server engine and
// the Go SDK share.
//
// A Timestamp orders events across machines: it never falls behind the
// physical clock of the node that issued it, and a node that receives a stamp
// moves its own clock past it, so "happened before" implies "smaller stamp".
//
// Merging a remote stamp can move a clock any distance forward. Clock.Update
// therefore refuses a remote stamp whose wall time is more than the clock's
// max offset ahead of the local physical clock, without advancing the clock
// (CockroachDB's pkg/util/hlc does the same; its default max offset, 500 ms,
// is ours).
package hlc

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// DefaultMaxOffset is how far ahead of the local physical clock a remote
// stamp may be before Update refuses it.
const DefaultMaxOffset = 500 * time.Millisecond

// ErrTooFarAhead is returned (wrapped) by Clock.Update when a remote stamp is
// further ahead of the local physical clock than the max offset.
var ErrTooFarAhead = errors.New("hlc: stamp too far ahead of the local clock")

// Timestamp is one HLC reading. The zero value is "no stamp" and is before
// every other stamp.
type Timestamp struct {
	WallTime int64  // nanoseconds since the Unix epoch
	Logical  uint32 // orders events within one WallTime
}

// IsZero reports whether t is the zero stamp.
func (t Timestamp) IsZero() bool { return t == Timestamp{} }

// Compare returns -1, 0 or +1 as t is before, equal to or after u.
func (t Timestamp) Compare(u Timestamp) int {
	switch {
	case t.WallTime < u.WallTime:
		return -1
	case t.WallTime > u.WallTime:
		return 1
	case t.Logical < u.Logical:
		return -1
	case t.Logical > u.Logical:
		return 1
	}
	return 0
}

// Before reports whether t is strictly before u.
func (t Timestamp) Before(u Timestamp) bool { return t.Compare(u) < 0 }

// After reports whether t is strictly after u.
func (t Timestamp) After(u Timestamp) bool { return t.Compare(u) > 0 }

// Next is the smallest stamp strictly after t.
func (t Timestamp) Next() Timestamp {
	if t.Logical == math.MaxUint32 {
		return Timestamp{WallTime: t.WallTime + 1}
	}
	return Timestamp{WallTime: t.WallTime, Logical: t.Logical + 1}
}

// String formats t as wall-time nanoseconds and logical counter.
func (t Timestamp) String() string { return fmt.Sprintf("%d.%d", t.WallTime, t.Logical) }

// Max returns the later of a and b.
func Max(a, b Timestamp) Timestamp {
	if a.Before(b) {
		return b
	}
	return a
}

// Clock is a Hybrid Logical Clock. It is safe for concurrent use.
type Clock struct {
	physical  func() int64
	maxOffset time.Duration

	mu   sync.Mutex
	last Timestamp
}

// NewClock returns a clock reading physical time from physical (nanoseconds
// since the Unix epoch; nil means the system clock) that refuses remote stamps
// more than maxOffset ahead (0 means DefaultMaxOffset; negative disables the
// check).
func NewClock(physical func() int64, maxOffset time.Duration) *Clock {
	if physical == nil {
		physical = func() int64 { return time.Now().UnixNano() }
	}
	if maxOffset == 0 {
		maxOffset = DefaultMaxOffset
	}
	return &Clock{physical: physical, maxOffset: maxOffset}
}

// MaxOffset is how far ahead a remote stamp may be; negative means unchecked.
func (c *Clock) MaxOffset() time.Duration { return c.maxOffset }

// Now ticks the clock for a local or send event and returns the new reading,
// strictly after every reading the clock returned or merged before.
func (c *Clock) Now() Timestamp {
	pt := c.physical()
	c.mu.Lock()
	defer c.mu.Unlock()
	if pt > c.last.WallTime {
		c.last = Timestamp{WallTime: pt}
	} else {
		c.last = c.last.Next()
	}
	return c.last
}

// Last returns the latest reading without ticking the clock.
func (c *Clock) Last() Timestamp {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// Update merges a remote stamp (a receive event) and returns the new reading,
// strictly after both remote and every earlier reading. A zero remote stamp
// only ticks the clock. A remote stamp more than the max offset ahead of the
// physical clock is refused with ErrTooFarAhead and leaves the clock as it was.
func (c *Clock) Update(remote Timestamp) (Timestamp, error) {
	if remote.IsZero() {
		return c.Now(), nil
	}
	pt := c.physical()
	if c.maxOffset >= 0 && remote.WallTime-pt > int64(c.maxOffset) {
		return Timestamp{}, fmt.Errorf("%w: %s is %s ahead, more than the max offset %s",
			ErrTooFarAhead, remote, time.Duration(remote.WallTime-pt), c.maxOffset)
	}
	return c.merge(pt, remote), nil
}

// Observe merges a stamp from a trusted source (the backend's record of a
// key's previous holder) without the max-offset check, and returns the new
// reading. Refusing it would leave the clock behind a stamp that already
// orders the key's chain of holders.
func (c *Clock) Observe(remote Timestamp) Timestamp {
	return c.merge(c.physical(), remote)
}

func (c *Clock) merge(pt int64, remote Timestamp) Timestamp {
	c.mu.Lock()
	defer c.mu.Unlock()
	last := c.last
	wall := max(last.WallTime, remote.WallTime, pt)
	var next Timestamp
	switch {
	case wall == last.WallTime && wall == remote.WallTime:
		next = Max(last, remote).Next()
	case wall == last.WallTime:
		next = last.Next()
	case wall == remote.WallTime:
		next = remote.Next()
	default:
		next = Timestamp{WallTime: wall}
	}
	c.last = next
	return next
}

// FromProto converts a wire stamp; nil is the zero stamp.
func FromProto(p *lockv1.HlcTimestamp) Timestamp {
	if p == nil {
		return Timestamp{}
	}
	return Timestamp{WallTime: p.GetWallTimeNs(), Logical: p.GetLogical()}
}

// ToProto converts t to its wire form; the zero stamp becomes nil.
func (t Timestamp) ToProto() *lockv1.HlcTimestamp {
	if t.IsZero() {
		return nil
	}
	return &lockv1.HlcTimestamp{WallTimeNs: t.WallTime, Logical: t.Logical}
}
