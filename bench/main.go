// Command bench measures holdfast against the direct clients people use
// today, side by side in one run, and prints one table with ratios:
// Acquire+Release throughput and latency at concurrency 1 and 32 on distinct
// keys, and a hot key looped by several workers (handoffs per second, wait
// percentiles, spread of acquisitions across workers).
//
// It starts the holdfast servers it measures (from -bin) and a connect-go
// echo server (this program with -echo-server), the floor under any RPC lock
// service. Every holdfast Acquire and Release that stands for a client (the
// uncontended and hot-key rows, the engine rows of the floor, Acquire beside
// List) carries a fresh request_id, as every SDK call does, so the rows
// measure the path users take; -request-ids=false leaves them out (the
// path before). Backend services (etcd, Redis, PostgreSQL) are started by
// `make bench` with the project's scripts and passed in by flag; a backend
// without its flag is left out of the table, and the table says so.
// It also reads each process's CPU time over the rows above concurrency 1
// and sets holdfast's CPU a pair against its floor's parts (cpusplit.go;
// a few /proc reads a row, so it is on by default; -cpu-split=false leaves
// it out).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bsm/redislock"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.etcd.io/etcd/client/v3/concurrency"
)

var (
	binDir      = flag.String("bin", "bin", "directory holding holdfast and the holdfast-backend-* plugins")
	duration    = flag.Duration("duration", 3*time.Second, "how long each uncontended row runs")
	hotDuration = flag.Duration("hot-duration", 5*time.Second, "how long each hot-key row runs")
	hotWorkers  = flag.Int("hot-workers", 8, "workers looping on the hot key")
	concLevels  = flag.String("concurrency", "1,32,128", "comma-separated concurrency levels")
	backends    = flag.String("backends", "memory,etcd,redis,postgres", "holdfast backends to measure")
	etcdAddr    = flag.String("etcd", "", "etcd endpoints (comma-separated); empty leaves etcd out")
	redisAddr   = flag.String("redis", "", "Redis address; empty leaves Redis out")
	pgDSN       = flag.String("postgres", "", "PostgreSQL connection string; empty leaves PostgreSQL out")
	pgOpts      = flag.String("postgres-opts", "", "extra plugin options for the postgres backend, key=value separated by ';' (e.g. notify=contended)")
	jsonOut     = flag.String("json", "", "also write the results as JSON to this file")
	verbose     = flag.Bool("v", false, "show the servers' logs")
	echoMode    = flag.Bool("echo-server", false, "internal: run the connect-go echo server")
	fpLocks     = flag.Int("footprint-locks", 100_000, "footprint: locks held at once on a memory server (0 leaves the footprint out)")
	fpWaiters   = flag.Int("footprint-waiters", 10_000, "footprint: waiters queued at once")
	fpLoop      = flag.Int("footprint-loop", 100_000, "footprint: acquire/release operations on unique keys in the growth check")
	profileDir  = flag.String("profile", "", "take pprof profiles (CPU, block, mutex, allocs) of each holdfast server and its plugin during every holdfast row, into this directory")
)

func logf(format string, args ...any) { log.Printf(format, args...) }

// layerRows are the engine measured without the server (see inproc.go).
var layerRows []throughput

type report struct {
	Throughput []throughput `json:"throughput"`
	// Floors are the holdfast rows against what the architecture cannot
	// avoid (floor.go).
	Floors []floorRow `json:"floors"`
	// PluginHopMicros is what the plugin hop adds to one backend call at
	// concurrency 1: half the p50 difference between the engine calling
	// the memory plugin process and the engine on the memory backend in
	// process (an Acquire+Release makes two backend calls).
	PluginHopMicros float64      `json:"plugin_hop_us_per_call,omitempty"`
	HotKey          []hotKey     `json:"hot_key"`
	Footprint       *footprint   `json:"footprint,omitempty"`
	Renewal         []renewalRow `json:"renewal,omitempty"`
	ListLoad        *listLoad    `json:"list_load,omitempty"`
	WatchCPU        []watchCPU   `json:"watch_cpu,omitempty"`
	CPUSplit        *cpuSplit    `json:"cpu_split,omitempty"`
	Targets         []target     `json:"targets"`
	// RequestIDs says whether the holdfast rows sent request ids
	// (-request-ids).
	RequestIDs bool     `json:"request_ids"`
	Skipped    []string `json:"skipped,omitempty"`
}

func main() {
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("bench: ")
	if *echoMode {
		if err := runEchoServer(); err != nil {
			log.Fatal(err)
		}
		return
	}
	if *listLoadLoops != "" {
		if err := runListLoadLoops(*listLoadLoops, *listLoadMetrics, *listLoadWatchers); err != nil {
			log.Fatal(err)
		}
		return
	}
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func levels() ([]int, error) {
	var out []int
	for _, f := range strings.Split(*concLevels, ",") {
		var n int
		if _, err := fmt.Sscan(f, &n); err != nil || n < 1 {
			return nil, fmt.Errorf("-concurrency: %q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func run(ctx context.Context) error {
	conc, err := levels()
	if err != nil {
		return err
	}
	rep := report{RequestIDs: *requestIDs}

	// The engine without the server first, before this program starts any
	// other process: the plugin host's supervisor thread ends when the host
	// closes, and the kernel kills every child that thread had started with
	// a parent-death signal (as startProcess asks).
	if strings.Contains(","+strings.ReplaceAll(*backends, " ", "")+",", ",memory,") {
		if layerRows, err = measureLayers(ctx, conc); err != nil {
			return fmt.Errorf("engine without the server: %w", err)
		}
	}

	self, err := os.Executable()
	if err != nil {
		return err
	}
	echoProc, err := startProcess(ctx, self, "-echo-server")
	if err != nil {
		return err
	}
	defer echoProc.stop()
	echoClient := newClient(echoProc.addr)
	echoRows := map[int]throughput{}
	for _, c := range conc {
		r := splitMeasure(ctx, cpuProcs{server: echoProc.PID()}, echoRow, c, *duration, echo(echoClient))
		echoRows[c] = r
		rep.Throughput = append(rep.Throughput, r)
	}

	for _, b := range strings.Split(*backends, ",") {
		if strings.TrimSpace(b) == "" {
			continue
		}
		skipped, err := benchBackend(ctx, strings.TrimSpace(b), conc, echoRows, &rep)
		if err != nil {
			return fmt.Errorf("%s: %w", b, err)
		}
		if skipped != "" {
			rep.Skipped = append(rep.Skipped, skipped)
		}
	}

	if *fpLocks > 0 {
		fp, err := measureFootprint(ctx, *fpLocks, *fpWaiters, *fpLoop)
		if err != nil {
			return fmt.Errorf("footprint: %w", err)
		}
		rep.Footprint = fp
	}
	if *renewalOn {
		if rep.Renewal, err = measureRenewal(ctx); err != nil {
			return err
		}
	}
	if *listLoadOn {
		if rep.ListLoad, err = measureListLoad(ctx); err != nil {
			return fmt.Errorf("list-load: %w", err)
		}
	}

	if *watchCPUOn > 0 {
		for _, n := range []int{0, *watchCPUOn} {
			row, err := measureWatchCPU(ctx, n, *watchCPUOps)
			if err != nil {
				return fmt.Errorf("watch-cpu: %w", err)
			}
			rep.WatchCPU = append(rep.WatchCPU, *row)
		}
	}

	rep.Floors = floors(rep.Throughput)
	if *cpuSplitOn {
		rep.CPUSplit = &cpuSplit{Rows: cpuRows, Floors: cpuFloors(cpuRows)}
	}
	rep.Targets = judge(rep)
	printReport(rep)
	printFloors(rep.Floors)
	printEtcdMutex(rep.Throughput)
	printRenewal(rep.Renewal)
	printListLoad(rep.ListLoad)
	printWatchCPU(rep.WatchCPU)
	printCPUSplit(rep.CPUSplit)
	printTargets(rep.Targets)
	if *jsonOut != "" {
		data, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*jsonOut, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// benchBackend measures holdfast on one backend next to that backend's
// direct client. It returns a non-empty reason when the backend is left out.
func benchBackend(ctx context.Context, name string, conc []int, echoRows map[int]throughput, rep *report) (string, error) {
	args := []string{"serve", "--addr", "127.0.0.1:0", "--backend", name}
	switch name {
	case "memory":
	case "etcd":
		if *etcdAddr == "" {
			return "etcd: no -etcd endpoints given", nil
		}
		args = append(args, "--backend-opt", "endpoints="+*etcdAddr)
	case "redis":
		if *redisAddr == "" {
			return "redis: no -redis address given", nil
		}
		// The same connection pool size as the redislock peer's client
		// (newRedis), so both sides can have as many commands in flight.
		args = append(args, "--backend-opt", "addrs="+*redisAddr, "--backend-opt", fmt.Sprintf("pool_size=%d", redisPoolSize))
	case "postgres":
		if *pgDSN == "" {
			return "postgres: no -postgres DSN given", nil
		}
		args = append(args, "--backend-opt", "dsn="+*pgDSN)
		for _, kv := range strings.Split(*pgOpts, ";") {
			if kv != "" {
				args = append(args, "--backend-opt", kv)
			}
		}
	default:
		return "", fmt.Errorf("unknown backend %q", name)
	}
	if *profileDir != "" {
		if err := os.MkdirAll(*profileDir, 0o755); err != nil {
			return "", err
		}
		args = append(args, "--pprof-addr", "127.0.0.1:0")
	}
	srv, err := startProcess(ctx, filepath.Join(*binDir, "holdfast"), args...)
	if err != nil {
		return "", err
	}
	defer srv.stop()
	client := newClient(srv.addr)
	runID := time.Now().UnixNano()
	var store int
	if *cpuSplitOn {
		if store, err = storeProcess(name); err != nil {
			logf("-cpu-split: %s: the store's process not found, its CPU left out: %v", name, err)
		}
	}
	storeCPU := cpuProcs{store: store}

	// Warm up, unmeasured, at the highest concurrency: a fresh store
	// (etcd's database file grows and is remapped on its first writes,
	// stalling every writer) and a fresh server (connections, the etcd
	// plugin's lease pool) would otherwise charge their start-up to
	// whichever row runs first.
	if w := min(*duration/3, time.Second); w > 0 {
		top := slices.Max(conc)
		measure(ctx, "warm-up", top, w, acquireRelease(client, fmt.Sprintf("bench/%d/%s/warm", runID, name)))
	}

	// Baselines first, so every holdfast row can show its ratio.
	peers := map[int]throughput{}
	var extra []throughput
	var hotPeer *hotKey
	switch name {
	case "memory":
		peers = echoRows
		extra = append(extra, layerRows...)
		if in, hop := findRow(layerRows, inprocRow, 1), findRow(layerRows, hopRow, 1); in != nil && hop != nil {
			rep.PluginHopMicros = (hop.P50 - in.P50) / 2
		}
	case "etcd":
		cli, err := dialEtcd(*etcdAddr)
		if err != nil {
			return "", err
		}
		defer cli.Close()
		for _, c := range conc {
			peers[c] = measure(ctx, etcdNewRow, c, *duration,
				etcdMutexNewSession(cli, fmt.Sprintf("bench-peer/%d/new", runID)))
			reused, closeAll, err := etcdMutexReusedSession(ctx, cli, fmt.Sprintf("bench-peer/%d/reused", runID), c)
			if err != nil {
				return "", err
			}
			extra = append(extra, splitMeasure(ctx, storeCPU, etcdReuseRow, c, *duration, backToBack(reused)))
			if c == 1 {
				err = addPaced(ctx, rep, &extra, etcdPacedRow, reused)
			}
			closeAll()
			if err != nil {
				return "", err
			}
		}
		var lockers []locker
		var sessions []*concurrency.Session
		for range *hotWorkers {
			s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
			if err != nil {
				return "", err
			}
			sessions = append(sessions, s)
			lockers = append(lockers, &etcdHotLocker{m: concurrency.NewMutex(s, fmt.Sprintf("bench-peer/%d/hot", runID))})
		}
		h := measureHotKey(ctx, "etcd concurrency.Mutex", lockers, *hotDuration)
		hotPeer = &h
		for _, s := range sessions {
			s.Close()
		}
	case "redis":
		rdb := newRedis(*redisAddr)
		defer rdb.Close()
		for _, c := range conc {
			pair := redislockObtainRelease(rdb, fmt.Sprintf("bench-peer/%d", runID))
			peers[c] = splitMeasure(ctx, storeCPU, redisPeerRow, c, *duration, backToBack(pair))
			if c == 1 {
				if err := addPaced(ctx, rep, &extra, redisPacedRow, pair); err != nil {
					return "", err
				}
			}
		}
		var lockers []locker
		rl := redislock.New(rdb)
		for range *hotWorkers {
			lockers = append(lockers, &redislockHotLocker{locker: rl, key: fmt.Sprintf("bench-peer/%d/hot", runID)})
		}
		h := measureHotKey(ctx, "bsm/redislock (100 ms retry)", lockers, *hotDuration)
		hotPeer = &h
	case "postgres":
		pool, err := pgxpool.New(ctx, *pgDSN)
		if err != nil {
			return "", err
		}
		defer pool.Close()
		for _, c := range conc {
			peers[c] = splitMeasure(ctx, storeCPU, pgPeerRow, c, *duration, backToBack(pgAdvisory(pool)))
			if c == 1 {
				if err := addPaced(ctx, rep, &extra, pgPacedRow, pgAdvisory(pool)); err != nil {
					return "", err
				}
			}
		}
	}

	for _, c := range conc {
		wait := profile(ctx, srv, fmt.Sprintf("%s-c%d", name, c), *duration)
		pluginPID, _, _ := srv.logged()
		r := splitMeasure(ctx, cpuProcs{server: srv.PID(), plugin: pluginPID, store: store}, "holdfast/"+name+" Acquire+Release", c, *duration,
			acquireRelease(client, fmt.Sprintf("bench/%d/%s", runID, name)))
		wait()
		if p, ok := peers[c]; ok && p.OpsPerSec > 0 && p.P50 > 0 {
			r.Baseline = p.Name
			r.Ratio = r.OpsPerSec / p.OpsPerSec
			r.LatencyRatio = r.P50 / p.P50
		}
		if name != "memory" {
			if p, ok := peers[c]; ok {
				rep.Throughput = append(rep.Throughput, p)
			}
		}
		rep.Throughput = append(rep.Throughput, r)
	}
	rep.Throughput = append(rep.Throughput, extra...)

	var lockers []locker
	for range *hotWorkers {
		lockers = append(lockers, &holdfastLocker{client: newClient(srv.addr), key: fmt.Sprintf("bench/%d/%s/hot", runID, name)})
	}
	wait := profile(ctx, srv, name+"-hot", *hotDuration)
	h := measureHotKey(ctx, "holdfast/"+name, lockers, *hotDuration)
	wait()
	if hotPeer != nil {
		if hotPeer.HandoffsPerS > 0 {
			h.Baseline = hotPeer.Name
			h.Ratio = h.HandoffsPerS / hotPeer.HandoffsPerS
		}
		rep.HotKey = append(rep.HotKey, *hotPeer)
	}
	rep.HotKey = append(rep.HotKey, h)
	return "", nil
}

// addPaced measures pair paced (paced.go) right after its back-to-back row,
// with the pause from this run's echo and engine rows, and adds it to extra;
// without those rows (memory left out) there is no pause to take, and no
// row.
func addPaced(ctx context.Context, rep *report, extra *[]throughput, name string, pair lockPair) error {
	pause, ok := pacedPause(slices.Concat(rep.Throughput, layerRows))
	if !ok {
		logf("%s: left out, no echo and engine rows at concurrency 1 to take its pause from", name)
		return nil
	}
	r, err := measurePaced(ctx, name, *duration, pause, pair)
	if err != nil {
		return err
	}
	*extra = append(*extra, r)
	return nil
}

// profile takes profiles of srv during the next d when -profile is set.
func profile(ctx context.Context, srv *process, label string, d time.Duration) (wait func()) {
	if *profileDir == "" {
		return func() {}
	}
	return captureProfiles(ctx, srv, *profileDir, label, profileSeconds(d))
}

func printReport(rep report) {
	w := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Printf("\nUncontended Acquire+Release, distinct keys, holdfast calls %s (ratio = ops/s over the baseline's; p50x = p50 over the baseline's)\n", ridLegend())
	fmt.Fprintln(w, "work\tconc\tops/s\tp50 µs\tp99 µs\terrors\tratio\tp50x\tbaseline\t")
	for _, r := range rep.Throughput {
		ratio, lat := "", ""
		if r.Baseline != "" {
			ratio, lat = fmt.Sprintf("%.2f×", r.Ratio), fmt.Sprintf("%.2f×", r.LatencyRatio)
		}
		fmt.Fprintf(w, "%s\t%d\t%.0f\t%.0f\t%.0f\t%d\t%s\t%s\t%s\t\n",
			r.Name, r.Concurrency, r.OpsPerSec, r.P50, r.P99, r.Errors, ratio, lat, r.Baseline)
	}
	_ = w.Flush()

	fmt.Printf("\nHot key, %d workers looping acquire-then-release, holdfast calls %s (ratio = handoffs/s over the baseline's)\n", *hotWorkers, ridLegend())
	fmt.Fprintln(w, "work\thandoffs/s\tacquisitions\twait p50 µs\twait p99 µs\twait max µs\tspread %\terrors\tratio\t")
	for _, h := range rep.HotKey {
		ratio := ""
		if h.Baseline != "" {
			ratio = fmt.Sprintf("%.1f×", h.Ratio)
		}
		fmt.Fprintf(w, "%s\t%.0f\t%d\t%.0f\t%.0f\t%.0f\t%.1f\t%d\t%s\t\n",
			h.Name, h.HandoffsPerS, h.Acquisitions, h.WaitP50, h.WaitP99, h.WaitMax, h.SpreadPercent, h.Errors, ratio)
	}
	_ = w.Flush()
	if fp := rep.Footprint; fp != nil {
		fmt.Println("\nResident memory (VmRSS) of a memory-backend server + its plugin process")
		fmt.Fprintln(w, "state\tserver MiB\tplugin MiB\t")
		row := func(name string, r rss) {
			fmt.Fprintf(w, "%s\t%.1f\t%.1f\t\n", name, float64(r.ServerKiB)/1024, float64(r.PluginKiB)/1024)
		}
		row("idle", fp.Idle)
		row(fmt.Sprintf("after %d acquire/release on unique keys (warm-up)", fp.LoopOps/10), fp.LoopBefore)
		row(fmt.Sprintf("after %d more (growth check)", fp.LoopOps), fp.LoopAfter)
		row(fmt.Sprintf("%d locks held", fp.Locks), fp.HeldLocks)
		row(fmt.Sprintf("%d waiters queued (locks released)", fp.Waiters), fp.WithWaiters)
		_ = w.Flush()
	}
	if rep.PluginHopMicros != 0 {
		fmt.Printf("\nThe plugin hop adds %.0f µs to each backend call at concurrency 1 (p50, engine with the memory plugin process against the engine with the memory backend in process).\n", rep.PluginHopMicros)
	}
	for _, s := range rep.Skipped {
		fmt.Println("left out:", s)
	}
}
