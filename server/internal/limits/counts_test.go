package limits

import (
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
	ls := l.byKey["k"]
	var renewed []renewal
	for n := 2; n <= 10; n++ {
		renewed = append(renewed, renewal{key: "k", token: "tok", until: t0.Add(time.Duration(n) * time.Second)})
	}
	l.extendedAll(renewed)
	last := t0.Add(10 * time.Second)
	if !ls.until.Equal(last) || !ls.due.Equal(t0.Add(time.Second)) {
		t.Fatalf("after renewals: until %s, due %s; want until the last end and due unmoved", ls.until.Sub(t0), ls.due.Sub(t0))
	}
	for _, at := range []time.Duration{time.Second, 5 * time.Second, 10*time.Second - time.Nanosecond} {
		if n := l.Total(t0.Add(at)); n != 1 {
			t.Fatalf("%d counted at %s, want 1 (renewed until %s)", n, at, last.Sub(t0))
		}
	}
	if !ls.due.Equal(last) {
		t.Fatalf("due %s after the first end passed, want moved to the last end", ls.due.Sub(t0))
	}
	if n := l.Total(last); n != 0 || len(l.expires) != 0 || len(l.byKey) != 0 {
		t.Fatalf("%d counted at the last end (%d in the heap, %d by key), want 0", n, len(l.expires), len(l.byKey))
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
	if n := l.Total(t0.Add(time.Second)); n != 1 || l.byKey["k"] != nil {
		t.Fatalf("%d counted at the shorter end (k still counted: %v), want 1", n, l.byKey["k"] != nil)
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
	if n := l.Total(t0); n != 0 || len(l.byKey) != 0 {
		t.Fatalf("%d counted, want 0", n)
	}
}
