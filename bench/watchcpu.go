package main

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"time"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// Watch fan-out's CPU (-watch-cpu): the server's and the plugin's CPU time
// per Acquire+Release on an otherwise idle memory server, with no watcher
// and with N watchers of every key (each on a connection of its own, in
// this process). CPU time per call, unlike latency, hardly moves with the
// machine's other load, so it shows what a change to the fan-out saves
// when the List-load row cannot (its closed loops take what they are
// given).
type watchCPU struct {
	Watchers int     `json:"watchers"`
	Ops      int     `json:"ops"`
	Events   int64   `json:"events"`
	ServerUS float64 `json:"server_cpu_us_per_op"`
	PluginUS float64 `json:"plugin_cpu_us_per_op"`
}

var (
	watchCPUOn  = flag.Int("watch-cpu", 0, "measure the server's and plugin's CPU per Acquire+Release with no watcher and with this many watchers of every key (0 leaves it out)")
	watchCPUOps = flag.Int("watch-cpu-ops", 2000, "-watch-cpu: Acquire+Release pairs measured at each watcher count")
)

func measureWatchCPU(ctx context.Context, watchers, ops int) (*watchCPU, error) {
	srv, err := startProcess(ctx, filepath.Join(*binDir, "holdfast"), "serve", "--addr", "127.0.0.1:0", "--backend", "memory")
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var events atomic.Int64
	for range watchers {
		stream, err := newClient(srv.addr).Watch(wctx, &lockv1.WatchRequest{Target: &lockv1.WatchRequest_Prefix{Prefix: ""}})
		if err != nil {
			return nil, fmt.Errorf("watch: %w", err)
		}
		go func() {
			defer stream.Close()
			for stream.Receive() {
				events.Add(1)
			}
		}()
	}
	// Every watcher's SYNCED, then a warm-up, then the measured pairs;
	// the window ends once every watcher has had every event.
	if err := waitEvents(ctx, &events, int64(watchers)); err != nil {
		return nil, err
	}
	pair := acquireRelease(newClient(srv.addr), fmt.Sprintf("watch-cpu/%d", time.Now().UnixNano()))
	for i := range ops / 10 {
		if err := pair(ctx, i, 0); err != nil {
			return nil, err
		}
	}
	if err := waitEvents(ctx, &events, int64(watchers)*(1+int64(ops/10)*2)); err != nil {
		return nil, err
	}
	pluginPID, _, _ := srv.logged()
	s0, p0, e0 := cpuTicks(srv.PID()), cpuTicks(pluginPID), events.Load()
	for i := range ops {
		if err := pair(ctx, i, 0); err != nil {
			return nil, err
		}
	}
	if err := waitEvents(ctx, &events, e0+int64(watchers*ops*2)); err != nil {
		return nil, err
	}
	s1, p1 := cpuTicks(srv.PID()), cpuTicks(pluginPID)
	perOp := func(t0, t1 int64) float64 { return float64(t1-t0) * 1e6 / clockTicks / float64(ops) }
	return &watchCPU{Watchers: watchers, Ops: ops, Events: events.Load() - e0, ServerUS: perOp(s0, s1), PluginUS: perOp(p0, p1)}, nil
}

// waitEvents polls until n events have arrived (a minute at most).
func waitEvents(ctx context.Context, events *atomic.Int64, n int64) error {
	for deadline := time.Now().Add(time.Minute); events.Load() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("watch-cpu: %d of %d events arrived", events.Load(), n)
		}
	}
	return nil
}

func printWatchCPU(rows []watchCPU) {
	if len(rows) == 0 {
		return
	}
	fmt.Println("\nCPU per Acquire+Release at c1 on a memory server, by watchers of every key (server and plugin CPU time, µs)")
	for _, r := range rows {
		perEvent := ""
		if r.Events > 0 && r.Watchers > 0 {
			perEvent = fmt.Sprintf(", %.1f µs of server CPU per event sent above no watcher", (r.ServerUS-rows[0].ServerUS)*float64(r.Ops)/float64(r.Events))
		}
		fmt.Printf("  %2d watchers: server %.0f µs, plugin %.0f µs%s\n", r.Watchers, r.ServerUS, r.PluginUS, perEvent)
	}
}
