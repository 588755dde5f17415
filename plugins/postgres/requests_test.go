package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/plugins/postgres"
	"github.com/holdfast/holdfast/plugins/postgres/pgtest"
	"github.com/holdfast/holdfast/proto/hlc"
)

// TestMigrateFromV5: a lease taken with a request identity under layout v5
// (whose plugin kept the identity through its set transaction) is migrated
// on start and answered by the v6 functions: a repeat of its Acquire is a
// replay with the same fencing token and replay, the same id with other
// arguments a conflict, its Release with an identity frees it, a repeat of
// that Release is answered true, and the next Acquire gets a larger token.
func TestMigrateFromV5(t *testing.T) {
	dsn := pgtest.DSN(t)
	schema := schemaName(t)
	t.Cleanup(func() { dropSchema(t, dsn, schema) })
	ctx := context.Background()
	if err := postgres.CreateSchemaAt(ctx, dsn, schema, 5); err != nil {
		t.Fatal(err)
	}
	tok := token()
	// The row as v5's AcquireSet left it, its stamp an hour ahead of the
	// clock, so the next Acquire's stamp must come from the row.
	ahead := clock.Now().WallTime + time.Hour.Nanoseconds()
	fencing := query[int64](t, dsn, `INSERT INTO `+schema+`.locks (key, owner, holder, fencing, expires_at, stamp_wall, stamp_logical,
		changed_at, acquired_by, request_id, request_fp, replay)
	VALUES ('k', sha256($1::bytea), 'v5', nextval('`+schema+`.fencing'), clock_timestamp() + interval '1 minute', $2, 0,
		clock_timestamp(), 1, 'rid-acquire', 'fp', 'the replay') RETURNING fencing`, []byte(tok), ahead)
	b := open(t, map[string]string{"schema": schema})
	if got := query[string](t, dsn, "SELECT obj_description(to_regclass($1), 'pg_class')", schema+".locks"); got != "holdfast locks v8" {
		t.Fatalf("table comment %q after migration", got)
	}
	acq := backend.AcquireRequest{Key: "k", OwnerToken: tok, TTL: time.Minute, Stamp: clock.Now(),
		Request: backend.Request{ID: "rid-acquire", Fingerprint: "fp"}}
	res, err := b.Acquire(ctx, acq)
	if err != nil || !res.Acquired || !res.Replayed || res.Replay != "the replay" || res.Record.FencingToken != uint64(fencing) || res.Record.Holder != "v5" {
		t.Fatalf("repeat of the v5 Acquire = %+v, %v; want replayed with fencing %d", res, err, fencing)
	}
	other := acq
	other.Request.Fingerprint = "other"
	if _, err := b.Acquire(ctx, other); !errors.Is(err, backend.ErrRequestConflict) {
		t.Fatalf("the id with other arguments: %v, want a request conflict", err)
	}
	ext, err := b.Extend(ctx, backend.ExtendRequest{Key: "k", OwnerToken: tok, TTL: 2 * time.Minute, Stamp: clock.Now(),
		Request: backend.Request{ID: "rid-extend", Fingerprint: "e"}})
	if err != nil || !ext.Extended || ext.Record.Remaining <= time.Minute || ext.Record.FencingToken != uint64(fencing) {
		t.Fatalf("Extend with an identity = %+v, %v", ext, err)
	}
	rel := backend.ReleaseRequest{Key: "k", OwnerToken: tok, Stamp: clock.Now(), Request: backend.Request{ID: "rid-release", Fingerprint: "r"}}
	for attempt := range 2 { // the Release, then its repeat
		if ok, err := b.Release(ctx, rel); err != nil || !ok {
			t.Fatalf("Release attempt %d = %v, %v", attempt, ok, err)
		}
	}
	rel.Request.Fingerprint = "x"
	if _, err := b.Release(ctx, rel); !errors.Is(err, backend.ErrRequestConflict) {
		t.Fatalf("the Release's id with other arguments: %v, want a request conflict", err)
	}
	next, err := b.Acquire(ctx, backend.AcquireRequest{Key: "k", OwnerToken: token(), TTL: time.Minute, Stamp: clock.Now(),
		Request: backend.Request{ID: "rid-next", Fingerprint: "n"}})
	if err != nil || !next.Acquired || next.Replayed || next.Record.FencingToken <= uint64(fencing) {
		t.Fatalf("the next Acquire = %+v, %v; want a token above %d", next, err, fencing)
	}
	if want := (hlc.Timestamp{WallTime: ahead}); !next.Record.Stamp.After(want) {
		t.Fatalf("the next Acquire's stamp %v is not after the row's %v", next.Record.Stamp, want)
	}
}

// TestReplayOnly: a replay-only Acquire (what the engine asks for a
// request that finds waiters queued on its key) answers the lease its
// request took as a replay (and marks it claimed, so an abandoning Release
// spares it), refuses the id with other arguments, reports another
// request's holder without taking anything, finds a free key free without
// taking it, and under notify=contended marks the lease it failed against,
// as a failed Acquire does.
func TestReplayOnly(t *testing.T) {
	ctx := context.Background()
	for _, notify := range []string{postgres.NotifyAll, postgres.NotifyContended} {
		t.Run("notify="+notify, func(t *testing.T) {
			b := open(t, map[string]string{"notify": notify})
			dsn := pgtest.DSN(t)
			tok := token()
			acq := backend.AcquireRequest{Key: "k", OwnerToken: tok, TTL: time.Minute, Stamp: clock.Now(), Holder: "first",
				Request: backend.Request{ID: "rid-first", Fingerprint: "fp"}, Replay: "the replay"}
			only := func(req backend.AcquireRequest) (backend.AcquireResult, error) {
				req.OwnerToken, req.ReplayOnly, req.Stamp = token(), true, clock.Now()
				return b.Acquire(ctx, req)
			}

			free, err := only(acq)
			if err != nil || free.Acquired || free.Record.Key != "" {
				t.Fatalf("replay-only on a free key = %+v, %v; want not acquired, no holder", free, err)
			}
			if n := query[int64](t, dsn, `SELECT count(*) FROM `+b.Schema()+`.locks WHERE owner IS NOT NULL`); n != 0 {
				t.Fatalf("replay-only took a free key: %d rows held", n)
			}

			first, err := b.Acquire(ctx, acq)
			if err != nil || !first.Acquired {
				t.Fatalf("Acquire = %+v, %v", first, err)
			}
			other := acq
			other.Request = backend.Request{ID: "rid-other", Fingerprint: "fp"}
			held, err := only(other)
			if err != nil || held.Acquired || held.Record.Key != "k" || held.Record.FencingToken != first.Record.FencingToken || held.Record.Holder != "first" {
				t.Fatalf("replay-only of another request = %+v, %v; want the holder (fencing %d)", held, err, first.Record.FencingToken)
			}
			marked := query[bool](t, dsn, `SELECT contended FROM `+b.Schema()+`.locks WHERE key = 'k'`)
			if want := notify == postgres.NotifyContended; marked != want {
				t.Fatalf("contended = %t after a failed replay-only under notify=%s, want %t", marked, notify, want)
			}

			conflict := acq
			conflict.Request.Fingerprint = "other"
			if _, err := only(conflict); !errors.Is(err, backend.ErrRequestConflict) {
				t.Fatalf("replay-only with the id and other arguments: %v, want a request conflict", err)
			}

			rep, err := only(acq)
			if err != nil || !rep.Acquired || !rep.Replayed || rep.Replay != "the replay" || rep.Record.FencingToken != first.Record.FencingToken {
				t.Fatalf("replay-only of the request = %+v, %v; want the first lease replayed", rep, err)
			}
			// Claimed: the first attempt's abandoning Release spares the lease.
			if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: "k", OwnerToken: tok, Stamp: clock.Now(), Abandon: true}); err != nil || ok {
				t.Fatalf("abandoning Release after a replay = %v, %v; want false", ok, err)
			}
			if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: "k", OwnerToken: tok, Stamp: clock.Now()}); err != nil || !ok {
				t.Fatalf("Release = %v, %v", ok, err)
			}
			after, err := only(acq)
			if err != nil || after.Acquired || after.Record.Key != "" {
				t.Fatalf("replay-only after the release = %+v, %v; want not acquired, no holder", after, err)
			}
		})
	}
}
