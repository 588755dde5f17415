package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/plugins/postgres"
	"github.com/holdfast/holdfast/plugins/postgres/pgtest"
)

// TestRestartOfPostgres runs against a private server that it stops and
// starts again: locks survive (durable), fencing never goes back, calls made
// while the server is down fail fast with ErrUnavailable, and a Watch ends
// with ErrUnavailable so its caller can re-watch.
func TestRestartOfPostgres(t *testing.T) {
	srv := pgtest.Start(t)
	ctx := context.Background()
	b := open(t, map[string]string{"dsn": srv.DSN(), "call_timeout": "2s", "connect_timeout": "1s"})

	for _, mode := range []string{"immediate", "fast"} {
		t.Run(mode, func(t *testing.T) {
			key := "durable/" + mode
			tok, held := acquire(t, b, key, time.Minute)
			if !held.Acquired {
				t.Fatal("not acquired")
			}
			// Draw a few more tokens so the sequence has cached values in
			// flight when the server dies.
			for i := range 5 {
				acquire(t, b, fmt.Sprintf("other/%s/%d", mode, i), time.Minute)
			}
			_, last := acquire(t, b, "other/"+mode+"/last", time.Minute)

			watchErr := make(chan error, 1)
			synced := make(chan struct{})
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			go func() {
				watchErr <- b.Watch(wctx, "", func(ev backend.Event) error {
					if ev.Type == backend.EventSynced {
						close(synced)
					}
					return nil
				})
			}()
			<-synced

			srv.Kill(t)
			start := time.Now()
			_, acqErr := b.Acquire(ctx, backend.AcquireRequest{Key: "down", OwnerToken: token(), TTL: time.Second})
			if !errors.Is(acqErr, backend.ErrUnavailable) {
				t.Fatalf("Acquire while down: %v, want ErrUnavailable", acqErr)
			}
			took := time.Since(start)
			if took > 3*time.Second {
				t.Fatalf("Acquire while down took %s", took)
			}
			_, _, err := b.Get(ctx, key)
			if !errors.Is(err, backend.ErrUnavailable) {
				t.Fatalf("Get while down: %v, want ErrUnavailable", err)
			}
			select {
			case err := <-watchErr:
				if !errors.Is(err, backend.ErrUnavailable) {
					t.Fatalf("Watch ended with %v, want ErrUnavailable", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Watch did not end when the server went away")
			}
			t.Logf("while down: Acquire failed in %s: %v", took.Round(time.Millisecond), acqErr)

			srv.Restart(t, mode)
			var rec backend.Record
			eventually(t, 20*time.Second, "Get works again after restart", func() bool {
				var ok bool
				rec, ok, err = b.Get(ctx, key)
				return err == nil && ok
			})
			if rec.FencingToken != held.Record.FencingToken || rec.Stamp != held.Record.Stamp {
				t.Fatalf("after restart the lock is %+v, want %+v", rec, held.Record)
			}
			if _, res := acquire(t, b, key, time.Second); res.Acquired {
				t.Fatal("a lock held across the restart was acquired by someone else")
			}
			if !release(t, b, key, tok) {
				t.Fatal("the holder cannot release after the restart")
			}
			_, next := acquire(t, b, key, time.Minute)
			if !next.Acquired || next.Record.FencingToken <= last.Record.FencingToken {
				t.Fatalf("fencing after restart %d, want > %d", next.Record.FencingToken, last.Record.FencingToken)
			}
		})
	}
}

// TestServerGoneAtStart: a server that is down at start-up fails Open with
// ErrUnavailable in bounded time.
func TestServerGoneAtStart(t *testing.T) {
	srv := pgtest.Start(t)
	srv.Kill(t)
	start := time.Now()
	_, err := postgres.Open(context.Background(), map[string]string{"dsn": srv.DSN(), "schema": "x"})
	if !errors.Is(err, backend.ErrUnavailable) || time.Since(start) > 10*time.Second {
		t.Fatalf("Open against a stopped server: %v after %s", err, time.Since(start))
	}
}
