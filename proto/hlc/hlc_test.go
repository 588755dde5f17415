package hlc_test

import (
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/holdfast/holdfast/proto/hlc"
)

// manualClock is a physical clock the test moves by hand.
type manualClock struct {
	mu  sync.Mutex
	now int64
}

func (m *manualClock) read() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

func (m *manualClock) set(ns int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now = ns
}

func TestNowFollowsPhysicalClock(t *testing.T) {
	pc := &manualClock{now: 1_000}
	c := hlc.NewClock(pc.read, time.Second)

	if got, want := c.Now(), (hlc.Timestamp{WallTime: 1_000}); got != want {
		t.Fatalf("first Now = %v, want %v", got, want)
	}
	// The physical clock stands still: the logical counter orders events.
	if got, want := c.Now(), (hlc.Timestamp{WallTime: 1_000, Logical: 1}); got != want {
		t.Fatalf("second Now = %v, want %v", got, want)
	}
	// The physical clock steps back: the HLC never does.
	pc.set(500)
	if got, want := c.Now(), (hlc.Timestamp{WallTime: 1_000, Logical: 2}); got != want {
		t.Fatalf("Now after step back = %v, want %v", got, want)
	}
	pc.set(2_000)
	if got, want := c.Now(), (hlc.Timestamp{WallTime: 2_000}); got != want {
		t.Fatalf("Now after physical advance = %v, want %v", got, want)
	}
}

func TestUpdateMovesPastRemote(t *testing.T) {
	pc := &manualClock{now: 1_000}
	c := hlc.NewClock(pc.read, time.Second)
	c.Now()

	tests := []struct {
		name   string
		remote hlc.Timestamp
		want   hlc.Timestamp
	}{
		{"remote ahead in wall time", hlc.Timestamp{WallTime: 5_000, Logical: 7}, hlc.Timestamp{WallTime: 5_000, Logical: 8}},
		{"remote equal wall time, lower logical", hlc.Timestamp{WallTime: 5_000, Logical: 3}, hlc.Timestamp{WallTime: 5_000, Logical: 9}},
		{"remote equal wall time, higher logical", hlc.Timestamp{WallTime: 5_000, Logical: 20}, hlc.Timestamp{WallTime: 5_000, Logical: 21}},
		{"remote behind", hlc.Timestamp{WallTime: 10}, hlc.Timestamp{WallTime: 5_000, Logical: 22}},
	}
	for _, tt := range tests {
		got, err := c.Update(tt.remote)
		if err != nil {
			t.Fatalf("%s: Update: %v", tt.name, err)
		}
		if got != tt.want {
			t.Fatalf("%s: Update = %v, want %v", tt.name, got, tt.want)
		}
		if !got.After(tt.remote) {
			t.Fatalf("%s: Update = %v, not after remote %v", tt.name, got, tt.remote)
		}
	}
	// Physical time overtakes every stamp seen: logical resets.
	pc.set(9_000)
	if got, want := c.Now(), (hlc.Timestamp{WallTime: 9_000}); got != want {
		t.Fatalf("Now = %v, want %v", got, want)
	}
}

func TestUpdateRefusesStampBeyondMaxOffset(t *testing.T) {
	pc := &manualClock{now: int64(10 * time.Second)}
	c := hlc.NewClock(pc.read, 500*time.Millisecond)
	before := c.Now()

	far := hlc.Timestamp{WallTime: pc.read() + int64(501*time.Millisecond)}
	if _, err := c.Update(far); !errors.Is(err, hlc.ErrTooFarAhead) {
		t.Fatalf("Update(far ahead) error = %v, want ErrTooFarAhead", err)
	}
	if got := c.Last(); got != before {
		t.Fatalf("refused stamp moved the clock: %v, want %v", got, before)
	}

	near := hlc.Timestamp{WallTime: pc.read() + int64(500*time.Millisecond)}
	got, err := c.Update(near)
	if err != nil {
		t.Fatalf("Update(at the max offset): %v", err)
	}
	if !got.After(near) {
		t.Fatalf("Update = %v, not after %v", got, near)
	}
}

func TestObserveSkipsOffsetCheck(t *testing.T) {
	pc := &manualClock{now: 1_000}
	c := hlc.NewClock(pc.read, time.Millisecond)
	remote := hlc.Timestamp{WallTime: int64(time.Hour)}
	if got := c.Observe(remote); !got.After(remote) {
		t.Fatalf("Observe = %v, not after %v", got, remote)
	}
}

func TestNegativeMaxOffsetDisablesCheck(t *testing.T) {
	c := hlc.NewClock(func() int64 { return 0 }, -1)
	remote := hlc.Timestamp{WallTime: int64(time.Hour)}
	if _, err := c.Update(remote); err != nil {
		t.Fatalf("Update with check disabled: %v", err)
	}
}

func TestNextCarriesLogicalOverflow(t *testing.T) {
	ts := hlc.Timestamp{WallTime: 7, Logical: math.MaxUint32}
	if got, want := ts.Next(), (hlc.Timestamp{WallTime: 8}); got != want {
		t.Fatalf("Next = %v, want %v", got, want)
	}
}

func TestConcurrentNowIsStrictlyIncreasingPerCaller(t *testing.T) {
	c := hlc.NewClock(nil, 0)
	const goroutines, each = 8, 1_000
	seen := make(chan hlc.Timestamp, goroutines*each)
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var prev hlc.Timestamp
			for range each {
				ts := c.Now()
				if !ts.After(prev) {
					t.Errorf("Now = %v, not after previous %v", ts, prev)
					return
				}
				prev = ts
				seen <- ts
			}
		}()
	}
	wg.Wait()
	close(seen)
	unique := make(map[hlc.Timestamp]bool, goroutines*each)
	for ts := range seen {
		if unique[ts] {
			t.Fatalf("stamp %v issued twice", ts)
		}
		unique[ts] = true
	}
}

func TestProtoRoundTrip(t *testing.T) {
	ts := hlc.Timestamp{WallTime: 123, Logical: 4}
	if got := hlc.FromProto(ts.ToProto()); got != ts {
		t.Fatalf("round trip = %v, want %v", got, ts)
	}
	if (hlc.Timestamp{}).ToProto() != nil {
		t.Fatal("zero stamp should encode as nil")
	}
	if !hlc.FromProto(nil).IsZero() {
		t.Fatal("nil should decode as the zero stamp")
	}
}
