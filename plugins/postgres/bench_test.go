package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/plugins/postgres"
	"github.com/holdfast/holdfast/plugins/postgres/pgtest"
)

// The backend's own cost, next to the plain advisory-lock loop that people
// use today, on the same server in the same run: Acquire+Release on distinct
// keys at concurrency 1 and 32, both on pgxpool's default pool. (`make bench`
// measures the same through a holdfast server; see bench/.)
//
// The backend runs in both notify modes, with and without request
// identities on its calls (rid: what every SDK call carries; one function
// call each, requests.go). Under notify=all every acquire and
// release commits a NOTIFY, and PostgreSQL serialises those commits
// database-wide (more connections only queue on that lock: 32 connections
// measured 2-3x slower than 4 at concurrency 32); notify=contended commits
// none on these uncontended keys.
//
//	go test -run '^$' -bench . -benchtime 3s ./plugins/postgres
//
// (README.md, Limits, has the figures.)

// runConcurrent runs b.N operations split over conc workers and reports
// ops/s and latency percentiles.
func runConcurrent(b *testing.B, conc int, op func(ctx context.Context, worker, i int) error) {
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, conc)
	lat := make([][]time.Duration, conc)
	b.ResetTimer()
	start := time.Now()
	for w := range conc {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				t0 := time.Now()
				if err := op(ctx, w, i); err != nil {
					errs <- err
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "ops/s")
}

func BenchmarkAcquireRelease(b *testing.B) {
	for _, conc := range []int{1, 32} {
		for _, notify := range []string{postgres.NotifyAll, postgres.NotifyContended} {
			// rid: every call carries a request identity, as all SDK
			// traffic does (the engine dedupes retries by it).
			for _, rid := range []bool{false, true} {
				b.Run(fmt.Sprintf("holdfast-postgres/notify=%s/rid=%t/conc=%d", notify, rid, conc), func(b *testing.B) {
					be := open(b, map[string]string{"notify": notify}) // default pool: max(4, CPUs) connections
					runConcurrent(b, conc, func(ctx context.Context, w, i int) error {
						return acquireRelease(ctx, be, fmt.Sprintf("bench/%d", w), rid)
					})
				})
			}
		}
		b.Run(fmt.Sprintf("pg_try_advisory_lock/conc=%d", conc), func(b *testing.B) {
			pool, err := pgxpool.New(context.Background(), pgtest.DSN(b)) // same default pool
			if err != nil {
				b.Fatal(err)
			}
			defer pool.Close()
			runConcurrent(b, conc, func(ctx context.Context, w, i int) error {
				// Session-level advisory locks belong to a connection: lock
				// and unlock on the same one.
				conn, err := pool.Acquire(ctx)
				if err != nil {
					return err
				}
				defer conn.Release()
				var ok bool
				if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", int64(1_000_000+w)).Scan(&ok); err != nil {
					return err
				}
				if !ok {
					return fmt.Errorf("worker %d: advisory lock not acquired", w)
				}
				return conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", int64(1_000_000+w)).Scan(&ok)
			})
		})
	}
}

// BenchmarkHotKeyGrants: 32 workers on one key, each a try (wait 0) and,
// when granted, a release: a mutex (limit 1) against a semaphore of limit
// 10 on the same backend. ops/s and the latency percentiles count attempts
// (a granted one includes its release); grants/s counts the granted ones.
//
//	go test -run '^$' -bench HotKeyGrants -benchtime 3s ./plugins/postgres
func BenchmarkHotKeyGrants(b *testing.B) {
	for _, notify := range []string{postgres.NotifyAll, postgres.NotifyContended} {
		b.Run("notify="+notify, func(b *testing.B) { hotKeyGrants(b, open(b, map[string]string{"notify": notify})) })
	}
}

func hotKeyGrants(b *testing.B, be backend.Backend) {
	for _, c := range []struct {
		name  string
		kind  backend.Kind
		limit int
	}{{"mutex", backend.KindMutex, 1}, {"semaphore-limit-10", backend.KindSemaphore, 10}} {
		b.Run(c.name+"/c=32", func(b *testing.B) {
			key := fmt.Sprintf("hot/%s/%d", c.name, time.Now().UnixNano())
			var grants atomic.Int64
			start := time.Now()
			runConcurrent(b, 32, func(ctx context.Context, _, _ int) error {
				tok := token()
				res, err := be.Acquire(ctx, backend.AcquireRequest{Key: key, OwnerToken: tok, TTL: 10 * time.Second, Stamp: clock.Now(),
					Kind: c.kind, Limit: c.limit, Permits: 1})
				if err != nil || !res.Acquired {
					return err
				}
				grants.Add(1)
				ok, err := be.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: tok, Stamp: clock.Now()})
				if err == nil && !ok {
					err = fmt.Errorf("%s: a granted lease was not released", key)
				}
				return err
			})
			b.ReportMetric(float64(grants.Load())/time.Since(start).Seconds(), "grants/s")
		})
	}
}

// acquireRelease takes key and gives it back, with request identities when
// rid is set.
func acquireRelease(ctx context.Context, be backend.Backend, key string, rid bool) error {
	tok := token()
	var acqID, relID backend.Request
	if rid {
		acqID = backend.Request{ID: token(), Fingerprint: "a"}
		relID = backend.Request{ID: token(), Fingerprint: "r"}
	}
	res, err := be.Acquire(ctx, backend.AcquireRequest{Key: key, OwnerToken: tok, TTL: 10 * time.Second, Stamp: clock.Now(), Request: acqID})
	if err != nil {
		return err
	}
	if !res.Acquired {
		return fmt.Errorf("%s not acquired", key)
	}
	ok, err := be.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: tok, Stamp: clock.Now(), Request: relID})
	if err == nil && !ok {
		err = fmt.Errorf("%s not released", key)
	}
	return err
}

// BenchmarkBatchAcquireRelease: an AcquireBatch of 32 distinct keys, then
// the ReleaseBatch of them, as the server sends concurrent calls; items/s
// counts acquire+release pairs. With request identities (rid, the SDKs'
// calls) each item is a function call in the batch's one round trip.
//
//	go test -run '^$' -bench BatchAcquireRelease -benchtime 3s ./plugins/postgres
func BenchmarkBatchAcquireRelease(b *testing.B) {
	const size = 32
	for _, rid := range []bool{false, true} {
		b.Run(fmt.Sprintf("rid=%t/items=%d", rid, size), func(b *testing.B) {
			be := open(b, nil)
			ctx := context.Background()
			start := time.Now()
			for range b.N {
				acqs := make([]backend.AcquireRequest, size)
				rels := make([]backend.ReleaseRequest, size)
				for i := range size {
					acqs[i] = backend.AcquireRequest{Key: fmt.Sprintf("batch/%d", i), OwnerToken: token(), TTL: 10 * time.Second, Stamp: clock.Now()}
					rels[i] = backend.ReleaseRequest{Key: acqs[i].Key, OwnerToken: acqs[i].OwnerToken, Stamp: clock.Now()}
					if rid {
						acqs[i].Request = backend.Request{ID: token(), Fingerprint: "a"}
						rels[i].Request = backend.Request{ID: token(), Fingerprint: "r"}
					}
				}
				outs, err := be.AcquireBatch(ctx, acqs)
				if err != nil {
					b.Fatal(err)
				}
				for i, o := range outs {
					if o.Err != nil || !o.Value.Acquired {
						b.Fatalf("item %d: %+v", i, o)
					}
				}
				rs, err := be.ReleaseBatch(ctx, rels)
				if err != nil {
					b.Fatal(err)
				}
				for i, o := range rs {
					if o.Err != nil || !o.Value {
						b.Fatalf("release item %d: %+v", i, o)
					}
				}
			}
			b.ReportMetric(float64(b.N*size)/time.Since(start).Seconds(), "items/s")
		})
	}
}

// BenchmarkServerCPU: the database server's own CPU time for one
// acquire+release pair of a key through the schema's functions (what a call
// with a request identity runs), each its own transaction, in a loop inside
// the server: no client and no round trip in the figure, so load on the
// machine moves it far less than the wall-clock rows above (schema v7's
// triggers were measured this way). It reads the server process's CPU time
// from /proc/self/stat with pg_read_file: a Linux server and a superuser,
// as the test servers are.
//
//	go test -run '^$' -bench 'ServerCPU$' -benchtime 5000x -count 6 ./plugins/postgres
func BenchmarkServerCPU(b *testing.B) {
	serverCPU(b, func(s string) string {
		return `PERFORM ` + s + `.lock_acquire('cpu', '\x01'::bytea, 'h', 10000000, 1, 0, false, 1, 'a' || i, 'a', '');
	COMMIT;
	PERFORM ` + s + `.lock_release('cpu', '\x01'::bytea, 1, 0, 'r' || i, 'r', false);
	COMMIT;`
	})
}

// BenchmarkServerCPUSemaphore is BenchmarkServerCPU for a permit of a
// semaphore (limit 2): grant_acquire and grant_release, whose insert and
// delete fire the grants table's triggers (schema v8 was measured this
// way).
//
//	go test -run '^$' -bench ServerCPUSemaphore -benchtime 5000x -count 6 ./plugins/postgres
func BenchmarkServerCPUSemaphore(b *testing.B) {
	serverCPU(b, func(s string) string {
		return `PERFORM ` + s + `.grant_acquire('cpu-sem', '\x01'::bytea, 'h', 10000000, 1, 0, 'semaphore', 2, 1, 'a' || i, 'a', '', false, '');
	COMMIT;
	PERFORM ` + s + `.grant_release('cpu-sem', '\x01'::bytea, 1, 0, 'r' || i, 'r', false);
	COMMIT;`
	})
}

// serverCPU runs b.N rounds of pair (the loop body of one pair, PL/pgSQL,
// on loop variable i, given the quoted schema) in one DO block, in each
// notify mode, and reports the server process's CPU time a pair.
func serverCPU(b *testing.B, pair func(schema string) string) {
	for _, notify := range []string{postgres.NotifyAll, postgres.NotifyContended} {
		b.Run("notify="+notify, func(b *testing.B) {
			ctx := context.Background()
			be := open(b, map[string]string{"notify": notify})
			cfg, err := pgx.ParseConfig(pgtest.DSN(b))
			if err != nil {
				b.Fatal(err)
			}
			cfg.RuntimeParams["holdfast.notify"] = notify // as the plugin's sessions do
			conn, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = conn.Close(ctx) }()
			// utime + stime, in clock ticks (USER_HZ, 100 a second on Linux).
			ticks := func() int64 {
				var t int64
				if err := conn.QueryRow(ctx, `SELECT split_part(s, ' ', 14)::bigint + split_part(s, ' ', 15)::bigint
FROM pg_read_file('/proc/self/stat') AS s`).Scan(&t); err != nil {
					b.Fatal(err)
				}
				return t
			}
			loop := fmt.Sprintf("DO $$ BEGIN FOR i IN 1..%d LOOP\n\t%s\nEND LOOP; END $$", b.N, pair(pgx.Identifier{be.Schema()}.Sanitize()))
			b.ResetTimer()
			t0 := ticks()
			if _, err := conn.Exec(ctx, loop); err != nil {
				b.Fatal(err)
			}
			t1 := ticks()
			b.StopTimer()
			b.ReportMetric(float64(t1-t0)*1e6/100/float64(b.N), "server-cpu-µs/op")
		})
	}
}
