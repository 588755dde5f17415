package engine

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/core/waitq"
	"github.com/holdfast/holdfast/proto/hlc"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// pageRecords are records of every shape a List page carries: mutexes
// with and without a stamp, an expiry and a lock-delay, a semaphore's and
// an rwlock's holders, an election's leader, repeated past the arenas'
// first chunks.
func pageRecords(t time.Time) []backend.Record {
	var recs []backend.Record
	for i := range 3 {
		at := t.Add(time.Duration(i) * time.Second)
		recs = append(recs,
			backend.Record{Key: "m" + string(rune('a'+i)), FencingToken: uint64(10 + i), Holder: "h", ExpiresAt: at,
				Stamp: hlc.Timestamp{WallTime: at.UnixNano(), Logical: uint32(i)}, LockDelay: 1500 * time.Millisecond},
			backend.Record{Key: "bare" + string(rune('a'+i)), FencingToken: 1},
			backend.Record{Key: "sem" + string(rune('a'+i)), Kind: backend.KindSemaphore, Limit: 3, InUse: 3, FencingToken: 7, ExpiresAt: at,
				Holders: []backend.Grant{
					{FencingToken: 7, Holder: "a", ExpiresAt: at, Stamp: hlc.Timestamp{WallTime: 5}, Permits: 1},
					{FencingToken: 8, Holder: "b", ExpiresAt: at.Add(-time.Hour), Permits: 2},
				}},
			backend.Record{Key: "rw" + string(rune('a'+i)), Kind: backend.KindRWLock, Limit: 4, Permits: 4, InUse: 4, FencingToken: 3,
				Holders: []backend.Grant{{FencingToken: 3, Holder: "w", ExpiresAt: at, Permits: 4}}},
			backend.Record{Key: "el" + string(rune('a'+i)), Kind: backend.KindElection, FencingToken: 9, Value: "leader", ExpiresAt: at,
				Stamp: hlc.Timestamp{WallTime: 9}},
		)
	}
	return recs
}

// A page's states, cut from arenas, equal each record's state made on its
// own, and none shares a holders slice with its neighbour.
func TestPageStatesEqualSingleStates(t *testing.T) {
	e := &Engine{q: waitq.New(0, 0)}
	w, err := e.q.Join("sema")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Leave()
	recs := pageRecords(time.Unix(1_700_000_000, 123_456_789))
	page := e.states(recs)
	if len(page) != len(recs) {
		t.Fatalf("%d states for %d records", len(page), len(recs))
	}
	for i, r := range recs {
		if want := e.state(r, 0); !proto.Equal(page[i], want) {
			t.Fatalf("record %d (%s):\n page  %v\n alone %v", i, r.Key, page[i], want)
		}
	}
	if got := page[2].GetWaiters(); got != 1 {
		t.Fatalf("sema's waiters = %d, want 1", got)
	}
	// Appending to one state's holders must not write over the next's.
	page[0].Holders = append(page[0].Holders, &lockv1.Grant{FencingToken: 99})
	if !proto.Equal(page[1], e.state(recs[1], 0)) {
		t.Fatal("an append to one state's holders changed its neighbour")
	}
}

// A mutex's state as the API defines it, made in an arena: every field,
// the times and the lock-delay converted as timestamppb and durationpb do.
func TestArenaStateOfAMutex(t *testing.T) {
	at := time.Unix(1_700_000_000, 987_654_321)
	r := backend.Record{Key: "k", FencingToken: 42, Holder: "host-1", ExpiresAt: at,
		Stamp: hlc.Timestamp{WallTime: 77, Logical: 3}, LockDelay: 2*time.Second + 250*time.Millisecond}
	got := pageMsgs(1).state(r, 0, 5)
	stamp := &lockv1.HlcTimestamp{WallTimeNs: 77, Logical: 3}
	want := &lockv1.LockState{
		Key: "k", FencingToken: 42, Holder: "host-1", ExpiresAt: timestamppb.New(at), Stamp: stamp, Waiters: 5,
		LockDelay: durationpb.New(r.LockDelay), Kind: lockv1.Kind_KIND_MUTEX, Limit: 1, PermitsInUse: 1,
		Holders: []*lockv1.Grant{{FencingToken: 42, Holder: "host-1", ExpiresAt: timestamppb.New(at), Stamp: stamp,
			Permits: 1, LockDelay: durationpb.New(r.LockDelay)}},
	}
	if !proto.Equal(got, want) {
		t.Fatalf("state:\n got  %v\n want %v", got, want)
	}
	if got := pageMsgs(1).duration(-1500 * time.Millisecond); !proto.Equal(got, durationpb.New(-1500*time.Millisecond)) {
		t.Fatalf("negative duration %v", got)
	}
	if got := pageMsgs(1).time(time.Unix(-5, 1)); !proto.Equal(got, timestamppb.New(time.Unix(-5, 1))) {
		t.Fatalf("time before 1970 %v", got)
	}
}
