package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// CPU split (-cpu-split): above concurrency 1 the floor (floor.go) assumes
// the parts' costs add up on the machine's shared cores, so a row below its
// floor spends more CPU a pair than the parts do, somewhere. Over the
// window of each row the floor is made of (echo, the engine rows, the
// peers) and of each holdfast Acquire+Release row, this reads the CPU time
// of every process that works for the row: the holdfast or echo server,
// the plugin process, the store (the process listening on the store's
// port, with its children: a PostgreSQL postmaster's connection backends),
// and this program (the clients; in the engine rows, the engine too). It
// times nothing itself and adds no row: the cost is a few /proc reads a
// row. With -profile the profiled rows' server and plugin CPU includes the
// profiler's.
var cpuSplitOn = flag.Bool("cpu-split", true, "read each process's CPU time over every row above concurrency 1 that holdfast or its floor is made of, and print CPU per operation by process against the floor's parts")

// cpuRows are the rows -cpu-split has read, in the order they ran.
var cpuRows []cpuRow

// cpuUS is CPU time per operation, in µs, by the process that spent it.
type cpuUS struct {
	Server float64 `json:"server_us"`
	Plugin float64 `json:"plugin_us"`
	Store  float64 `json:"store_us"`
	Client float64 `json:"client_us"`
}

func (c cpuUS) total() float64 { return c.Server + c.Plugin + c.Store + c.Client }

// cpuRow is one row's CPU per operation. Load1 is the one-minute load
// average as the row ended.
type cpuRow struct {
	Work        string  `json:"work"`
	Concurrency int     `json:"concurrency"`
	Ops         int     `json:"ops"`
	OpsPerSec   float64 `json:"ops_per_sec"`
	Load1       float64 `json:"load1"`
	CPU         cpuUS   `json:"cpu_us_per_op"`
	TotalUS     float64 `json:"total_cpu_us_per_op"`
}

// cpuFloor is a holdfast row's CPU per Acquire+Release against its
// floor's parts in the same run, each part laid on the process that does
// that work in holdfast: the echo server's (two calls) and the engine's
// (the hop row's client) on the server; the hop row's plugin and the
// peer's client (the store's client library) on the plugin; the peer's
// store on the store; the echo client's (two calls) on the client. Most
// names the process with the largest excess over its part (the smallest
// shortfall when every process is below its part).
type cpuFloor struct {
	Backend     string  `json:"backend"`
	Concurrency int     `json:"concurrency"`
	Holdfast    cpuUS   `json:"holdfast_us_per_pair"`
	Floor       cpuUS   `json:"floor_us_per_pair"`
	HoldfastUS  float64 `json:"holdfast_total_us_per_pair"`
	FloorUS     float64 `json:"floor_total_us_per_pair"`
	Most        string  `json:"most_of_the_difference"`
	MostUS      float64 `json:"most_us_per_pair"`
}

// cpuSplit is -cpu-split's part of the report.
type cpuSplit struct {
	Rows   []cpuRow   `json:"rows"`
	Floors []cpuFloor `json:"floors"`
}

// cpuProcs are the processes a row's CPU is read from besides this one
// (0: none).
type cpuProcs struct{ server, plugin, store int }

// cpuSample is their CPU time so far, in clock ticks.
type cpuSample struct{ server, plugin, store, client int64 }

func (p cpuProcs) sample() cpuSample {
	s := cpuSample{client: cpuTicks(os.Getpid())}
	if p.server > 0 {
		s.server = cpuTicks(p.server)
	}
	if p.plugin > 0 {
		s.plugin = cpuTicks(p.plugin)
	}
	if p.store > 0 {
		s.store = treeTicks(p.store)
	}
	return s
}

// splitMeasure is measure, with procs' CPU over the row kept in cpuRows
// when -cpu-split is on and conc is above 1.
func splitMeasure(ctx context.Context, procs cpuProcs, name string, conc int, dur time.Duration, fn op) throughput {
	if !*cpuSplitOn || conc < 2 {
		return measure(ctx, name, conc, dur, fn)
	}
	s0 := procs.sample()
	r := measure(ctx, name, conc, dur, fn)
	cpuRows = append(cpuRows, splitRow(r, s0, procs.sample(), loadAvg1()))
	return r
}

// splitRow divides the CPU time between two samples by the row's
// operations.
func splitRow(r throughput, s0, s1 cpuSample, load float64) cpuRow {
	per := func(t0, t1 int64) float64 {
		if r.Ops == 0 {
			return 0
		}
		return float64(t1-t0) * 1e6 / clockTicks / float64(r.Ops)
	}
	cpu := cpuUS{Server: per(s0.server, s1.server), Plugin: per(s0.plugin, s1.plugin), Store: per(s0.store, s1.store), Client: per(s0.client, s1.client)}
	return cpuRow{Work: r.Name, Concurrency: r.Concurrency, Ops: r.Ops, OpsPerSec: r.OpsPerSec, Load1: load, CPU: cpu, TotalUS: cpu.total()}
}

func findCPURow(rows []cpuRow, name string, conc int) *cpuRow {
	for i := range rows {
		if rows[i].Work == name && rows[i].Concurrency == conc {
			return &rows[i]
		}
	}
	return nil
}

// cpuFloors sets every holdfast row's CPU against its floor's parts
// (cpuFloor), as floors does its throughput: 2 × echo + hop + peer.
func cpuFloors(rows []cpuRow) []cpuFloor {
	var out []cpuFloor
	for _, r := range rows {
		b, ok := strings.CutPrefix(r.Work, "holdfast/")
		if !ok {
			continue
		}
		b, _, _ = strings.Cut(b, " ")
		c := r.Concurrency
		echo, hop := findCPURow(rows, echoRow, c), findCPURow(rows, hopRow, c)
		if echo == nil || hop == nil {
			continue
		}
		peer := &cpuRow{}
		if name, ok := peerRows[b]; ok {
			if peer = findCPURow(rows, name, c); peer == nil {
				continue
			}
		}
		floor := cpuUS{
			Server: 2*echo.CPU.Server + hop.CPU.Client,
			Plugin: hop.CPU.Plugin + peer.CPU.Client,
			Store:  peer.CPU.Store,
			Client: 2 * echo.CPU.Client,
		}
		f := cpuFloor{Backend: b, Concurrency: c, Holdfast: r.CPU, Floor: floor, HoldfastUS: r.CPU.total(), FloorUS: floor.total()}
		for _, d := range []struct {
			who    string
			hf, fl float64
		}{{"server", r.CPU.Server, floor.Server}, {"plugin", r.CPU.Plugin, floor.Plugin}, {"store", r.CPU.Store, floor.Store}, {"client", r.CPU.Client, floor.Client}} {
			if f.Most == "" || d.hf-d.fl > f.MostUS {
				f.Most, f.MostUS = d.who, d.hf-d.fl
			}
		}
		out = append(out, f)
	}
	return out
}

// storeProcess is the process serving the store backend name is measured
// on, found by the port its flag names; 0 for memory.
func storeProcess(name string) (int, error) {
	var hostPort string
	switch name {
	case "etcd":
		ep, _, _ := strings.Cut(*etcdAddr, ",")
		if _, rest, ok := strings.Cut(ep, "://"); ok {
			ep = rest
		}
		hostPort = ep
	case "redis":
		hostPort = *redisAddr
	case "postgres":
		cfg, err := pgconn.ParseConfig(*pgDSN)
		if err != nil {
			return 0, fmt.Errorf("-postgres: %w", err)
		}
		return listenerPID(int(cfg.Port))
	default:
		return 0, nil
	}
	_, port, err := net.SplitHostPort(hostPort)
	if err != nil {
		return 0, fmt.Errorf("%s address %q: %w", name, hostPort, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return 0, fmt.Errorf("%s address %q: %w", name, hostPort, err)
	}
	return listenerPID(p)
}

func printCPUSplit(s *cpuSplit) {
	if s == nil || len(s.Rows) == 0 {
		return
	}
	fmt.Println("\nCPU per operation by process, above concurrency 1 (-cpu-split): µs of CPU time (utime+stime) over each row's window,")
	fmt.Println("over its operations; server = holdfast or echo server, plugin = the plugin process, store = etcd / redis-server /")
	fmt.Println("postmaster and its backends, client = this bench process (in the engine rows, the engine too); load = 1-min load average;")
	fmt.Println("cores = ops/s × total: how much of the machine the row's processes kept busy (below what they were given: waiting)")
	w := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "work\tconc\tops/s\tload\tserver\tplugin\tstore\tclient\ttotal µs\tcores\t")
	for _, r := range s.Rows {
		fmt.Fprintf(w, "%s\t%d\t%.0f\t%.1f\t%.0f\t%.0f\t%.0f\t%.0f\t%.0f\t%.2f\t\n", r.Work, r.Concurrency, r.OpsPerSec, r.Load1,
			r.CPU.Server, r.CPU.Plugin, r.CPU.Store, r.CPU.Client, r.TotalUS, r.OpsPerSec*r.TotalUS/1e6)
	}
	_ = w.Flush()
	if len(s.Floors) == 0 {
		return
	}
	fmt.Println("\nCPU per Acquire+Release against the floor's parts (2 × echo + hop + peer), each part on the process that does its")
	fmt.Println("work in holdfast: echo server and the hop row's engine on the server, the hop's plugin and the peer's client on the")
	fmt.Println("plugin, the peer's store on the store, the echo client on the client (µs: server/plugin/store/client)")
	for _, f := range s.Floors {
		fmt.Printf("  %s c%d: holdfast %.0f µs (%s), floor %.0f µs (%s): %+.0f µs, the largest excess in the %s (%+.0f µs)\n",
			f.Backend, f.Concurrency, f.HoldfastUS, f.Holdfast.parts(), f.FloorUS, f.Floor.parts(), f.HoldfastUS-f.FloorUS, f.Most, f.MostUS)
	}
}

func (c cpuUS) parts() string {
	return fmt.Sprintf("%.0f/%.0f/%.0f/%.0f", c.Server, c.Plugin, c.Store, c.Client)
}
