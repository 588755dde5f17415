package backoff

import (
	"slices"
	"testing"
	"time"
)

func TestDoublesUpToMaxAndResets(t *testing.T) {
	b := New(10*time.Millisecond, 50*time.Millisecond)
	var got []time.Duration
	for range 5 {
		got = append(got, b.Next())
	}
	ms := time.Millisecond
	want := []time.Duration{10 * ms, 20 * ms, 40 * ms, 50 * ms, 50 * ms}
	if !slices.Equal(got, want) {
		t.Fatalf("delays %v, want %v", got, want)
	}
	if b.Peek() != 50*time.Millisecond {
		t.Fatalf("Peek = %s after reaching the maximum", b.Peek())
	}
	b.Reset()
	if d := b.Next(); d != 10*time.Millisecond {
		t.Fatalf("after Reset: %s, want the minimum", d)
	}
	b = New(time.Second, time.Millisecond)
	if first, second := b.Next(), b.Next(); first != time.Second || second != time.Second {
		t.Fatalf("a maximum below the minimum: %s then %s, want the minimum twice", first, second)
	}
}
