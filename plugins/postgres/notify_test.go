package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/conformance"
	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/harness"
	"github.com/holdfast/holdfast/plugins/postgres"
	"github.com/holdfast/holdfast/plugins/postgres/pgtest"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
)

// watchEvents runs b.Watch on prefix until the test ends and returns its
// events (the first, synced, already consumed).
func watchEvents(t *testing.T, b backend.Backend, prefix string) <-chan backend.Event {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan backend.Event, 4096)
	done := make(chan error, 1)
	go func() {
		done <- b.Watch(ctx, prefix, func(ev backend.Event) error {
			select {
			case events <- ev:
				return nil
			default:
				return errors.New("test watch buffer full")
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Watch returned %v, want context.Canceled", err)
		}
	})
	select {
	case ev := <-events:
		if ev.Type != backend.EventSynced {
			t.Fatalf("first event %v, want synced", ev.Type)
		}
	case err := <-done:
		t.Fatalf("Watch: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no synced event within 10s")
	}
	return events
}

func nextEvent(t *testing.T, events <-chan backend.Event) backend.Event {
	t.Helper()
	select {
	case ev := <-events:
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5s")
	}
	return backend.Event{}
}

func TestNotifyOption(t *testing.T) {
	for _, v := range []string{"", "All", "some", "none"} {
		_, err := postgres.ParseOptions(map[string]string{"dsn": "postgres://x@127.0.0.1/db", "notify": v})
		if !errors.Is(err, backend.ErrInvalidArgument) {
			t.Errorf("notify=%q: %v, want invalid argument", v, err)
		}
	}
	o, err := postgres.ParseOptions(map[string]string{"dsn": "postgres://x@127.0.0.1/db"})
	if err != nil || o.Notify != postgres.NotifyAll {
		t.Fatalf("default notify %q (%v), want %q", o.Notify, err, postgres.NotifyAll)
	}
}

// TestNotifyContended: under notify=contended an uncontended acquire,
// release or expiry announces nothing; a failed Acquire marks the lease, so
// its release or expiry is announced; and a release through another plugin
// instance than the one that acquired the lease is announced (a waiter of
// the acquiring server may be queued behind its winner). Events arrive in
// commit order, so the event seen after a quiet part proves that part sent
// none.
func TestNotifyContended(t *testing.T) {
	b := open(t, map[string]string{"notify": postgres.NotifyContended, "cleaner_max_sleep": "200ms"})
	other := open(t, map[string]string{"notify": postgres.NotifyContended, "schema": b.Schema()})
	events := watchEvents(t, b, "")
	expect := func(typ backend.EventType, key string, fencing uint64) {
		t.Helper()
		if ev := nextEvent(t, events); ev.Type != typ || ev.Record.Key != key || ev.Record.FencingToken != fencing {
			t.Fatalf("event %v %s/%d, want %v %s/%d (and nothing before it)", ev.Type, ev.Record.Key,
				ev.Record.FencingToken, typ, key, fencing)
		}
	}

	// Quiet: no one ever waits for these.
	for i := range 5 {
		tok, res := acquire(t, b, fmt.Sprintf("quiet/%d", i), time.Minute)
		if !res.Acquired || !release(t, b, fmt.Sprintf("quiet/%d", i), tok) {
			t.Fatal("uncontended acquire+release failed")
		}
	}
	_, quiet := acquire(t, b, "quiet/expiring", 10*time.Millisecond)
	if !quiet.Acquired {
		t.Fatal("quiet/expiring not acquired")
	}

	// A failed acquire marks the lease: its release is announced.
	tok, held := acquire(t, b, "hot", time.Minute)
	if _, lost := acquire(t, other, "hot", time.Minute); lost.Acquired || lost.Record.FencingToken != held.Record.FencingToken {
		t.Fatalf("second acquire %+v, want the holder %d", lost, held.Record.FencingToken)
	}
	if _, lost := acquire(t, b, "hot", time.Minute); lost.Acquired { // marked already: no write
		t.Fatalf("third acquire %+v, want the holder", lost)
	}
	release(t, b, "hot", tok)
	expect(backend.EventReleased, "hot", held.Record.FencingToken)

	// The takeover clears the mark: the next lease's release is quiet, and
	// no acquired events are sent in this mode.
	tok, _ = acquire(t, b, "hot", time.Minute)
	release(t, b, "hot", tok)
	// A marked lease's expiry (by the cleaner) is announced.
	_, next := acquire(t, b, "hot", 300*time.Millisecond)
	if _, lost := acquire(t, b, "hot", time.Minute); lost.Acquired {
		t.Fatal("acquire of a held key succeeded")
	}
	expect(backend.EventExpired, "hot", next.Record.FencingToken)

	// A release through another plugin instance is announced, contended
	// or not; through the acquiring one it is not.
	tok, res := acquire(t, b, "moved", time.Minute)
	release(t, other, "moved", tok)
	expect(backend.EventReleased, "moved", res.Record.FencingToken)
	tok, _ = acquire(t, other, "moved", time.Minute)
	release(t, other, "moved", tok)
	tok, res = acquire(t, other, "moved", time.Minute)
	release(t, b, "moved", tok)
	expect(backend.EventReleased, "moved", res.Record.FencingToken)
	select {
	case ev := <-events:
		t.Fatalf("unexpected event %+v", ev)
	default:
	}
}

// TestNotifyContendedRace: a failed Acquire racing the holder's Release
// never goes unannounced. Whenever an Acquire answers "held by fencing f",
// a released event for f must follow, whichever plugin (server) released it
// and whichever statement's commit came first. Many rounds, on two plugins
// sharing the schema, with the release racing the failed acquire.
func TestNotifyContendedRace(t *testing.T) {
	b1 := open(t, map[string]string{"notify": postgres.NotifyContended})
	b2 := open(t, map[string]string{"notify": postgres.NotifyContended, "schema": b1.Schema()})
	events := watchEvents(t, b1, "race/")

	const rounds = 200
	var mu sync.Mutex
	waitFor := map[uint64]string{} // fencing token -> key, of failed acquires
	var wg sync.WaitGroup
	errs := make(chan error, 2*rounds)
	sem := make(chan struct{}, 8)
	for i := range rounds {
		key := fmt.Sprintf("race/%d", i)
		holder, waiter := b2, b1
		if i%2 == 1 {
			holder, waiter = b1, b2
		}
		tok, res := acquire(t, holder, key, time.Minute)
		if !res.Acquired {
			t.Fatalf("%s not acquired", key)
		}
		start := make(chan struct{})
		sem <- struct{}{}
		wg.Go(func() {
			<-start
			if _, err := holder.Release(context.Background(), backend.ReleaseRequest{Key: key, OwnerToken: tok, Stamp: clock.Now()}); err != nil {
				errs <- err
			}
		})
		wg.Go(func() {
			defer func() { <-sem }()
			<-start
			got, err := waiter.Acquire(context.Background(), backend.AcquireRequest{
				Key: key, OwnerToken: token(), TTL: time.Minute, Holder: "waiter", Stamp: clock.Now()})
			if err != nil {
				errs <- err
				return
			}
			if !got.Acquired {
				mu.Lock()
				waitFor[got.Record.FencingToken] = key
				mu.Unlock()
			}
		})
		close(start)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d of %d acquires lost the race to the release and must be woken", len(waitFor), rounds)
	deadline := time.After(10 * time.Second)
	for len(waitFor) > 0 {
		select {
		case ev := <-events:
			if ev.Type == backend.EventReleased {
				delete(waitFor, ev.Record.FencingToken)
			}
		case <-deadline:
			t.Fatalf("%d failed acquires were never followed by their holder's released event: %v", len(waitFor), waitFor)
		}
	}
}

// TestTwoServersContendedWake: two holdfast servers over one schema, both
// with notify=contended. A waiter queued on one server gets the lock within
// a second of a release sent to the other (the TTL is a minute: the
// engine's expiry timer cannot be what wakes it), also when it is queued
// behind another waiter of its server that won the lock and never failed an
// acquire itself.
func TestTwoServersContendedWake(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two servers")
	}
	dsn := pgtest.DSN(t)
	holdfast := binary(t, "holdfast")
	plugin := binary(t, "holdfast-backend-postgres")
	schema := schemaName(t)
	t.Cleanup(func() { dropSchema(t, dsn, schema) })
	args := []string{"--backend", plugin, "--backend-opt", "dsn=" + dsn, "--backend-opt", "schema=" + schema,
		"--backend-opt", "notify=contended"}
	a := lockv1connect.NewLockServiceClient(http.DefaultClient, "http://"+startServer(t, holdfast, args...).addr)
	b := lockv1connect.NewLockServiceClient(http.DefaultClient, "http://"+startServer(t, holdfast, args...).addr)
	ctx := context.Background()
	const ttl = time.Minute

	acq := func(c lockv1connect.LockServiceClient, key string, wait time.Duration) (*lockv1.AcquireResponse, error) {
		return c.Acquire(ctx, &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(ttl), Wait: durationpb.New(wait), Holder: "t"})
	}
	rel := func(c lockv1connect.LockServiceClient, key string, l *lockv1.Lease) {
		t.Helper()
		res, err := c.Release(ctx, &lockv1.ReleaseRequest{Key: key, OwnerToken: l.GetOwnerToken()})
		if err != nil || !res.GetReleased() {
			t.Fatalf("release %s: %v %v", key, res, err)
		}
	}
	waiters := func(c lockv1connect.LockServiceClient, key string, n uint32) {
		t.Helper()
		eventually(t, 10*time.Second, fmt.Sprintf("%d waiters on %s", n, key), func() bool {
			res, err := c.Inspect(ctx, &lockv1.InspectRequest{Key: key})
			return err == nil && res.GetState().GetWaiters() == n
		})
	}
	type result struct {
		res *lockv1.AcquireResponse
		err error
	}
	wait := func(key string) <-chan result {
		out := make(chan result, 1)
		go func() {
			res, err := acq(b, key, 20*time.Second)
			out <- result{res, err}
		}()
		return out
	}
	got := func(w <-chan result, released time.Time) *lockv1.Lease {
		t.Helper()
		select {
		case r := <-w:
			if r.err != nil || !r.res.GetAcquired() {
				t.Fatalf("waiter: %v %v", r.res, r.err)
			}
			if lag := time.Since(released); lag > 2*time.Second {
				t.Fatalf("waiter got the lock %s after the release: not woken by the release", lag)
			}
			t.Logf("waiter got the lock %s after the release on the other server", time.Since(released).Round(time.Millisecond))
			return r.res.GetLease()
		case <-time.After(30 * time.Second):
			t.Fatal("waiter not served within 30s")
		}
		return nil
	}

	for i := range 3 {
		key := fmt.Sprintf("wake/%d", i)
		held, err := acq(a, key, 0)
		if err != nil || !held.GetAcquired() {
			t.Fatalf("acquire on a: %v %v", held, err)
		}
		w1 := wait(key)
		waiters(b, key, 1)
		w2 := wait(key)
		waiters(b, key, 2)
		// The release goes to server a; both waiters queue on server b.
		released := time.Now()
		rel(a, key, held.GetLease())
		l1 := got(w1, released)
		// w2 became head behind a winner: it never failed an acquire. The
		// winner's lease is released through server a.
		released = time.Now()
		rel(a, key, l1)
		l2 := got(w2, released)
		rel(b, key, l2)
	}
}

// TestServiceConformanceContended runs the shared suite's service level
// (two servers on one schema) with notify=contended, all but the watch
// specs: under this mode Watch reports only the events waiters need (see the
// README), which is what the waiting specs check, across both servers.
func TestServiceConformanceContended(t *testing.T) {
	dsn := pgtest.DSN(t)
	schema := schemaName(t)
	t.Cleanup(func() { dropSchema(t, dsn, schema) })
	plugin, err := harness.Binary(t.Context(), t.TempDir(), "holdfast-backend-postgres")
	if err != nil {
		t.Fatal(err)
	}
	conformance.RunService(t, conformance.Config{
		Serve: &harness.Options{Backend: plugin, BackendOptions: map[string]string{
			"dsn": dsn, "schema": schema, "notify": postgres.NotifyContended}},
		LabelFilter: "!watch",
	})
}

// TestMigrateFromV1: a schema an older plugin created at layout v1, with a
// lock held in it, is migrated to the current version on start; the lock
// stays held and its release by a contended-mode plugin after a failed
// acquire is announced.
func TestMigrateFromV1(t *testing.T) {
	dsn := pgtest.DSN(t)
	schema := schemaName(t)
	t.Cleanup(func() { dropSchema(t, dsn, schema) })
	ctx := context.Background()
	if err := postgres.CreateSchemaAt(ctx, dsn, schema, 1); err != nil {
		t.Fatal(err)
	}
	tok := token()
	fencing := query[int64](t, dsn, `INSERT INTO `+schema+`.locks
		(key, owner, holder, fencing, expires_at, stamp_wall, stamp_logical, changed_at)
		VALUES ('old', sha256($1::bytea), 'v1', nextval('`+schema+`.fencing'), clock_timestamp() + interval '1 minute', 1, 0, clock_timestamp())
		RETURNING fencing`, []byte(tok))
	b := open(t, map[string]string{"schema": schema, "notify": postgres.NotifyContended})
	if got := query[string](t, dsn, "SELECT obj_description(to_regclass($1), 'pg_class')", schema+".locks"); got != "holdfast locks v8" {
		t.Fatalf("table comment %q after migration", got)
	}
	events := watchEvents(t, b, "")
	if _, lost := acquire(t, b, "old", time.Minute); lost.Acquired || lost.Record.FencingToken != uint64(fencing) {
		t.Fatalf("acquire of the v1 lock: %+v, want held by %d", lost, fencing)
	}
	if !release(t, b, "old", tok) {
		t.Fatal("the v1 lock's owner could not release it")
	}
	if ev := nextEvent(t, events); ev.Type != backend.EventReleased || ev.Record.Key != "old" || ev.Record.FencingToken != uint64(fencing) {
		t.Fatalf("event %+v, want released old/%d", ev, fencing)
	}
}

// TestMigrateFromV6: v7 moves the locks triggers' WHEN clauses into their
// function. A schema at v6 with a lock held in it is migrated on start; the
// triggers are left without a WHEN clause, and they announce what v6's did:
// nothing for a change that keeps the owner (an extend), the release of the
// lock taken at v6, and an acquire and release through the functions (the
// calls with a request identity, which a v6 plugin still running on the
// schema makes too).
func TestMigrateFromV6(t *testing.T) {
	dsn := pgtest.DSN(t)
	schema := schemaName(t)
	t.Cleanup(func() { dropSchema(t, dsn, schema) })
	ctx := context.Background()
	if err := postgres.CreateSchemaAt(ctx, dsn, schema, 6); err != nil {
		t.Fatal(err)
	}
	tok := token()
	fencing := query[int64](t, dsn, `INSERT INTO `+schema+`.locks
		(key, owner, holder, fencing, expires_at, stamp_wall, stamp_logical, changed_at, acquired_by)
		VALUES ('old', sha256($1::bytea), 'v6', nextval('`+schema+`.fencing'), clock_timestamp() + interval '1 minute', 1, 0, clock_timestamp(), 1)
		RETURNING fencing`, []byte(tok))
	b := open(t, map[string]string{"schema": schema})
	if got := query[string](t, dsn, "SELECT obj_description(to_regclass($1), 'pg_class')", schema+".locks"); got != "holdfast locks v8" {
		t.Fatalf("table comment %q after migration", got)
	}
	if n := query[int64](t, dsn, `SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass($1) AND NOT tgisinternal`,
		schema+".locks"); n != 2 {
		t.Fatalf("%d triggers on the locks table, want 2", n)
	}
	if n := query[int64](t, dsn, `SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass($1) AND tgqual IS NOT NULL`,
		schema+".locks"); n != 0 {
		t.Fatalf("%d triggers on the locks table keep a WHEN clause", n)
	}
	events := watchEvents(t, b, "")
	ext, err := b.Extend(ctx, backend.ExtendRequest{Key: "old", OwnerToken: tok, TTL: 2 * time.Minute, Stamp: clock.Now()})
	if err != nil || !ext.Extended {
		t.Fatalf("Extend of the v6 lock = %+v, %v", ext, err)
	}
	if !release(t, b, "old", tok) {
		t.Fatal("the v6 lock's owner could not release it")
	}
	// The extend announced nothing: the next event is the release.
	if ev := nextEvent(t, events); ev.Type != backend.EventReleased || ev.Record.Key != "old" || ev.Record.FencingToken != uint64(fencing) ||
		ev.Record.Holder != "v6" {
		t.Fatalf("event %+v, want released old/%d held by v6", ev, fencing)
	}
	if err := acquireRelease(ctx, b, "new", true); err != nil {
		t.Fatal(err)
	}
	for _, want := range []backend.EventType{backend.EventAcquired, backend.EventReleased} {
		if ev := nextEvent(t, events); ev.Type != want || ev.Record.Key != "new" {
			t.Fatalf("event %+v, want %v of new", ev, want)
		}
	}
}

// TestMigrateFromV7: v8 moves the grants insert trigger's WHEN clause into
// the grants trigger function. A schema at v7 with a semaphore permit held
// in it is migrated on start, in each notify mode; the grants table's
// triggers are left without a WHEN clause, and they announce what v7's did:
// nothing for the extend of the permit taken at v7, its release with v7's
// payload (holder, kind, limit), a permit taken after the migration only
// under notify=all (its release in both modes), and an election's grant in
// both modes, with its value.
func TestMigrateFromV7(t *testing.T) {
	for _, notify := range []string{postgres.NotifyAll, postgres.NotifyContended} {
		t.Run("notify="+notify, func(t *testing.T) {
			dsn := pgtest.DSN(t)
			schema := schemaName(t)
			t.Cleanup(func() { dropSchema(t, dsn, schema) })
			ctx := context.Background()
			if err := postgres.CreateSchemaAt(ctx, dsn, schema, 7); err != nil {
				t.Fatal(err)
			}
			tok := token()
			// The permit as a v7 plugin took it: through grant_acquire.
			fencing := query[int64](t, dsn, `SELECT r_about FROM `+schema+`.grant_acquire('sem', sha256($1::bytea), 'v7', 60000000, 1, 0,
				'semaphore', 2, 1, '', '', '', false, '') LIMIT 1`, []byte(tok))
			b := open(t, map[string]string{"schema": schema, "notify": notify})
			if got := query[string](t, dsn, "SELECT obj_description(to_regclass($1), 'pg_class')", schema+".locks"); got != "holdfast locks v8" {
				t.Fatalf("table comment %q after migration", got)
			}
			if n := query[int64](t, dsn, `SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass($1) AND NOT tgisinternal`,
				schema+".grants"); n != 3 {
				t.Fatalf("%d triggers on the grants table, want 3", n)
			}
			if n := query[int64](t, dsn, `SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass($1) AND tgqual IS NOT NULL`,
				schema+".grants"); n != 0 {
				t.Fatalf("%d triggers on the grants table keep a WHEN clause", n)
			}
			events := watchEvents(t, b, "")
			expect := func(typ backend.EventType, key string, fencing int64) backend.Record {
				t.Helper()
				ev := nextEvent(t, events)
				if ev.Type != typ || ev.Record.Key != key || ev.Record.FencingToken != uint64(fencing) {
					t.Fatalf("event %v %s/%d, want %v %s/%d (and nothing before it)", ev.Type, ev.Record.Key,
						ev.Record.FencingToken, typ, key, fencing)
				}
				return ev.Record
			}

			ext, err := b.Extend(ctx, backend.ExtendRequest{Key: "sem", OwnerToken: tok, TTL: 2 * time.Minute, Stamp: clock.Now()})
			if err != nil || !ext.Extended {
				t.Fatalf("Extend of the v7 permit = %+v, %v", ext, err)
			}
			if !release(t, b, "sem", tok) {
				t.Fatal("the v7 permit's owner could not release it")
			}
			// The extend announced nothing: the next event is the release.
			if rec := expect(backend.EventReleased, "sem", fencing); rec.Holder != "v7" || rec.Kind != backend.KindSemaphore || rec.Limit != 2 {
				t.Fatalf("released %+v, want holder v7 of a semaphore of limit 2", rec)
			}

			tok2, res := grant(t, b, "sem", backend.KindSemaphore, 2, 1, time.Minute)
			if !res.Acquired {
				t.Fatalf("permit after the migration not acquired: %+v", res)
			}
			if notify == postgres.NotifyAll {
				if rec := expect(backend.EventAcquired, "sem", int64(res.Record.FencingToken)); rec.Kind != backend.KindSemaphore {
					t.Fatalf("acquired %+v, want a semaphore", rec)
				}
			}
			if !release(t, b, "sem", tok2) {
				t.Fatal("the permit taken after the migration could not be released")
			}
			// Under notify=contended the acquire announced nothing: the next
			// event is the release.
			expect(backend.EventReleased, "sem", int64(res.Record.FencingToken))

			leader := grantReq("lead", token(), backend.KindElection, 1, 1, time.Minute)
			leader.Value = "10.0.0.1:7410"
			won, err := b.Acquire(ctx, leader)
			if err != nil || !won.Acquired {
				t.Fatalf("campaign after the migration: %+v %v", won, err)
			}
			if rec := expect(backend.EventAcquired, "lead", int64(won.Record.FencingToken)); rec.Value != leader.Value {
				t.Fatalf("acquired %+v, want the leader's value %q", rec, leader.Value)
			}
		})
	}
}
