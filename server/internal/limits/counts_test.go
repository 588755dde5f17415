package limits

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// A lease renewed many times to later ends costs no heap work; it stays
// counted until its last renewal's end, not an earlier one, and leaves
// then.
func TestRenewedLeaseLeavesAtItsLastEnd(t *testing.T) {
	l := newLeases(0)
	t0 := time.Now()
	if err := l.reserve("c", 0, 1, t0); err != nil {
		t.Fatal(err)
	}
	l.granted("c", "k", "tok", false, t0.Add(time.Second))
	var renewed []renewal
	for n := 2; n <= 10; n++ {
		renewed = append(renewed, renewal{key: "k", token: "tok", until: t0.Add(time.Duration(n) * time.Second)})
	}
	l.extendedAll(renewed)
	last := t0.Add(10 * time.Second)
	if until, due, _ := l.counted("k"); !until.Equal(last) || !due.Equal(t0.Add(time.Second)) {
		t.Fatalf("after renewals: until %s, due %s; want until the last end and due unmoved", until.Sub(t0), due.Sub(t0))
	}
	for _, at := range []time.Duration{time.Second, 5 * time.Second, 10*time.Second - time.Nanosecond} {
		if n := l.Total(t0.Add(at)); n != 1 {
			t.Fatalf("%d counted at %s, want 1 (renewed until %s)", n, at, last.Sub(t0))
		}
	}
	if _, due, _ := l.counted("k"); !due.Equal(last) {
		t.Fatalf("due %s after the first end passed, want moved to the last end", due.Sub(t0))
	}
	if n := l.Total(last); n != 0 || len(l.expires) != 0 || l.slots.Len() != 0 {
		t.Fatalf("%d counted at the last end (%d in the heap, %d by key), want 0", n, len(l.expires), l.slots.Len())
	}
}

// A renewal to an earlier end (a shorter TTL) is honoured at once: the
// lease leaves at the new end, before the old one.
func TestShorterRenewalLeavesEarlier(t *testing.T) {
	l := newLeases(0)
	t0 := time.Now()
	for _, k := range []string{"k", "later"} {
		if err := l.reserve("c", 0, 1, t0); err != nil {
			t.Fatal(err)
		}
		l.granted("c", k, "tok", false, t0.Add(time.Minute))
	}
	l.extendedAll([]renewal{{key: "later", token: "tok", until: t0.Add(2 * time.Minute)}, {key: "k", token: "tok", until: t0.Add(time.Second)}})
	if n := l.Total(t0.Add(time.Second - time.Nanosecond)); n != 2 {
		t.Fatalf("%d counted before the shorter end, want 2", n)
	}
	if n := l.Total(t0.Add(time.Second)); n != 1 || l.isCounted("k") {
		t.Fatalf("%d counted at the shorter end (k still counted: %v), want 1", n, l.isCounted("k"))
	}
	if n := l.Total(t0.Add(2 * time.Minute)); n != 0 {
		t.Fatalf("%d counted at the last end, want 0", n)
	}
}

// A renewal of a lease this server does not count (released, or never
// granted here) counts nothing.
func TestRenewalOfAnUncountedLeaseCountsNothing(t *testing.T) {
	l := newLeases(0)
	t0 := time.Now()
	l.extendedAll([]renewal{{key: "k", token: "tok", until: t0.Add(time.Minute)}})
	if n := l.Total(t0); n != 0 || l.slots.Len() != 0 {
		t.Fatalf("%d counted, want 0", n)
	}
}

// counted is the end and heap place of the mutex lease counted on key.
func (l *leases) counted(key string) (until, due time.Time, ok bool) {
	sid, ok := l.slots.find(slot{key: key})
	if !ok {
		return time.Time{}, time.Time{}, false
	}
	r := l.recs[sid]
	return l.epoch.Add(time.Duration(r.until)), l.epoch.Add(time.Duration(r.due)), true
}

func (l *leases) isCounted(key string) bool {
	_, _, ok := l.counted(key)
	return ok
}

// The leases count exactly what a plain model of them counts (a map of
// slots to their caller and end), per caller and in total, through random
// grants (mutex and shared, over and beside counted leases), releases,
// renewals to later and earlier ends, and time passing.
func TestLeasesCountAsTheirModel(t *testing.T) {
	type modelLease struct {
		caller string
		until  time.Time
	}
	l := newLeases(0)
	model := map[string]modelLease{}
	t0 := time.Now()
	now := t0
	rng := rand.New(rand.NewPCG(7, 7))
	callers := []string{"address 10.0.0.1", "address 10.0.0.2", "token a"}
	expire := func() {
		for k, m := range model {
			if !now.Before(m.until) {
				delete(model, k)
			}
		}
	}
	modelSlot := func(key, token string) (string, bool) {
		if _, ok := model[key]; ok {
			return key, true
		}
		s := key + "\x00" + token
		_, ok := model[s]
		return s, ok
	}
	for step := range 20_000 {
		key, token := fmt.Sprintf("k%d", rng.IntN(300)), fmt.Sprintf("t%d", rng.IntN(3))
		ttl := time.Duration(1+rng.IntN(200)) * time.Millisecond
		switch op := rng.IntN(10); {
		case op < 4:
			c := callers[rng.IntN(len(callers))]
			if err := l.reserve(c, 0, 1, now); err != nil {
				t.Fatal(err)
			}
			expire()
			shared := rng.IntN(3) == 0
			l.granted(c, key, token, shared, now.Add(ttl))
			s := key
			if shared {
				s = key + "\x00" + token
			}
			model[s] = modelLease{caller: c, until: now.Add(ttl)}
		case op < 6:
			l.released(key, token)
			if s, ok := modelSlot(key, token); ok {
				delete(model, s)
			}
		case op < 8:
			l.extendedAll([]renewal{{key: key, token: token, until: now.Add(ttl)}})
			if s, ok := modelSlot(key, token); ok {
				m := model[s]
				m.until = now.Add(ttl)
				model[s] = m
			}
		default:
			now = now.Add(time.Duration(rng.IntN(50)) * time.Millisecond)
		}
		got := l.Total(now)
		expire()
		if got != len(model) {
			t.Fatalf("step %d: %d counted, want %d", step, got, len(model))
		}
		per := map[string]int{}
		for _, m := range model {
			per[m.caller]++
		}
		for _, c := range callers {
			if l.counts.per[c] != per[c] {
				t.Fatalf("step %d: %d counted for %s, want %d", step, l.counts.per[c], c, per[c])
			}
		}
		if len(l.callers.ids) != len(per) {
			t.Fatalf("step %d: %d callers interned, want %d (those with leases)", step, len(l.callers.ids), len(per))
		}
	}
}
