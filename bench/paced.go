package main

import (
	"context"
	"flag"
	"fmt"
	"sync/atomic"
	"syscall"
	"time"
)

// A paced peer runs its lock and unlock the way the holdfast path's store
// calls arrive at concurrency 1: lock, pause, unlock, pause, with only the
// two store calls timed. Between an Acquire's store call and its Release's
// the holdfast path has the rest of the Acquire's way back and the Release's
// way in (a client RPC and a plugin hop, in halves), and the same again
// before the next Acquire's store call; a store that idles through such a
// pause serves the next call slower (docs/capacity.md, "Why a pause makes
// etcd's calls slower"). The pause is taken from the same run's rows: the
// part of the c1 floor that is not the peer, per store call (pacedPause).
//
// The pause sleeps by default (in the kernel, nanosleep: time.Sleep rounds
// a 500 µs sleep up to about 1.1 ms here). The real path keeps the caller's
// side busy through the pause, hand-off after hand-off between the client,
// the server and the plugin, while the store idles, so a spinning caller
// looked the closer copy; measured against a reference pause made of real
// echo RPCs (a throw-away mode, four alternating runs of each, load average
// 5 to 13, paced minus back-to-back p50 of the peer's pair, medians):
//
//	           spin    sleep   echo RPCs
//	etcd       185     185     223 µs
//	Redis       62      73      85 µs
//	PostgreSQL  14      77      85 µs
//
// The RPCs slow the store's next call about as much as a sleep does and
// more than a spin does (PostgreSQL clearest; etcd is within its noise
// either way): a spinning thread keeps a vCPU awake with no hand-off, which
// the real path's blocking RPCs do not. The sleep overshoots (about 700 µs
// for 560 to 680 asked, at that load; pause_measured_us), the echo
// reference more. docs/capacity.md, "The paced floor".
var paceMode = flag.String("pace", "sleep", "how a paced peer waits between its store calls: sleep (nanosleep) or spin (busy-wait)")

// pacer waits out a paced row's pauses and counts the time they took.
type pacer struct {
	pause time.Duration
	wait  func(time.Duration)
	total atomic.Int64 // ns spent in pauses
	n     atomic.Int64
}

func newPacer(mode string, pause time.Duration) (*pacer, error) {
	p := &pacer{pause: pause}
	switch mode {
	case "spin":
		p.wait = spin
	case "sleep":
		p.wait = nanosleep
	default:
		return nil, fmt.Errorf("-pace: %q is neither spin nor sleep", mode)
	}
	return p, nil
}

// spin busy-waits for d without giving up its thread.
func spin(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
	}
}

// nanosleep sleeps for d in the kernel, on its thread: time.Sleep rounds a
// sub-millisecond sleep up to about a millisecond here (its timer waits in
// epoll, in whole milliseconds), twice the pause asked for.
func nanosleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}

func (p *pacer) wait1() {
	t0 := time.Now()
	p.wait(p.pause)
	p.total.Add(int64(time.Since(t0)))
	p.n.Add(1)
}

// measured is the mean pause the row got, in µs.
func (p *pacer) measured() float64 {
	if n := p.n.Load(); n > 0 {
		return micros(time.Duration(p.total.Load() / n))
	}
	return 0
}

// paced is a lockPair run lock, pause, unlock, pause; it reports the time
// of its two store calls alone.
func (p *pacer) paced(pair lockPair) timedOp {
	return func(ctx context.Context, worker, _ int) (time.Duration, error) {
		t0 := time.Now()
		unlock, err := pair(ctx, worker)
		locked := time.Since(t0)
		if err != nil {
			p.wait1()
			return 0, err
		}
		p.wait1()
		t1 := time.Now()
		err = unlock(ctx)
		unlocked := time.Since(t1)
		p.wait1()
		return locked + unlocked, err
	}
}

// measurePaced measures pair paced at concurrency 1 under name.
func measurePaced(ctx context.Context, name string, dur, pause time.Duration, pair lockPair) (throughput, error) {
	p, err := newPacer(*paceMode, pause)
	if err != nil {
		return throughput{}, err
	}
	r := measureTimed(ctx, name, 1, dur, p.paced(pair))
	r.PauseUs = micros(pause)
	r.PauseMeasuredUs = p.measured()
	return r, nil
}

// pacedPause is the pause before each of a paced peer's store calls: half
// the part of the c1 floor that is not the peer (two client RPCs and two
// plugin hops for the two store calls). It needs the echo, in-process and
// plugin-hop rows at concurrency 1, so those are measured first.
func pacedPause(rows []throughput) (time.Duration, bool) {
	path, ok := pathFloorP50(rows, 1)
	if !ok {
		return 0, false
	}
	return time.Duration(path / 2 * float64(time.Microsecond)), true
}
