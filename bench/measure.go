package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// throughput is one row of the uncontended table.
type throughput struct {
	Name        string  `json:"name"`
	Concurrency int     `json:"concurrency"`
	Ops         int     `json:"ops"`
	Errors      int     `json:"errors"`
	OpsPerSec   float64 `json:"ops_per_sec"`
	P50         float64 `json:"p50_us"`
	P99         float64 `json:"p99_us"`
	// Baseline names the row this one is compared with; Ratio is
	// ops/s over the baseline's ops/s, LatencyRatio p50 over its p50.
	Baseline     string  `json:"baseline,omitempty"`
	Ratio        float64 `json:"ratio,omitempty"`
	LatencyRatio float64 `json:"latency_ratio,omitempty"`
	// PauseUs is a paced row's pause before each of its store calls (not
	// timed, and asked for: PauseMeasuredUs is the mean pause it got);
	// a paced row's ops/s counts its pauses.
	PauseUs         float64 `json:"pause_us,omitempty"`
	PauseMeasuredUs float64 `json:"pause_measured_us,omitempty"`
}

// op is one timed operation by one worker; i counts the worker's operations.
type op func(ctx context.Context, worker, i int) error

// timedOp is an operation that times itself: it returns the part of its
// time that counts (a paced peer leaves its pauses out).
type timedOp func(ctx context.Context, worker, i int) (time.Duration, error)

// measure runs op from conc workers for dur and reports throughput and
// latency percentiles. An operation that fails counts as an error and its
// latency is not recorded.
func measure(ctx context.Context, name string, conc int, dur time.Duration, fn op) throughput {
	return measureTimed(ctx, name, conc, dur, func(ctx context.Context, worker, i int) (time.Duration, error) {
		t0 := time.Now()
		err := fn(ctx, worker, i)
		return time.Since(t0), err
	})
}

// measureTimed is measure with each operation's latency as the operation
// reports it.
func measureTimed(ctx context.Context, name string, conc int, dur time.Duration, fn timedOp) throughput {
	var (
		mu       sync.Mutex
		all      []time.Duration
		errs     int
		firstErr error
		wg       sync.WaitGroup
	)
	deadline := time.Now().Add(dur)
	start := time.Now()
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var local []time.Duration
			var localErrs int
			var localErr error
			for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
				d, err := fn(ctx, w, i)
				if err != nil {
					localErrs++
					if localErr == nil {
						localErr = err
					}
					continue
				}
				local = append(local, d)
			}
			mu.Lock()
			all = append(all, local...)
			errs += localErrs
			if firstErr == nil {
				firstErr = localErr
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		logf("%s c=%d: %d errors, first: %v", name, conc, errs, firstErr)
	}
	slices.Sort(all)
	return throughput{
		Name:        name,
		Concurrency: conc,
		Ops:         len(all),
		Errors:      errs,
		OpsPerSec:   float64(len(all)) / elapsed.Seconds(),
		P50:         micros(percentile(all, 0.50)),
		P99:         micros(percentile(all, 0.99)),
	}
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p)
	return sorted[i]
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// hotKey is one row of the hot-key table: workers loop acquire-then-release
// on one key.
type hotKey struct {
	Name          string  `json:"name"`
	Workers       int     `json:"workers"`
	Acquisitions  int     `json:"acquisitions"`
	Handoffs      int     `json:"handoffs"`
	HandoffsPerS  float64 `json:"handoffs_per_sec"`
	WaitP50       float64 `json:"wait_p50_us"`
	WaitP99       float64 `json:"wait_p99_us"`
	WaitMax       float64 `json:"wait_max_us"`
	PerWorker     []int   `json:"acquisitions_per_worker"`
	SpreadPercent float64 `json:"spread_percent"` // (max-min)/mean of PerWorker
	Errors        int     `json:"errors"`
	Baseline      string  `json:"baseline,omitempty"`
	Ratio         float64 `json:"ratio,omitempty"` // handoffs/s over the baseline's
}

// locker takes and gives back the hot key for one worker.
type locker interface {
	lock(ctx context.Context) error
	unlock(ctx context.Context) error
}

// warmer is a locker with connections to open before the run starts, so
// that every worker starts queueing at the same moment (a worker still
// dialing when the others queue would start behind them, and the spread
// would show its start, not the order of service).
type warmer interface {
	warm(ctx context.Context) error
}

// measureHotKey runs workers that each loop lock, unlock on one key for dur.
// A handoff is an acquisition by a different worker than the previous one;
// a wait is the time one lock call took.
func measureHotKey(ctx context.Context, name string, lockers []locker, dur time.Duration) hotKey {
	var (
		mu       sync.Mutex
		last     = -1
		handoffs int
		acq      int
		waits    []time.Duration
		per      = make([]int, len(lockers))
		errs     int
		firstErr error
		wg       sync.WaitGroup
	)
	// The run ends by cancellation, not by a deadline: a deadline would be
	// sent to the server, which may answer deadline_exceeded a moment
	// before this process sees its own context end.
	for _, l := range lockers {
		if wl, ok := l.(warmer); ok {
			if err := wl.warm(ctx); err != nil {
				logf("%s: warming up: %v", name, err)
			}
		}
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := make(chan struct{})
	for w, l := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for runCtx.Err() == nil {
				t0 := time.Now()
				if err := l.lock(runCtx); err != nil {
					if runCtx.Err() == nil {
						mu.Lock()
						errs++
						if firstErr == nil {
							firstErr = err
						}
						mu.Unlock()
					}
					continue
				}
				wait := time.Since(t0)
				mu.Lock()
				acq++
				per[w]++
				waits = append(waits, wait)
				if last != w {
					if last != -1 {
						handoffs++
					}
					last = w
				}
				mu.Unlock()
				// Unlock with the parent context: the run ending must not
				// leave the key held for the next row.
				if err := l.unlock(ctx); err != nil {
					mu.Lock()
					errs++
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	stop := time.AfterFunc(dur, cancel)
	defer stop.Stop()
	close(start)
	wg.Wait()
	if firstErr != nil {
		logf("%s: %d errors, first: %v", name, errs, firstErr)
	}
	slices.Sort(waits)
	minN, maxN, sum := per[0], per[0], 0
	for _, n := range per {
		minN, maxN, sum = min(minN, n), max(maxN, n), sum+n
	}
	spread := 0.0
	if sum > 0 {
		spread = 100 * float64(maxN-minN) / (float64(sum) / float64(len(per)))
	}
	var maxWait time.Duration
	if len(waits) > 0 {
		maxWait = waits[len(waits)-1]
	}
	return hotKey{
		Name:          name,
		Workers:       len(lockers),
		Acquisitions:  acq,
		Handoffs:      handoffs,
		HandoffsPerS:  float64(handoffs) / dur.Seconds(),
		WaitP50:       micros(percentile(waits, 0.50)),
		WaitP99:       micros(percentile(waits, 0.99)),
		WaitMax:       micros(maxWait),
		PerWorker:     per,
		SpreadPercent: spread,
		Errors:        errs,
	}
}

func (h hotKey) String() string {
	return fmt.Sprintf("%s: %d handoffs/s", h.Name, int(h.HandoffsPerS))
}
