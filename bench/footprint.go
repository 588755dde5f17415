package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
)

// footprint is the resident memory (VmRSS, KiB) of a memory-backend server
// and of its plugin process, idle, holding many locks, with many waiters
// queued, and around a long acquire/release loop on unique keys (which
// must not grow it).
type footprint struct {
	Locks   int `json:"held_locks"`
	Waiters int `json:"waiters"`
	LoopOps int `json:"loop_ops"`

	Idle        rss `json:"idle"`
	HeldLocks   rss `json:"with_held_locks"`
	WithWaiters rss `json:"with_waiters"`
	LoopBefore  rss `json:"loop_before"`
	LoopAfter   rss `json:"loop_after"`
}

type rss struct {
	ServerKiB int `json:"server_kib"`
	PluginKiB int `json:"plugin_kib"`
}

func (r rss) String() string {
	return fmt.Sprintf("%.1f MiB + %.1f MiB", float64(r.ServerKiB)/1024, float64(r.PluginKiB)/1024)
}

func readRSS(p *process) (rss, error) {
	// The server logs its plugin's pid (stderr) just before its readiness
	// line (stdout); the two pipes are read apart, so allow a moment.
	var pid int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if pid, _, _ = p.logged(); pid != 0 {
			break
		}
		if time.Now().After(deadline) {
			return rss{}, errors.New("the server did not log its plugin_pid")
		}
	}
	s, err := rssKiB(p.PID())
	if err != nil {
		return rss{}, err
	}
	pl, err := rssKiB(pid)
	if err != nil {
		return rss{}, err
	}
	return rss{ServerKiB: s, PluginKiB: pl}, nil
}

// footprintConns is how many client connections the footprint load uses:
// Go's HTTP/2 server allows 250 concurrent streams per connection, and every
// waiter is one open stream.
const footprintConns = 64

// measureFootprint runs the footprint scenarios on a fresh memory server.
func measureFootprint(ctx context.Context, locks, waiters, loopOps int) (*footprint, error) {
	const waitKeys = 100
	args := []string{"serve", "--addr", "127.0.0.1:0",
		"--backend", "memory",
		"--max-waiters", strconv.Itoa(max(waiters, 1) + 1000),
		"--max-waiters-per-key", strconv.Itoa(waiters/waitKeys + 1),
		// One client holds every lock and waiter of the footprint: the
		// per-client bounds (and the server's lock bound) are lifted.
		"--max-waiters-per-client", strconv.Itoa(max(waiters, 1) + 1000),
		"--max-locks", "0", "--max-locks-per-client", "0"}
	if *profileDir != "" {
		args = append(args, "--pprof-addr", "127.0.0.1:0")
	}
	srv, err := startProcess(ctx, filepath.Join(*binDir, "holdfast"), args...)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	clients := make([]lockv1connect.LockServiceClient, footprintConns)
	for i := range clients {
		clients[i] = newClient(srv.addr)
	}
	fp := &footprint{Locks: locks, Waiters: waiters, LoopOps: loopOps}
	if fp.Idle, err = readRSS(srv); err != nil {
		return nil, err
	}
	run := fmt.Sprintf("fp/%d", time.Now().UnixNano())

	// No growth across a long loop on unique keys: RSS after a warm-up
	// loop against RSS after a loop ten times as long. First, while the
	// heap holds nothing else, so what the later phases leave behind (Go
	// returns freed memory to the system only gradually) cannot hide growth.
	loop := func(n int, tag string) error {
		return parallel(ctx, n, func(i int) error {
			c := clients[i%len(clients)]
			key := fmt.Sprintf("%s/loop/%s/%d", run, tag, i)
			resp, err := c.Acquire(ctx, &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(time.Minute)})
			if err != nil {
				return err
			}
			_, err = c.Release(ctx, &lockv1.ReleaseRequest{Key: key, OwnerToken: resp.GetLease().GetOwnerToken()})
			return err
		})
	}
	if err := loop(loopOps/10, "warm"); err != nil {
		return nil, err
	}
	if fp.LoopBefore, err = readRSS(srv); err != nil {
		return nil, err
	}
	if err := loop(loopOps, "long"); err != nil {
		return nil, err
	}
	if fp.LoopAfter, err = readRSS(srv); err != nil {
		return nil, err
	}
	// Held locks.
	tokens := make([]string, locks)
	err = parallel(ctx, locks, func(i int) error {
		resp, err := clients[i%len(clients)].Acquire(ctx, &lockv1.AcquireRequest{
			Key: fmt.Sprintf("%s/held/%d", run, i), Ttl: durationpb.New(time.Hour)})
		if err != nil {
			return err
		}
		if !resp.GetAcquired() {
			return fmt.Errorf("held lock %d not acquired", i)
		}
		tokens[i] = resp.GetLease().GetOwnerToken()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("holding %d locks: %w", locks, err)
	}
	if fp.HeldLocks, err = readRSS(srv); err != nil {
		return nil, err
	}
	err = parallel(ctx, locks, func(i int) error {
		_, err := clients[i%len(clients)].Release(ctx, &lockv1.ReleaseRequest{
			Key: fmt.Sprintf("%s/held/%d", run, i), OwnerToken: tokens[i]})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("releasing the held locks: %w", err)
	}

	// Waiters: waitKeys held keys, waiters queued behind them.
	if err := fp.measureWaiters(ctx, srv, clients, run, waitKeys); err != nil {
		return nil, err
	}

	return fp, nil
}

func (fp *footprint) measureWaiters(ctx context.Context, srv *process, clients []lockv1connect.LockServiceClient, run string, keys int) error {
	if fp.Waiters == 0 {
		fp.WithWaiters = fp.Idle
		return nil
	}
	holder := clients[0]
	held := make([]string, keys)
	for k := range keys {
		resp, err := holder.Acquire(ctx, &lockv1.AcquireRequest{Key: fmt.Sprintf("%s/wait/%d", run, k), Ttl: durationpb.New(time.Hour)})
		if err != nil {
			return err
		}
		held[k] = resp.GetLease().GetOwnerToken()
	}
	waitCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var failed atomic.Int64
	var firstErr atomic.Value
	for i := range fp.Waiters {
		wg.Go(func() {
			_, err := clients[i%len(clients)].Acquire(waitCtx, &lockv1.AcquireRequest{
				Key: fmt.Sprintf("%s/wait/%d", run, i%keys), Ttl: durationpb.New(time.Minute), Wait: durationpb.New(10 * time.Minute)})
			if err != nil && waitCtx.Err() == nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err)
			}
		})
	}
	// Wait (by polling Inspect, with a deadline) until every waiter is
	// queued on the server.
	deadline := time.Now().Add(2 * time.Minute)
	var queued int
	for {
		queued = 0
		for k := range keys {
			resp, err := holder.Inspect(ctx, &lockv1.InspectRequest{Key: fmt.Sprintf("%s/wait/%d", run, k)})
			if err != nil {
				cancel()
				wg.Wait()
				return err
			}
			queued += int(resp.GetState().GetWaiters())
		}
		if queued >= fp.Waiters || failed.Load() > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	var err error
	fp.WithWaiters, err = readRSS(srv)
	if _, addr, _ := srv.logged(); *profileDir != "" && addr != "" {
		for _, kind := range []string{"heap", "goroutine"} {
			file := filepath.Join(*profileDir, "footprint-waiters-server-"+kind+".pb.gz")
			if ferr := fetch(ctx, "http://"+addr+"/debug/pprof/"+kind, file); ferr != nil {
				logf("-profile: %v", ferr)
			}
		}
	}
	cancel()
	wg.Wait()
	if n := failed.Load(); n > 0 {
		return fmt.Errorf("%d waiters failed, first: %v", n, firstErr.Load())
	}
	if queued < fp.Waiters {
		return fmt.Errorf("only %d of %d waiters queued after 2 minutes", queued, fp.Waiters)
	}
	for k := range keys {
		if _, err := holder.Release(ctx, &lockv1.ReleaseRequest{Key: fmt.Sprintf("%s/wait/%d", run, k), OwnerToken: held[k]}); err != nil {
			return err
		}
	}
	return err
}

// parallel runs fn(0..n-1) on 64 workers and returns the first error.
func parallel(ctx context.Context, n int, fn func(i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr error
	var once sync.Once
	for range min(n, 64) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}
