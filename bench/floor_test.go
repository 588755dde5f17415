package main

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// floorTestRows is a made-up run: the path (2 × echo + hop − in process) is
// 2 × 300 + (700 − 200) = 1,100 µs at c1; at c32 echo, hop and peer take
// 1/8,000 + 1/8,000, 1/4,000 and 1/2,000 s an operation, 1/1,000 s in all.
func floorTestRows() []throughput {
	return []throughput{
		{Name: echoRow, Concurrency: 1, Ops: 1, OpsPerSec: 3000, P50: 300},
		{Name: inprocRow, Concurrency: 1, Ops: 1, OpsPerSec: 5000, P50: 200},
		{Name: hopRow, Concurrency: 1, Ops: 1, OpsPerSec: 1400, P50: 700},
		{Name: echoRow, Concurrency: 32, Ops: 1, OpsPerSec: 8000, P50: 4000},
		{Name: inprocRow, Concurrency: 32, Ops: 1, OpsPerSec: 90000, P50: 300},
		{Name: hopRow, Concurrency: 32, Ops: 1, OpsPerSec: 4000, P50: 8000},

		{Name: "holdfast/memory Acquire+Release", Concurrency: 1, Ops: 1, OpsPerSec: 800, P50: 1320},
		{Name: "holdfast/etcd Acquire+Release", Concurrency: 1, Ops: 1, OpsPerSec: 300, P50: 3000},
		{Name: etcdReuseRow, Concurrency: 1, Ops: 1, OpsPerSec: 900, P50: 1000},
		// The paced peer is slower than the same peer back to back.
		{Name: etcdPacedRow, Concurrency: 1, Ops: 1, OpsPerSec: 400, P50: 1400, PauseUs: 550},
		{Name: "holdfast/etcd Acquire+Release", Concurrency: 32, Ops: 1, OpsPerSec: 800, P50: 40000},
		{Name: etcdReuseRow, Concurrency: 32, Ops: 1, OpsPerSec: 2000, P50: 16000},
		// Redis has no paced row in this run.
		{Name: "holdfast/redis Acquire+Release", Concurrency: 1, Ops: 1, OpsPerSec: 600, P50: 1600},
		{Name: redisPeerRow, Concurrency: 1, Ops: 1, OpsPerSec: 9000, P50: 100},
	}
}

func TestFloors(t *testing.T) {
	got := map[string]floorRow{}
	for _, f := range floors(floorTestRows()) {
		got[fmt.Sprintf("%s/c%d", f.Backend, f.Concurrency)] = f
	}
	for _, tc := range []struct {
		name             string
		key              string
		floor, over      float64
		paced, overPaced float64
		floorOps         float64
		peer, peerPaced  string
		pause            float64
	}{
		{name: "memory c1: no peer, so the paced floor is the floor", key: "memory/c1",
			floor: 1100, over: 1.2, paced: 1100, overPaced: 1.2},
		{name: "etcd c1: the back-to-back floor has the unpaced peer, the paced floor the paced one", key: "etcd/c1",
			floor: 2100, over: 3000.0 / 2100, paced: 2500, overPaced: 1.2, peer: etcdReuseRow, peerPaced: etcdPacedRow, pause: 550},
		{name: "redis c1 without its paced row: no paced floor", key: "redis/c1",
			floor: 1200, over: 1600.0 / 1200, peer: redisPeerRow},
		{name: "etcd c32: a throughput floor, never paced", key: "etcd/c32",
			floorOps: 1000, over: 1.25, peer: etcdReuseRow},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, ok := got[tc.key]
			if !ok {
				t.Fatalf("no floor row %s in %+v", tc.key, got)
			}
			for _, v := range []struct {
				what      string
				got, want float64
			}{
				{"floor p50", f.FloorP50, tc.floor},
				{"over floor", f.Over, tc.over},
				{"paced floor p50", f.FloorPacedP50, tc.paced},
				{"over paced floor", f.OverPaced, tc.overPaced},
				{"floor ops/s", f.FloorOps, tc.floorOps},
				{"pause", f.PauseUs, tc.pause},
			} {
				if math.Abs(v.got-v.want) > 1e-9*max(1, v.want) {
					t.Errorf("%s = %v, want %v", v.what, v.got, v.want)
				}
			}
			if f.Peer != tc.peer || f.PeerPaced != tc.peerPaced {
				t.Errorf("peers %q / %q, want %q / %q", f.Peer, f.PeerPaced, tc.peer, tc.peerPaced)
			}
		})
	}
}

func TestFloorsClampANegativeHop(t *testing.T) {
	rows := []throughput{
		{Name: echoRow, Concurrency: 1, Ops: 1, OpsPerSec: 3000, P50: 300},
		{Name: inprocRow, Concurrency: 1, Ops: 1, OpsPerSec: 5000, P50: 800},
		{Name: hopRow, Concurrency: 1, Ops: 1, OpsPerSec: 1400, P50: 700},
		{Name: "holdfast/memory Acquire+Release", Concurrency: 1, Ops: 1, OpsPerSec: 800, P50: 900},
	}
	fs := floors(rows)
	if len(fs) != 1 || fs[0].FloorP50 != 600 {
		t.Fatalf("floors = %+v, want one memory row with floor 600 (the hop clamped to 0)", fs)
	}
	if p, ok := pacedPause(rows); !ok || p != 300*time.Microsecond {
		t.Fatalf("pacedPause = %v, %v; want 300µs", p, ok)
	}
}

func TestPacedPauseIsHalfThePath(t *testing.T) {
	p, ok := pacedPause(floorTestRows())
	if !ok || p != 550*time.Microsecond {
		t.Fatalf("pacedPause = %v, %v; want 550µs (half of 2 × 300 + 700 − 200)", p, ok)
	}
	if _, ok := pacedPause(floorTestRows()[3:]); ok {
		t.Fatal("pacedPause found a pause without the c1 echo row")
	}
}

// The c1 target is judged on the paced floor: the etcd row is 1.43× its
// back-to-back floor and 1.2× its paced one.
func TestC1TargetJudgedOnThePacedFloor(t *testing.T) {
	rows := floorTestRows()
	ts := judge(report{Throughput: rows, Floors: floors(rows)})
	seen := map[string]target{}
	for _, tg := range ts {
		if tg.Issue == 17 && strings.HasPrefix(tg.Name, "c1 p50, ") {
			seen[tg.Name] = tg
		}
	}
	etcd := seen["c1 p50, etcd"]
	if !etcd.Known || !etcd.Met || !strings.Contains(etcd.Want, "paced floor") || !strings.Contains(etcd.Got, "1.20×") {
		t.Errorf("etcd target %+v: want met on the paced floor (1.20×)", etcd)
	}
	if r := seen["c1 p50, redis"]; r.Known || r.Met {
		t.Errorf("redis target %+v: want not measured (no paced row)", r)
	}
	if m := seen["c1 p50, memory"]; !m.Known || !m.Met {
		t.Errorf("memory target %+v: want met (1.20× its floor, paced or not)", m)
	}
}

// A paced row times the two store calls and none of its pauses.
func TestPacedTimesOnlyTheCalls(t *testing.T) {
	const pause = 3 * time.Millisecond
	for _, mode := range []string{"spin", "sleep"} {
		t.Run(mode, func(t *testing.T) {
			p, err := newPacer(mode, pause)
			if err != nil {
				t.Fatal(err)
			}
			calls := 0
			pair := func(context.Context, int) (func(context.Context) error, error) {
				calls++
				return func(context.Context) error { calls++; return nil }, nil
			}
			d, err := p.paced(pair)(context.Background(), 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if calls != 2 {
				t.Fatalf("%d store calls, want 2", calls)
			}
			if d >= pause {
				t.Errorf("timed %v, which counts a pause of %v", d, pause)
			}
			if n := p.n.Load(); n != 2 {
				t.Errorf("%d pauses, want 2 (after the lock and after the unlock)", n)
			}
			if m := p.measured(); m < micros(pause) {
				t.Errorf("mean pause %.0f µs, shorter than the %v asked for", m, pause)
			}
		})
	}
	if _, err := newPacer("nap", pause); err == nil {
		t.Error("newPacer accepted -pace nap")
	}
}
