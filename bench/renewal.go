package main

import (
	"container/heap"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
)

// Renewal at scale (-renewal): one memory server carrying N held locks,
// every one renewed at TTL/3 by its client, for a few renewal periods.
// Two ways of renewing are measured on the same server binary:
//
//   - "Extend per lock": each lock renewed by its own Extend, what an SDK
//     watchdog did before ExtendBatch (one RPC per lock per TTL/3);
//   - "ExtendBatch per client": each client renews every lock due within
//     the next TTL/6 in one ExtendBatch (chunks of 500), and each client
//     draws one renewal phase f in [0,1) so that its locks' first renewal
//     is due at sent + TTL/3 - f·TTL/6, as the SDK watchdogs now do
//     (docs/sdk-behaviour.md, "renewal cadence"): RPCs per TTL/3 in
//     proportion to the clients, not to the locks, and clients that took
//     their locks together do not all renew at the same instant;
//
// and, with the real Go SDK, "Go SDK watchdog" (renewal_sdk.go). The
// issue's target cell (100,000 locks, TTL 30s, 100 clients) is measured
// with the Go SDK too by default (-renewal-sdk-cell), besides
// -renewal-modes.
//
// A cell whose locks need more renewals per second (3·N/TTL) than
// -renewal-max-rate is skipped, and the reason printed under the table:
// 100,000 locks at TTL 3s need 100,000 renewals/s, ten times the target
// cell, and the acquisitions then fight a renewal storm the server cannot
// carry (each such cell took over 10 minutes, its numbers only saying that
// the server is overloaded). -renewal-max-rate 0 runs every cell.
// A renewal is missed when it answers extended=false, or when the lock
// could not be renewed before its lease (counted from the moment its last
// successful renewal was sent) ran out.
type renewalRow struct {
	Mode      string        `json:"mode"`
	Locks     int           `json:"locks"`
	TTL       time.Duration `json:"ttl_ns"`
	Clients   int           `json:"clients"`
	Seconds   float64       `json:"seconds"`
	Renewals  int           `json:"renewals"`
	PerSec    float64       `json:"renewals_per_sec"`
	RPCPerSec float64       `json:"rpcs_per_sec"`
	// Latency of one renewal RPC (a whole batch for ExtendBatch), µs.
	P50 float64 `json:"p50_us"`
	P99 float64 `json:"p99_us"`
	// Missed renewals over the whole run (holding the locks included).
	Missed int `json:"missed"`
	Errors int `json:"errors"`
	// CPU of the server and of its plugin process over the window, in %
	// of one core.
	ServerCPU float64 `json:"server_cpu_percent"`
	PluginCPU float64 `json:"plugin_cpu_percent"`
	// BenchCPU is this bench process's CPU over the window, in % of one
	// core: the clients' own work (the Go SDK's watchdogs in the SDK row).
	BenchCPU float64 `json:"bench_cpu_percent"`
	FirstErr string  `json:"first_error,omitempty"`
}

var (
	renewalOn      = flag.Bool("renewal", false, "measure renewal at scale (N held locks under watchdog renewal; several minutes)")
	renewalLocks   = flag.String("renewal-locks", "10000,100000", "-renewal: numbers of held locks")
	renewalTTLs    = flag.String("renewal-ttls", "30s,3s", "-renewal: lease TTLs")
	renewalClients = flag.String("renewal-clients", "1,100", "-renewal: numbers of clients the locks are spread over")
	renewalModes   = flag.String("renewal-modes", "extend,batch", "-renewal: extend (Extend per lock), batch (ExtendBatch per client), sdk (the Go SDK's watchdog)")
	renewalPeriods = flag.Float64("renewal-periods", 3, "-renewal: renewal periods (TTL/3) measured, after every lock is held")
	renewalMinTime = flag.Duration("renewal-min-duration", 5*time.Second, "-renewal: shortest measured window")
	renewalMaxRate = flag.Float64("renewal-max-rate", 20_000, "-renewal: skip a cell needing more renewals/s than this (3 x locks / TTL); 0: no bound")
	renewalSDKCell = flag.String("renewal-sdk-cell", "100000,30s,100", "-renewal: locks,TTL,clients of a cell also measured with the Go SDK's watchdog (the issue's target cell); empty: none")
)

// renewalChunk is the most leases per ExtendBatch, as the SDKs send; and
// renewalInFlight the RPCs one client has in flight at most (Go's HTTP/2
// server allows 250 streams per connection).
const (
	renewalChunk    = 500
	renewalInFlight = 250
)

// renewalTarget is the row that issue 17's renewal target is judged on: 100k
// locks, TTL 30s, 100 clients, the way the SDKs renew now (the Go SDK's
// watchdog when measured, else ExtendBatch per client).
func renewalTarget(rows []renewalRow) *renewalRow {
	var best *renewalRow
	for i := range rows {
		r := &rows[i]
		if r.Locks != 100_000 || r.TTL != 30*time.Second || r.Clients != 100 {
			continue
		}
		switch r.Mode {
		case modeSDK:
			return r
		case modeBatch:
			best = r
		}
	}
	return best
}

const (
	modeExtend = "Extend per lock"
	modeBatch  = "ExtendBatch per client"
	modeSDK    = "Go SDK watchdog"
)

func measureRenewal(ctx context.Context) ([]renewalRow, error) {
	var rows []renewalRow
	locks, err := ints(*renewalLocks)
	if err != nil {
		return nil, fmt.Errorf("-renewal-locks: %w", err)
	}
	clients, err := ints(*renewalClients)
	if err != nil {
		return nil, fmt.Errorf("-renewal-clients: %w", err)
	}
	var ttls []time.Duration
	for _, f := range strings.Split(*renewalTTLs, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || d < 300*time.Millisecond {
			return nil, fmt.Errorf("-renewal-ttls: %q is not a duration of at least 300ms", f)
		}
		ttls = append(ttls, d)
	}
	modes := map[string]string{"extend": modeExtend, "batch": modeBatch, "sdk": modeSDK}
	var asked []string
	for _, m := range strings.Split(*renewalModes, ",") {
		mode, ok := modes[strings.TrimSpace(m)]
		if !ok {
			return nil, fmt.Errorf("-renewal-modes: %q is not extend, batch or sdk", m)
		}
		asked = append(asked, mode)
	}
	sdkCell, err := parseCell(*renewalSDKCell)
	if err != nil {
		return nil, fmt.Errorf("-renewal-sdk-cell: %w", err)
	}
	renewalSkipped = nil
	for _, n := range locks {
		for _, ttl := range ttls {
			for _, c := range clients {
				if rate := 3 * float64(n) / ttl.Seconds(); *renewalMaxRate > 0 && rate > *renewalMaxRate {
					why := fmt.Sprintf("%d locks, TTL %s, %d clients: not measured, it needs %.0f renewals/s, over -renewal-max-rate %.0f", n, ttl, c, rate, *renewalMaxRate)
					logf("renewal: %s", why)
					renewalSkipped = append(renewalSkipped, why)
					continue
				}
				cellModes := asked
				if sdkCell == (renewalCell{n, ttl, c}) && !slices.Contains(asked, modeSDK) {
					cellModes = append(slices.Clip(asked), modeSDK)
				}
				for _, mode := range cellModes {
					logf("renewal: %s, %d locks, TTL %s, %d clients", mode, n, ttl, c)
					row, err := renewalRun(ctx, mode, n, ttl, c)
					if ctx.Err() != nil {
						return rows, ctx.Err()
					}
					if err != nil {
						// One cell failing does not lose the others' rows.
						why := fmt.Sprintf("%s, %d locks, TTL %s, %d clients: failed: %v", mode, n, ttl, c, err)
						logf("renewal: %s", why)
						renewalSkipped = append(renewalSkipped, why)
						continue
					}
					rows = append(rows, row)
				}
			}
		}
	}
	return rows, nil
}

// renewalSkipped says which cells the last measureRenewal skipped, and why.
var renewalSkipped []string

// renewalCell is one cell of the -renewal grid.
type renewalCell struct {
	locks   int
	ttl     time.Duration
	clients int
}

// parseCell reads "locks,TTL,clients"; empty is the zero cell (none).
func parseCell(s string) (renewalCell, error) {
	if strings.TrimSpace(s) == "" {
		return renewalCell{}, nil
	}
	f := strings.Split(s, ",")
	if len(f) != 3 {
		return renewalCell{}, fmt.Errorf("%q is not locks,TTL,clients", s)
	}
	n, err := ints(f[0] + "," + f[2])
	if err != nil {
		return renewalCell{}, fmt.Errorf("%q: %w", s, err)
	}
	ttl, err := time.ParseDuration(strings.TrimSpace(f[1]))
	if err != nil {
		return renewalCell{}, fmt.Errorf("%q: %w", s, err)
	}
	return renewalCell{n[0], ttl, n[1]}, nil
}

// renewalStats collects one run's renewals within its window.
type renewalStats struct {
	mu        sync.Mutex
	open      bool // inside the measured window
	latencies []time.Duration
	renewals  int
	rpcs      int
	missed    int
	errors    int
	firstErr  string
}

func (s *renewalStats) rpc(d time.Duration, renewed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.open {
		return
	}
	s.rpcs++
	s.renewals += renewed
	s.latencies = append(s.latencies, d)
}

// renewed counts n renewals whose RPC is counted apart (the Go SDK's).
func (s *renewalStats) renewed(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open {
		s.renewals += n
	}
}

func (s *renewalStats) miss(n int) {
	s.mu.Lock()
	s.missed += n
	s.mu.Unlock()
}

func (s *renewalStats) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errors++
	if s.firstErr == "" {
		s.firstErr = err.Error()
	}
}

func (s *renewalStats) window(open bool) {
	s.mu.Lock()
	s.open = open
	s.mu.Unlock()
}

// renewalRun measures one scenario on a fresh server.
func renewalRun(ctx context.Context, mode string, n int, ttl time.Duration, clients int) (renewalRow, error) {
	srv, err := startProcess(ctx, filepath.Join(*binDir, "holdfast"), bigServerArgs(n)...)
	if err != nil {
		return renewalRow{}, err
	}
	defer srv.stop()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stats := &renewalStats{}
	var renew func(ctx context.Context, i int, key string) (stop func(), err error)
	var closeAll func()
	if mode == modeSDK {
		renew, closeAll, err = sdkRenewers(runCtx, srv.addr, clients, ttl, stats)
		if err != nil {
			return renewalRow{}, err
		}
	} else {
		rs := make([]*renewer, clients)
		var wg sync.WaitGroup
		for i := range rs {
			rs[i] = newRenewer(newClient(srv.addr), ttl, mode == modeBatch, rand.Float64(), stats)
			wg.Go(func() { rs[i].loop(runCtx) })
		}
		renew = func(ctx context.Context, i int, key string) (func(), error) {
			r := rs[i%clients]
			sent := time.Now()
			resp, err := r.rpc.Acquire(ctx, &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(ttl)})
			if err != nil {
				return nil, err
			}
			if !resp.GetAcquired() {
				return nil, fmt.Errorf("%s not acquired", key)
			}
			r.add(key, resp.GetLease().GetOwnerToken(), sent)
			return nil, nil
		}
		closeAll = func() { cancel(); wg.Wait() }
	}
	run := fmt.Sprintf("renew/%d", time.Now().UnixNano())
	if err := parallel(ctx, n, func(i int) error {
		_, err := renew(ctx, i, fmt.Sprintf("%s/%d", run, i))
		return err
	}); err != nil {
		closeAll()
		return renewalRow{}, fmt.Errorf("holding %d locks: %w", n, err)
	}
	// Settle for one period (every lock renewed at least once), then
	// measure.
	sleepCtx(ctx, ttl/3)
	window := max(time.Duration(float64(ttl/3)**renewalPeriods), *renewalMinTime)
	pluginPID, _, _ := srv.logged()
	cpu0s, cpu0p, cpu0b := cpuTicks(srv.PID()), cpuTicks(pluginPID), cpuTicks(os.Getpid())
	start := time.Now()
	stats.window(true)
	label := fmt.Sprintf("renewal-%s-%d-%s-%d", modeLabel(mode), n, ttl, clients)
	profiled := profile(ctx, srv, label, window)
	selfProfiled := profileSelf(label, window)
	sleepCtx(ctx, window)
	stats.window(false)
	elapsed := time.Since(start)
	selfProfiled()
	profiled()
	cpu1s, cpu1p, cpu1b := cpuTicks(srv.PID()), cpuTicks(pluginPID), cpuTicks(os.Getpid())
	closeAll()

	stats.mu.Lock()
	defer stats.mu.Unlock()
	slices.Sort(stats.latencies)
	if stats.firstErr != "" {
		logf("renewal %s: %d errors, first: %s", mode, stats.errors, stats.firstErr)
	}
	return renewalRow{
		Mode: mode, Locks: n, TTL: ttl, Clients: clients, Seconds: elapsed.Seconds(),
		Renewals: stats.renewals, PerSec: float64(stats.renewals) / elapsed.Seconds(),
		RPCPerSec: float64(stats.rpcs) / elapsed.Seconds(),
		P50:       micros(percentile(stats.latencies, 0.5)), P99: micros(percentile(stats.latencies, 0.99)),
		Missed: stats.missed, Errors: stats.errors, FirstErr: stats.firstErr,
		ServerCPU: cpuPercent(cpu0s, cpu1s, elapsed), PluginCPU: cpuPercent(cpu0p, cpu1p, elapsed),
		BenchCPU: cpuPercent(cpu0b, cpu1b, elapsed),
	}, nil
}

// bigServerArgs are the arguments of a memory server that holds n locks
// from few clients: per-client quotas lifted (they would refuse the load
// by design), and a liveness ping timeout long enough that a plugin
// starved of CPU on a loaded 2-core machine while the locks are taken is
// not reported down (seen at load 10: the 2s default cut the run short).
func bigServerArgs(n int) []string {
	args := []string{"serve", "--addr", "127.0.0.1:0", "--backend", "memory",
		"--max-waiters-per-client", strconv.Itoa(max(n, 1024)),
		"--max-locks", "0", "--max-locks-per-client", "0", "--backend-ping-timeout", "30s"}
	if *profileDir != "" {
		args = append(args, "--pprof-addr", "127.0.0.1:0")
	}
	return args
}

// modeLabel is a renewal mode in a profile's file name.
func modeLabel(mode string) string {
	switch mode {
	case modeExtend:
		return "extend"
	case modeBatch:
		return "batch"
	}
	return "sdk"
}

// renewer is one client's renewal loop, by Extend per lock or by one
// ExtendBatch per client. The batch loop schedules as the SDK watchdogs do:
// a lock's first renewal is due at sent + TTL/3 - phase·TTL/6 (phase: the
// client's, drawn once), every later one TTL/3 after the last successful
// one was sent, and each renewal takes along every lock due within the next
// TTL/6. Extend per lock is the SDKs before ExtendBatch: every renewal at
// TTL/3, no phase.
type renewer struct {
	rpc   lockv1connect.LockServiceClient
	ttl   time.Duration
	batch bool
	phase float64 // in [0,1); 0 for Extend per lock
	stats *renewalStats

	mu   sync.Mutex
	due  dueHeap
	wake chan struct{}
	sem  chan struct{}
	wg   sync.WaitGroup
}

type renewLock struct {
	key, token string
	lastSent   time.Time // send time of the last success: the lease runs out at lastSent+ttl
	due        time.Time
	idx        int
}

func newRenewer(rpc lockv1connect.LockServiceClient, ttl time.Duration, batch bool, phase float64, stats *renewalStats) *renewer {
	if !batch {
		phase = 0
	}
	return &renewer{rpc: rpc, ttl: ttl, batch: batch, phase: phase, stats: stats, wake: make(chan struct{}, 1), sem: make(chan struct{}, renewalInFlight)}
}

// add schedules the first renewal of a lock whose Acquire was sent at sent.
func (r *renewer) add(key, token string, sent time.Time) {
	first := r.ttl/3 - time.Duration(r.phase*float64(r.ttl/6))
	r.push(&renewLock{key: key, token: token, lastSent: sent, due: sent.Add(first)})
}

func (r *renewer) push(l *renewLock) {
	r.mu.Lock()
	heap.Push(&r.due, l)
	first := r.due[0] == l
	r.mu.Unlock()
	if first {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// loop renews due locks until ctx ends, then waits for its RPCs.
func (r *renewer) loop(ctx context.Context) {
	defer r.wg.Wait()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		horizon := now
		if r.batch {
			horizon = now.Add(r.ttl / 6) // as the SDKs do: renew early to renew together
		}
		var due []*renewLock
		wait := time.Hour
		r.mu.Lock()
		for len(r.due) > 0 && !r.due[0].due.After(horizon) {
			due = append(due, heap.Pop(&r.due).(*renewLock))
		}
		if len(r.due) > 0 {
			wait = time.Until(r.due[0].due)
		}
		r.mu.Unlock()
		if r.batch {
			for c := range slices.Chunk(due, renewalChunk) {
				r.send(ctx, func() { r.extendBatch(ctx, c) })
			}
		} else {
			for _, l := range due {
				r.send(ctx, func() { r.extend(ctx, l) })
			}
		}
		if ctx.Err() != nil {
			return
		}
		timer.Reset(max(wait, 0))
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-timer.C:
		}
	}
}

// send runs f on a goroutine once an RPC slot is free.
func (r *renewer) send(ctx context.Context, f func()) {
	select {
	case r.sem <- struct{}{}:
	case <-ctx.Done():
		return
	}
	r.wg.Go(func() {
		defer func() { <-r.sem }()
		f()
	})
}

func (r *renewer) extend(ctx context.Context, l *renewLock) {
	sent := time.Now()
	resp, err := r.rpc.Extend(ctx, &lockv1.ExtendRequest{Key: l.key, OwnerToken: l.token, Ttl: durationpb.New(r.ttl)})
	if ctx.Err() != nil {
		return
	}
	r.settle(l, sent, err, err == nil && resp.GetExtended())
	if err == nil {
		r.stats.rpc(time.Since(sent), b2i(resp.GetExtended()))
	}
}

func (r *renewer) extendBatch(ctx context.Context, ls []*renewLock) {
	items := make([]*lockv1.ExtendBatchItem, len(ls))
	for i, l := range ls {
		items[i] = &lockv1.ExtendBatchItem{Key: l.key, OwnerToken: l.token, Ttl: durationpb.New(r.ttl)}
	}
	sent := time.Now()
	resp, err := r.rpc.ExtendBatch(ctx, &lockv1.ExtendBatchRequest{Items: items})
	if ctx.Err() != nil {
		return
	}
	renewed := 0
	for i, l := range ls {
		ok := err == nil && resp.GetResults()[i].GetExtended()
		itemErr := err
		if err == nil && resp.GetResults()[i].GetError() != nil {
			itemErr = fmt.Errorf("%s", resp.GetResults()[i].GetError().GetMessage())
		}
		renewed += b2i(ok)
		r.settle(l, sent, itemErr, ok)
	}
	if err == nil {
		r.stats.rpc(time.Since(sent), renewed)
	}
}

// settle applies one renewal's outcome to l and schedules its next one.
func (r *renewer) settle(l *renewLock, sent time.Time, err error, extended bool) {
	expires := l.lastSent.Add(r.ttl)
	switch {
	case err != nil:
		r.stats.fail(err)
		if time.Now().After(expires) {
			r.stats.miss(1) // out of time: the lease ran out unrenewed
			return
		}
		l.due = time.Now().Add(50 * time.Millisecond)
	case !extended || sent.After(expires):
		r.stats.miss(1) // gone, or renewed only after it could have run out
		return
	default:
		l.lastSent = sent
		l.due = sent.Add(r.ttl / 3)
	}
	r.push(l)
}

type dueHeap []*renewLock

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *dueHeap) Push(x any) {
	l := x.(*renewLock)
	l.idx = len(*h)
	*h = append(*h, l)
}
func (h *dueHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return l
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func cpuPercent(t0, t1 int64, d time.Duration) float64 {
	return 100 * float64(t1-t0) / clockTicks / d.Seconds()
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// perRenewal is the CPU each renewed lease cost the server, the plugin and
// this bench process, in µs: steadier than the latencies on a shared
// machine, where a run's p99 is a handful of calls.
func perRenewal(r renewalRow) string {
	if r.PerSec == 0 {
		return "-"
	}
	us := func(pct float64) float64 { return pct / 100 / r.PerSec * 1e6 }
	return fmt.Sprintf("%.1f/%.1f/%.1f", us(r.ServerCPU), us(r.PluginCPU), us(r.BenchCPU))
}

func printRenewal(rows []renewalRow) {
	if len(rows) == 0 {
		return
	}
	fmt.Println("\nRenewal at scale: one memory server, N held locks renewed at TTL/3 (p50/p99: one renewal RPC; CPU: % of one core over the window)")
	w := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "mode\tlocks\tTTL\tclients\trenewals/s\tRPCs/s\tp50 ms\tp99 ms\tmissed\terrors\tserver CPU %\tplugin CPU %\tbench CPU %\tCPU µs/renewal s/p/b\t")
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%.0f\t%.0f\t%.1f\t%.1f\t%d\t%d\t%.1f\t%.1f\t%.1f\t%s\t\n", r.Mode, r.Locks, r.TTL, r.Clients,
			r.PerSec, r.RPCPerSec, r.P50/1000, r.P99/1000, r.Missed, r.Errors, r.ServerCPU, r.PluginCPU, r.BenchCPU,
			perRenewal(r))
	}
	_ = w.Flush()
	for _, why := range renewalSkipped {
		fmt.Println("  skipped:", why)
	}
}
