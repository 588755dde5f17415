package main

import (
	"fmt"
	"slices"
	"strings"
)

// target is one of issue 8's targets, judged on this run's numbers (ratios
// measured side by side, so a loaded machine slows both sides).
type target struct {
	Name  string `json:"name"`
	Want  string `json:"want"`
	Got   string `json:"got"`
	Met   bool   `json:"met"`
	Known bool   `json:"measured"` // false: the rows it needs were left out
}

func judge(rep report) []target {
	tp := func(name string, conc int) *throughput {
		for i := range rep.Throughput {
			if rep.Throughput[i].Name == name && rep.Throughput[i].Concurrency == conc {
				return &rep.Throughput[i]
			}
		}
		return nil
	}
	hot := func(name string) *hotKey {
		for i := range rep.HotKey {
			if rep.HotKey[i].Name == name {
				return &rep.HotKey[i]
			}
		}
		return nil
	}
	var out []target
	add := func(name, want string, known bool, got string, met bool) {
		out = append(out, target{Name: name, Want: want, Got: got, Met: known && met, Known: known})
	}
	ratio := func(h *hotKey) (string, bool) {
		if h == nil || h.Baseline == "" {
			return "", false
		}
		return fmt.Sprintf("%.1f× (%.0f/s)", h.Ratio, h.HandoffsPerS), true
	}

	h := hot("holdfast/etcd")
	got, ok := ratio(h)
	add("hot key, etcd", "≥ 5× concurrency.Mutex handoffs/s", ok, got, ok && h.Ratio >= 5)
	h = hot("holdfast/redis")
	got, ok = ratio(h)
	add("hot key, Redis", "≥ 20× redislock's handoffs/s", ok, got, ok && h.Ratio >= 20)
	h = hot("holdfast/memory")
	add("hot key, memory", "≥ 1000 handoffs/s", h != nil, fmt.Sprintf("%.0f/s", hk(h).HandoffsPerS), h != nil && h.HandoffsPerS >= 1000)
	for _, h := range rep.HotKey {
		if strings.HasPrefix(h.Name, "holdfast/") {
			// In strict rotation no worker is more than one turn ahead of
			// another, whatever the run's length (short runs make a one-turn
			// difference look large in percent).
			lo, hi := 0, 0
			if len(h.PerWorker) > 0 {
				lo, hi = slices.Min(h.PerWorker), slices.Max(h.PerWorker)
			}
			add("FIFO, "+h.Name, "per-worker acquisitions within 5%", true,
				fmt.Sprintf("%.1f%% (%d..%d)", h.SpreadPercent, lo, hi), h.SpreadPercent <= 5 || hi-lo <= 1)
		}
	}
	r := tp("holdfast/etcd Acquire+Release", 32)
	add("uncontended c32, etcd", "≥ 1.0× Mutex, new session per lock", r != nil && r.Baseline != "",
		fmt.Sprintf("%.2f×", tr(r).Ratio), r != nil && r.Ratio >= 1)
	r = tp("holdfast/memory Acquire+Release", 1)
	add("c1 p50, memory", "≤ 4× one echo's p50", r != nil && r.Baseline != "",
		fmt.Sprintf("%.2f×", tr(r).LatencyRatio), r != nil && r.LatencyRatio <= 4)
	r = tp("holdfast/memory Acquire+Release", 32)
	add("c32 ops/s, memory", "≥ 0.25× echo's ops/s", r != nil && r.Baseline != "",
		fmt.Sprintf("%.2f×", tr(r).Ratio), r != nil && r.Ratio >= 0.25)
	r = tp("holdfast/redis Acquire+Release", 1)
	add("c1 p50, Redis", "≤ 3× redislock's p50", r != nil && r.Baseline != "",
		fmt.Sprintf("%.2f×", tr(r).LatencyRatio), r != nil && r.LatencyRatio <= 3)
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

func printTargets(ts []target) {
	fmt.Println("\nTargets (issue 8), judged on this run")
	for _, t := range ts {
		mark := "met    "
		switch {
		case !t.Known:
			mark, t.Got = "not run", "-"
		case !t.Met:
			mark = "NOT met"
		}
		fmt.Printf("  %s  %-28s %-38s got %s\n", mark, t.Name, t.Want, t.Got)
	}
}
