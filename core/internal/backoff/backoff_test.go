package backoff

import (
	"testing"
	"time"
)

func TestDoublesUpToMaxAndResets(t *testing.T) {
	b := New(10*time.Millisecond, 50*time.Millisecond)
	var got []time.Duration
	for range 5 {
		got = append(got, b.Next())
	}
	want := []time.Duration{10, 20, 40, 50, 50}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("delays %v, want %v ms", got, want)
		}
	}
	if b.Peek() != 50*time.Millisecond {
		t.Fatalf("Peek = %s after reaching the maximum", b.Peek())
	}
	b.Reset()
	if d := b.Next(); d != 10*time.Millisecond {
		t.Fatalf("after Reset: %s, want the minimum", d)
	}
	if b := New(time.Second, time.Millisecond); b.Next() != time.Second || b.Next() != time.Second {
		t.Fatal("a maximum below the minimum is not raised to it")
	}
}
