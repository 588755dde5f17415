package limits

import (
	"hash/maphash"
	"math"
)

// slot names where a lease is counted: its key (a mutex's lease), or its
// key and owner token (one of the leases of a semaphore or rwlock key).
// As bytes it is key, or key, a zero byte and token.
type slot struct {
	key, token string
	shared     bool
}

func (s slot) len() int {
	if s.shared {
		return len(s.key) + 1 + len(s.token)
	}
	return len(s.key)
}

func (s slot) hash(seed maphash.Seed) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	_, _ = h.WriteString(s.key)
	if s.shared {
		_ = h.WriteByte(0)
		_, _ = h.WriteString(s.token)
	}
	return h.Sum64()
}

// is reports whether b is the slot's bytes.
func (s slot) is(b []byte) bool {
	if !s.shared {
		return string(b) == s.key
	}
	k := len(s.key)
	return len(b) == s.len() && string(b[:k]) == s.key && b[k] == 0 && string(b[k+1:]) == s.token
}

func (s slot) appendTo(b []byte) []byte {
	b = append(b, s.key...)
	if s.shared {
		b = append(b, 0)
		b = append(b, s.token...)
	}
	return b
}

// slotTable gives each slot in it a small id, exactly (slots of equal
// hashes are told apart by their bytes), in structures that hold no
// pointers: a server holding hundreds of thousands of leases keeps one
// entry per lease, and the garbage collector would otherwise visit every
// one of them (a string and a record each) on every cycle, stealing CPU
// from the calls it serves. Ids of removed slots are reused.
type slotTable struct {
	seed  maphash.Seed
	mask  uint64           // of the hash: all ones, but in tests of collisions
	first map[uint64]int32 // hash: the first id of the slots of that hash
	ents  []slotEntry      // by id
	free  []int32          // ids to reuse
	bytes []byte           // the slots' bytes, end to end
	dead  int              // bytes of removed slots in bytes
}

type slotEntry struct {
	hash uint64
	off  int    // in bytes; -1: a free id
	n    uint32 // length in bytes
	next int32  // the next id of the same hash; noID: none
}

const noID int32 = -1

func newSlotTable() *slotTable {
	return &slotTable{seed: maphash.MakeSeed(), mask: ^uint64(0), first: map[uint64]int32{}}
}

// Len is the number of slots in the table.
func (t *slotTable) Len() int { return len(t.ents) - len(t.free) }

func (t *slotTable) slotBytes(e *slotEntry) []byte { return t.bytes[e.off : e.off+int(e.n)] }

// find is s's id, if s is in the table.
func (t *slotTable) find(s slot) (int32, bool) {
	id, ok := t.first[s.hash(t.seed)&t.mask]
	if !ok {
		return noID, false
	}
	for ; id != noID; id = t.ents[id].next {
		if e := &t.ents[id]; int(e.n) == s.len() && s.is(t.slotBytes(e)) {
			return id, true
		}
	}
	return noID, false
}

// add puts s, which must not be in the table, in it, and returns its id.
func (t *slotTable) add(s slot) int32 {
	if len(t.ents)-len(t.free) >= math.MaxInt32 {
		panic("limits: more than 2^31 leases counted")
	}
	h := s.hash(t.seed) & t.mask
	next, ok := t.first[h]
	if !ok {
		next = noID
	}
	e := slotEntry{hash: h, off: len(t.bytes), n: uint32(s.len()), next: next}
	t.bytes = s.appendTo(t.bytes)
	var id int32
	if n := len(t.free); n > 0 {
		id = t.free[n-1]
		t.free = t.free[:n-1]
		t.ents[id] = e
	} else {
		id = int32(len(t.ents))
		t.ents = append(t.ents, e)
	}
	t.first[h] = id
	return id
}

// remove takes the slot of id out of the table; id may be reused.
func (t *slotTable) remove(id int32) {
	e := &t.ents[id]
	if head := t.first[e.hash]; head == id {
		if e.next == noID {
			delete(t.first, e.hash)
		} else {
			t.first[e.hash] = e.next
		}
	} else {
		prev := head
		for t.ents[prev].next != id {
			prev = t.ents[prev].next
		}
		t.ents[prev].next = e.next
	}
	t.dead += int(e.n)
	*e = slotEntry{off: -1, next: noID}
	t.free = append(t.free, id)
	t.compact()
}

// minCompact is the fewest dead bytes worth a compaction.
const minCompact = 64 << 10

// compact copies the live slots' bytes into a new array once more than
// half of the array is dead, so its size stays within twice the live
// bytes; each compaction copies no more bytes than were removed since the
// last one.
func (t *slotTable) compact() {
	if t.dead < minCompact || t.dead*2 < len(t.bytes) {
		return
	}
	live := make([]byte, 0, len(t.bytes)-t.dead)
	for id := range t.ents {
		if e := &t.ents[id]; e.off >= 0 {
			b := t.slotBytes(e)
			e.off = len(live)
			live = append(live, b...)
		}
	}
	t.bytes, t.dead = live, 0
}
