package redis_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/plugins/redis/redistest"
)

// TestSentinelFailover runs the backend through Redis Sentinel (master,
// replica, one Sentinel): it finds the master by name, and when the master
// is killed and Sentinel promotes the replica, the backend follows it and
// fencing tokens keep increasing (the clock floor covers writes the
// asynchronous replication lost).
func TestSentinelFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Redis with a replica and a Sentinel")
	}
	master := redistest.Start(t)
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port))
	ctx := ctxT(t)
	rc := goredis.NewClient(&goredis.Options{Addr: replica.Addr})
	defer rc.Close()
	waitFor(t, 10*time.Second, "replica in sync", func() bool {
		info, err := rc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	sentinel := redistest.StartSentinel(t, master, "hf")

	b := open(t, sentinel.Addr, "master_name", "hf")
	w := watch(t, b, "")
	r := acquire(t, b, "s", "tok", time.Minute)
	if !r.Acquired {
		t.Fatalf("acquire through Sentinel: %+v", r)
	}
	if e := w.next(t); e.Type != backend.EventAcquired {
		t.Fatalf("event %v", e.Type)
	}
	if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: "s", OwnerToken: "tok"}); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
	last := r.Record.FencingToken

	master.Kill(t)
	// The watch on the dead master ends as unavailable.
	select {
	case err := <-w.done:
		if !errors.Is(err, backend.ErrUnavailable) {
			t.Fatalf("watch ended with %v", err)
		}
		w.done <- err
	case <-time.After(10 * time.Second):
		t.Fatal("watch still running 10s after the master died")
	}
	start := time.Now()
	var got backend.AcquireResult
	waitFor(t, 30*time.Second, "acquire on the promoted replica", func() bool {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		res, err := b.Acquire(c, backend.AcquireRequest{Key: "s", OwnerToken: token(), TTL: time.Minute})
		if err != nil {
			return false
		}
		got = res
		return true
	})
	t.Logf("failover: the backend acquired on the new master %s after the old one died", time.Since(start).Round(time.Millisecond))
	if !got.Acquired || got.Record.FencingToken <= last {
		t.Fatalf("after failover: %+v, last fencing token %d", got, last)
	}
	if role, err := rc.Do(ctx, "ROLE").Slice(); err != nil || role[0] != "master" {
		t.Fatalf("replica's role after failover: %v %v", role, err)
	}
	// A new watch on the new master hears expiries: the backend turned
	// keyspace notifications on there too.
	w2 := watch(t, b, "after/")
	acquire(t, b, "after/x", token(), 50*time.Millisecond)
	// Acquired and expired, in either order (the expiry's connection is
	// another; see TestCluster).
	var events []backend.EventType
	for range 2 {
		e := w2.next(t)
		if e.Record.Key != "after/x" {
			t.Fatalf("event %v %q, want one of after/x", e.Type, e.Record.Key)
		}
		events = append(events, e.Type)
	}
	checkEvents(t, "after/x", events)
}

// waitFor polls cond until it holds, with a deadline.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
