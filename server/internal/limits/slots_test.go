package limits

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

// The table finds exactly the slots put in it, telling apart slots whose
// hashes are equal by their bytes, and a mutex's slot from a shared one.
func TestSlotTableIsExactUnderCollisions(t *testing.T) {
	for _, mask := range []uint64{^uint64(0), 3, 0} { // 0: every slot collides
		tab := newSlotTable()
		tab.mask = mask
		want := map[slot]int32{}
		rng := rand.New(rand.NewPCG(1, mask))
		for n := range 3000 {
			s := slot{key: fmt.Sprintf("k/%d", rng.IntN(400))}
			if n%3 == 0 {
				s.token, s.shared = fmt.Sprintf("t%d", rng.IntN(4)), true
			}
			if id, ok := want[s]; ok {
				if got, found := tab.find(s); !found || got != id {
					t.Fatalf("mask %#x: find(%+v) = %d, %v; want %d", mask, s, got, found, id)
				}
				if rng.IntN(2) == 0 {
					tab.remove(id)
					delete(want, s)
				}
				continue
			}
			if got, found := tab.find(s); found {
				t.Fatalf("mask %#x: find(%+v) = %d, found, before it was added", mask, s, got)
			}
			want[s] = tab.add(s)
		}
		if tab.Len() != len(want) {
			t.Fatalf("mask %#x: %d slots in the table, want %d", mask, tab.Len(), len(want))
		}
		for s, id := range want {
			if got, found := tab.find(s); !found || got != id {
				t.Fatalf("mask %#x: find(%+v) = %d, %v; want %d", mask, s, got, found, id)
			}
		}
	}
}

// A key with a zero byte and a token in it is the same slot as that key's
// shared lease of that token, as the two strings are equal.
func TestSlotTableComparesBytes(t *testing.T) {
	tab := newSlotTable()
	id := tab.add(slot{key: "a", token: "tok", shared: true})
	if got, ok := tab.find(slot{key: "a\x00tok"}); !ok || got != id {
		t.Fatalf("find of the same bytes as a mutex slot = %d, %v; want %d", got, ok, id)
	}
	for _, s := range []slot{{key: "a"}, {key: "a", token: "to", shared: true}, {key: "a", token: "tok2", shared: true}, {key: "a\x00to"}} {
		if _, ok := tab.find(s); ok {
			t.Fatalf("find(%+v) found a slot of other bytes", s)
		}
	}
}

// Removed slots' bytes are reclaimed: the array stays within twice the
// live bytes (past the smallest compaction), and every live slot is still
// found after the compactions.
func TestSlotTableCompacts(t *testing.T) {
	tab := newSlotTable()
	var ids []int32
	live := map[int32]slot{}
	for n := range 200_000 {
		s := slot{key: fmt.Sprintf("compact/%09d", n)}
		id := tab.add(s)
		live[id] = s
		ids = append(ids, id)
		if n >= 1000 { // keep about 1000 live
			old := ids[0]
			ids = ids[1:]
			tab.remove(old)
			delete(live, old)
		}
	}
	liveBytes := 0
	for _, s := range live {
		liveBytes += s.len()
	}
	if limit := 2*liveBytes + minCompact; len(tab.bytes) > limit {
		t.Fatalf("%d bytes kept for %d live bytes, want at most %d", len(tab.bytes), liveBytes, limit)
	}
	for id, s := range live {
		if got, ok := tab.find(s); !ok || got != id {
			t.Fatalf("after compactions find(%q) = %d, %v; want %d", s.key, got, ok, id)
		}
	}
}

// What is kept per lease holds no pointers, so that the garbage collector
// has nothing to visit in it however many leases are counted: the slot
// table's entries, hash index and bytes, the lease records and the heap.
func TestPerLeaseRecordsHoldNoPointers(t *testing.T) {
	l := newLeases(0)
	for _, v := range []any{l.slots.ents, l.slots.first, l.slots.bytes, l.slots.free, l.recs, l.expires} {
		if typ := reflect.TypeOf(v); hasPointers(typ) {
			t.Errorf("%s holds pointers", typ)
		}
	}
}

func hasPointers(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.String, reflect.Interface, reflect.Func, reflect.Chan, reflect.UnsafePointer:
		return true
	case reflect.Slice, reflect.Array:
		return hasPointers(t.Elem()) // a slice's own array pointer is one object, not one per lease
	case reflect.Map:
		return hasPointers(t.Key()) || hasPointers(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if hasPointers(t.Field(i).Type) {
				return true
			}
		}
	}
	return false
}
