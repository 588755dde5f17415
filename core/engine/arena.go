package engine

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/holdfast/holdfast/proto/hlc"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// arena hands out Ts cut from slices of chunk elements. A List page of a
// thousand locks is five messages per lock (the state, its grant, the
// stamp and expiry time they share, the holders slice); made one by one,
// that is five thousand objects for the GC to sweep per page, beside the Acquires
// the server serves meanwhile. Cut from a few slices it is a handful. The
// zero arena (chunk 0) makes one T at a time, as new would.
//
// A message taken from an arena is an ordinary message; the slice it was
// cut from stays alive while any of its messages does, which is the
// answer's life for the messages of one answer.
type arena[T any] struct {
	chunk int
	free  []T
}

func (a *arena[T]) new() *T {
	if len(a.free) == 0 {
		a.free = make([]T, max(a.chunk, 1))
	}
	p := &a.free[0]
	a.free = a.free[1:]
	return p
}

// slice is n Ts (capacity n: an append to it copies rather than writing
// over its neighbour's).
func (a *arena[T]) slice(n int) []T {
	if len(a.free) < n {
		a.free = make([]T, max(a.chunk, n))
	}
	s := a.free[:n:n]
	a.free = a.free[n:]
	return s
}

// msgs makes the messages of the API's view of records (state): per record
// one at a time (the zero msgs), or for a page sized by pageMsgs.
type msgs struct {
	states  arena[lockv1.LockState]
	grants  arena[lockv1.Grant]
	holders arena[*lockv1.Grant]
	stamps  arena[lockv1.HlcTimestamp]
	times   arena[timestamppb.Timestamp]
	delays  arena[durationpb.Duration]
}

// pageMsgs sizes msgs for n records of mutexes (one grant each, which
// shares its state's stamp and expiry: see grantOf; more grants, or
// lock-delays, take further chunks).
func pageMsgs(n int) *msgs {
	return &msgs{
		states:  arena[lockv1.LockState]{chunk: n},
		grants:  arena[lockv1.Grant]{chunk: n},
		holders: arena[*lockv1.Grant]{chunk: n},
		stamps:  arena[lockv1.HlcTimestamp]{chunk: n},
		times:   arena[timestamppb.Timestamp]{chunk: n},
		delays:  arena[durationpb.Duration]{chunk: min(n, 64)},
	}
}

// stamp is hlc.Timestamp.ToProto: nil for the zero stamp.
func (m *msgs) stamp(t hlc.Timestamp) *lockv1.HlcTimestamp {
	if t.IsZero() {
		return nil
	}
	p := m.stamps.new()
	p.WallTimeNs, p.Logical = t.WallTime, t.Logical
	return p
}

// time is timestamppb.New(t).
func (m *msgs) time(t time.Time) *timestamppb.Timestamp {
	p := m.times.new()
	p.Seconds, p.Nanos = t.Unix(), int32(t.Nanosecond())
	return p
}

// duration is durationpb.New(d).
func (m *msgs) duration(d time.Duration) *durationpb.Duration {
	nanos := d.Nanoseconds()
	secs := nanos / 1e9
	p := m.delays.new()
	p.Seconds, p.Nanos = secs, int32(nanos-secs*1e9)
	return p
}
