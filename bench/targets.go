package main

import (
	"fmt"
	"slices"
	"strings"
)

// target is one of the issues' targets, judged on this run's numbers
// (ratios measured side by side, so a loaded machine slows both sides).
type target struct {
	Issue int    `json:"issue"`
	Name  string `json:"name"`
	Want  string `json:"want"`
	Got   string `json:"got"`
	Met   bool   `json:"met"`
	Known bool   `json:"measured"` // false: the rows it needs were left out
}

// judge decides every target on rep, issue 17's (performance v2) first,
// then issue 8's (the first performance targets), which still hold.
func judge(rep report) []target {
	var out []target
	add := func(issue int, name, want string, known bool, got string, met bool) {
		if !known {
			got = "-"
		}
		out = append(out, target{Issue: issue, Name: name, Want: want, Got: got, Met: known && met, Known: known})
	}
	tp := func(name string, conc int) *throughput { return findRow(rep.Throughput, name, conc) }
	hot := func(name string) *hotKey {
		for i := range rep.HotKey {
			if rep.HotKey[i].Name == name {
				return &rep.HotKey[i]
			}
		}
		return nil
	}
	floor := func(b string, conc int) *floorRow {
		for i := range rep.Floors {
			if rep.Floors[i].Backend == b && rep.Floors[i].Concurrency == conc {
				return &rep.Floors[i]
			}
		}
		return nil
	}
	ratio := func(a, b *throughput) (float64, bool) {
		if a == nil || b == nil || b.OpsPerSec == 0 {
			return 0, false
		}
		return a.OpsPerSec / b.OpsPerSec, true
	}

	// Issue 17.
	backends := []string{"memory", "etcd", "redis", "postgres"}
	for _, b := range backends {
		// Judged on the paced floor: the holdfast path's store calls each
		// come after a client RPC and a plugin hop, which no server can
		// remove, and a store serves a call after a pause slower (floor.go).
		f := floor(b, 1)
		known := f != nil && f.FloorPacedP50 > 0
		add(17, "c1 p50, "+b, "≤ 1.25× its paced floor", known,
			fmt.Sprintf("%.2f× (%.0f µs, paced floor %.0f µs; back to back %.0f µs, %.2f×)", fl(f).OverPaced, fl(f).P50, fl(f).FloorPacedP50, fl(f).FloorP50, fl(f).Over),
			known && f.OverPaced <= 1.25)
	}
	for _, c := range []int{32, 128} {
		for _, b := range backends {
			f := floor(b, c)
			add(17, fmt.Sprintf("c%d ops/s, %s", c, b), "above its floor (batching)", f != nil,
				fmt.Sprintf("%.0f/s, floor %.0f/s (%.2f× of it)", fl(f).OpsPerSec, fl(f).FloorOps, 1/max(fl(f).Over, 1e-9)), f != nil && f.Over <= 1)
		}
		r, ok := ratio(tp("holdfast/memory Acquire+Release", c), tp(echoRow, c))
		add(17, fmt.Sprintf("c%d ops/s, memory", c), "≥ 0.45× echo's ops/s", ok, fmt.Sprintf("%.2f×", r), ok && r >= 0.45)
	}
	etcd := func(c int) *throughput { return tp("holdfast/etcd Acquire+Release", c) }
	for _, t := range []struct {
		conc int
		want float64
	}{{1, 0.5}, {32, 0.7}} {
		r, ok := ratio(etcd(t.conc), tp(etcdReuseRow, t.conc))
		add(17, fmt.Sprintf("c%d ops/s, etcd", t.conc), fmt.Sprintf("≥ %.1f× Mutex, session reused", t.want), ok, fmt.Sprintf("%.2f×", r), ok && r >= t.want)
	}
	for _, c := range []int{1, 32} {
		r, ok := ratio(etcd(c), tp(etcdNewRow, c))
		add(17, fmt.Sprintf("c%d ops/s, etcd", c), "≥ 2× Mutex, new session per lock", ok, fmt.Sprintf("%.2f×", r), ok && r >= 2)
	}
	h := hot("holdfast/etcd")
	add(17, "hot key, etcd", "≥ 8× concurrency.Mutex handoffs/s", h != nil && h.Baseline != "",
		fmt.Sprintf("%.1f× (%.0f/s)", hk(h).Ratio, hk(h).HandoffsPerS), h != nil && h.Ratio >= 8)
	r, ok := ratio(tp("holdfast/postgres Acquire+Release", 32), tp(pgPeerRow, 32))
	add(17, "c32 ops/s, PostgreSQL", "≥ 0.15× advisory locks", ok, fmt.Sprintf("%.2f×", r), ok && r >= 0.15)
	r, ok = ratio(tp("holdfast/redis Acquire+Release", 32), tp(redisPeerRow, 32))
	add(17, "c32 ops/s, Redis", "≥ 0.2× redislock", ok, fmt.Sprintf("%.2f×", r), ok && r >= 0.2)
	ren := renewalTarget(rep.Renewal)
	add(17, "renewal, 100k locks", "TTL 30s, 100 clients: no missed renewal, p99 ≤ 50 ms", ren != nil,
		fmt.Sprintf("%d missed, p99 %.1f ms (%s)", rr(ren).Missed, rr(ren).P99/1000, rr(ren).Mode), ren != nil && ren.Missed == 0 && ren.P99 <= 50_000)
	ll := rep.ListLoad
	add(17, "Acquire p50 beside List", "300k held, List loop: ≤ 2× idle", ll != nil,
		fmt.Sprintf("%.2f× (%.0f µs, idle %.0f µs)", lr(ll).ratio(), lr(ll).Loaded.P50, lr(ll).Idle.P50), ll != nil && ll.ratio() <= 2)

	// Issue 8.
	hr := func(h *hotKey) (string, bool) {
		if h == nil || h.Baseline == "" {
			return "", false
		}
		return fmt.Sprintf("%.1f× (%.0f/s)", h.Ratio, h.HandoffsPerS), true
	}
	h = hot("holdfast/redis")
	got, ok := hr(h)
	add(8, "hot key, Redis", "≥ 20× redislock's handoffs/s", ok, got, ok && h.Ratio >= 20)
	h = hot("holdfast/memory")
	add(8, "hot key, memory", "≥ 1000 handoffs/s", h != nil, fmt.Sprintf("%.0f/s", hk(h).HandoffsPerS), h != nil && h.HandoffsPerS >= 1000)
	for _, h := range rep.HotKey {
		if strings.HasPrefix(h.Name, "holdfast/") {
			// In strict rotation no worker is more than one turn ahead of
			// another, whatever the run's length (short runs make a one-turn
			// difference look large in percent).
			lo, hi := 0, 0
			if len(h.PerWorker) > 0 {
				lo, hi = slices.Min(h.PerWorker), slices.Max(h.PerWorker)
			}
			add(8, "FIFO, "+h.Name, "per-worker acquisitions within 5%", true,
				fmt.Sprintf("%.1f%% (%d..%d)", h.SpreadPercent, lo, hi), h.SpreadPercent <= 5 || hi-lo <= 1)
		}
	}
	m := tp("holdfast/memory Acquire+Release", 1)
	add(8, "c1 p50, memory", "≤ 4× one echo's p50", m != nil && m.Baseline != "",
		fmt.Sprintf("%.2f×", tr(m).LatencyRatio), m != nil && m.LatencyRatio <= 4)
	m = tp("holdfast/redis Acquire+Release", 1)
	add(8, "c1 p50, Redis", "≤ 3× redislock's p50", m != nil && m.Baseline != "",
		fmt.Sprintf("%.2f×", tr(m).LatencyRatio), m != nil && m.LatencyRatio <= 3)
	return out
}

func hk(h *hotKey) hotKey {
	if h == nil {
		return hotKey{}
	}
	return *h
}

func tr(r *throughput) throughput {
	if r == nil {
		return throughput{}
	}
	return *r
}

func fl(f *floorRow) floorRow {
	if f == nil {
		return floorRow{}
	}
	return *f
}

func rr(r *renewalRow) renewalRow {
	if r == nil {
		return renewalRow{}
	}
	return *r
}

func lr(l *listLoad) listLoad {
	if l == nil {
		return listLoad{}
	}
	return *l
}

func printTargets(ts []target) {
	for _, issue := range []int{17, 8} {
		switch issue {
		case 17:
			fmt.Println("\nTargets of issue 17 (performance v2), judged on this run")
		case 8:
			fmt.Println("\nTargets of issue 8 (still held), judged on this run")
		}
		for _, t := range ts {
			if t.Issue != issue {
				continue
			}
			mark := "met    "
			switch {
			case !t.Known:
				mark = "not run"
			case !t.Met:
				mark = "NOT met"
			}
			fmt.Printf("  %s  %-26s %-52s got %s\n", mark, t.Name, t.Want, t.Got)
		}
	}
}
