package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/core/engine"
	"github.com/holdfast/holdfast/core/pluginhost"
	"github.com/holdfast/holdfast/plugins/memory"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// The engine measured without the HTTP server, so that the table shows what
// each layer costs: the engine on the memory backend in this process (no
// RPC at all), and the engine calling the memory plugin process through the
// plugin host (the plugin hop alone: go-plugin gRPC over a unix socket).

// engineOp is Acquire then Release on the engine, each worker its own key,
// with request ids as the server rows send them (see requestIDs), so that
// the floor's plugin hop (this row through the plugin against it in
// process) is measured on the calls the holdfast rows make.
func engineOp(e *engine.Engine, prefix string) op {
	return func(ctx context.Context, worker, _ int) error {
		key := fmt.Sprintf("%s/%d", prefix, worker)
		resp, err := e.Acquire(ctx, &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(10 * time.Second), RequestId: newRequestID()})
		if err != nil {
			return err
		}
		if !resp.GetAcquired() {
			return fmt.Errorf("key %s not acquired", key)
		}
		rel, err := e.Release(ctx, &lockv1.ReleaseRequest{Key: key, OwnerToken: resp.GetLease().GetOwnerToken(), RequestId: newRequestID()})
		if err != nil {
			return err
		}
		if !rel.GetReleased() {
			return fmt.Errorf("key %s not released", key)
		}
		return nil
	}
}

// measureEngine measures the engine on b at every concurrency level.
// procs are the processes besides this one whose CPU -cpu-split reads.
func measureEngine(ctx context.Context, name string, b backend.Backend, procs cpuProcs, conc []int, batch engine.BatchConfig) ([]throughput, error) {
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	e, err := engine.New(startCtx, b, engine.Config{Batch: batch})
	if err != nil {
		return nil, err
	}
	defer e.Close()
	var rows []throughput
	for _, c := range conc {
		rows = append(rows, splitMeasure(ctx, procs, name, c, *duration, engineOp(e, fmt.Sprintf("engine/%d", time.Now().UnixNano()))))
	}
	return rows, nil
}

// measureLayers returns the in-process and plugin-hop rows: unbatched (the
// floors are computed from them: the cost of the hop itself), and the hop
// with the engine's batching across callers.
func measureLayers(ctx context.Context, conc []int) ([]throughput, error) {
	mem := memory.New()
	inproc, err := measureEngine(ctx, inprocRow, mem, cpuProcs{}, conc, engine.BatchConfig{Off: true})
	mem.Close()
	if err != nil {
		return nil, err
	}
	h, err := pluginhost.Start(ctx, pluginhost.Config{
		Path:   filepath.Join(*binDir, "holdfast"),
		Args:   []string{"backend", "memory"},
		Name:   "memory",
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return nil, err
	}
	defer h.Close()
	hop, err := measureEngine(ctx, hopRow, h, cpuProcs{plugin: h.PID()}, conc, engine.BatchConfig{Off: true})
	if err != nil {
		return nil, err
	}
	batched, err := measureEngine(ctx, hopBatchRow, h, cpuProcs{plugin: h.PID()}, conc, engine.BatchConfig{})
	if err != nil {
		return nil, err
	}
	return slices.Concat(inproc, hop, batched), nil
}
