package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/holdfast/holdfast/conformance"
	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/plugins/postgres"
	"github.com/holdfast/holdfast/plugins/postgres/pgtest"
	"github.com/holdfast/holdfast/proto/hlc"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(pgtest.Main(m), conformance.LeakOptions()...)
}

// schemaName is a fresh schema per test, so tests share one database
// without seeing each other's locks.
func schemaName(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.ToLower(t.Name())
	name = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, name)
	if len(name) > 30 {
		name = name[:30]
	}
	return "t_" + name + "_" + hex.EncodeToString(b[:])
}

// open opens a backend on dsn (default: the shared test server) in a fresh
// schema unless opts names one; it is closed and its schema dropped when t
// ends.
func open(t testing.TB, opts map[string]string) *postgres.Backend {
	t.Helper()
	o := map[string]string{"dsn": pgtest.DSN(t), "schema": schemaName(t)}
	for k, v := range opts {
		o[k] = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := postgres.Open(ctx, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	pb := b.(*postgres.Backend)
	t.Cleanup(func() {
		_ = pb.Close()
		if _, ok := opts["schema"]; !ok {
			dropSchema(t, o["dsn"], o["schema"])
		}
	})
	return pb
}

func dropSchema(t testing.TB, dsn, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Logf("drop schema %s: %v", schema, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		t.Logf("drop schema %s: %v", schema, err)
	}
}

func query[T any](t testing.TB, dsn, sql string, args ...any) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	var v T
	if err := conn.QueryRow(ctx, sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

func token() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

var clock = hlc.NewClock(nil, 0)

func acquire(t testing.TB, b backend.Backend, key string, ttl time.Duration) (string, backend.AcquireResult) {
	t.Helper()
	tok := token()
	res, err := b.Acquire(context.Background(), backend.AcquireRequest{
		Key: key, OwnerToken: tok, TTL: ttl, Holder: "test", Stamp: clock.Now(),
	})
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	return tok, res
}

func release(t testing.TB, b backend.Backend, key, tok string) bool {
	t.Helper()
	ok, err := b.Release(context.Background(), backend.ReleaseRequest{Key: key, OwnerToken: tok, Stamp: clock.Now()})
	if err != nil {
		t.Fatalf("Release(%q): %v", key, err)
	}
	return ok
}

// eventually polls cond every 2ms until it is true or the deadline passes.
func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestInfo(t *testing.T) {
	b := open(t, nil)
	info, err := b.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "postgres" || !info.Shared || !info.Durable || info.Fair ||
		info.TTLGranularity != time.Millisecond || info.MinTTL != time.Millisecond || info.MaxTTL != 24*time.Hour {
		t.Fatalf("Info = %+v", info)
	}
}

func TestAcquireReleaseExtendGetList(t *testing.T) {
	ctx := context.Background()
	b := open(t, nil)

	tok, res := acquire(t, b, "a/1", 10*time.Second)
	if !res.Acquired || res.Record.Key != "a/1" || res.Record.FencingToken == 0 || res.Record.Holder != "test" {
		t.Fatalf("first Acquire = %+v", res)
	}
	if r := res.Record.Remaining; r <= 9*time.Second || r > 10*time.Second {
		t.Fatalf("Remaining = %s, want about 10s", r)
	}
	if d := time.Until(res.Record.ExpiresAt); d < 9*time.Second || d > 11*time.Second {
		t.Fatalf("ExpiresAt %s is %s away, want about 10s", res.Record.ExpiresAt, d)
	}

	// Contended: the current holder comes back, without its token.
	_, res2 := acquire(t, b, "a/1", time.Second)
	if res2.Acquired || res2.Record.FencingToken != res.Record.FencingToken || res2.Record.Holder != "test" {
		t.Fatalf("second Acquire = %+v, want the first holder", res2)
	}

	rec, ok, err := b.Get(ctx, "a/1")
	if err != nil || !ok || rec.FencingToken != res.Record.FencingToken || rec.Stamp != res.Record.Stamp {
		t.Fatalf("Get = %+v %v %v", rec, ok, err)
	}
	if _, ok, err := b.Get(ctx, "a/none"); ok || err != nil {
		t.Fatalf("Get(absent) = %v %v", ok, err)
	}

	// Extend: only the owner, fencing and stamp unchanged.
	ext, err := b.Extend(ctx, backend.ExtendRequest{Key: "a/1", OwnerToken: token(), TTL: time.Minute})
	if err != nil || ext.Extended {
		t.Fatalf("Extend(wrong token) = %+v %v", ext, err)
	}
	ext, err = b.Extend(ctx, backend.ExtendRequest{Key: "a/1", OwnerToken: tok, TTL: time.Minute, Stamp: clock.Now()})
	if err != nil || !ext.Extended || ext.Record.FencingToken != res.Record.FencingToken ||
		ext.Record.Stamp != res.Record.Stamp || ext.Record.Remaining < 50*time.Second {
		t.Fatalf("Extend = %+v %v", ext, err)
	}

	// List: key order, prefix, pages.
	for _, k := range []string{"a/3", "a/2", "b/1", "a/4"} {
		acquire(t, b, k, time.Minute)
	}
	var keys []string
	page := backend.ListPage{}
	for {
		page, err = b.List(ctx, backend.ListRequest{Prefix: "a/", PageSize: 3, PageToken: page.NextPageToken})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Records {
			keys = append(keys, r.Key)
		}
		if page.NextPageToken == "" {
			break
		}
	}
	if got := strings.Join(keys, ","); got != "a/1,a/2,a/3,a/4" {
		t.Fatalf("List(a/) = %s", got)
	}
	if _, err := b.List(ctx, backend.ListRequest{PageSize: 1, PageToken: "garbage!"}); !errors.Is(err, backend.ErrInvalidArgument) {
		t.Fatalf("List(bad token) err = %v", err)
	}

	// Release: wrong token no-op, right token frees, second release false.
	if release(t, b, "a/1", token()) {
		t.Fatal("Release with a wrong token succeeded")
	}
	if !release(t, b, "a/1", tok) {
		t.Fatal("Release by the owner failed")
	}
	if release(t, b, "a/1", tok) {
		t.Fatal("second Release succeeded")
	}
	if _, ok, _ := b.Get(ctx, "a/1"); ok {
		t.Fatal("released key still held")
	}
	_, res3 := acquire(t, b, "a/1", time.Second)
	if !res3.Acquired || res3.Record.FencingToken <= res.Record.FencingToken {
		t.Fatalf("re-Acquire = %+v, want a larger fencing token than %d", res3, res.Record.FencingToken)
	}
}

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	b := open(t, nil)
	for _, ttl := range []time.Duration{0, -time.Second, time.Microsecond, 25 * time.Hour} {
		_, err := b.Acquire(ctx, backend.AcquireRequest{Key: "k", OwnerToken: "t", TTL: ttl})
		if !errors.Is(err, backend.ErrInvalidArgument) {
			t.Errorf("Acquire(ttl=%s) err = %v, want ErrInvalidArgument", ttl, err)
		}
	}
	for _, key := range []string{"", "a\x00b"} {
		_, err := b.Acquire(ctx, backend.AcquireRequest{Key: key, OwnerToken: "t", TTL: time.Second})
		if !errors.Is(err, backend.ErrInvalidArgument) {
			t.Errorf("Acquire(key=%q) err = %v, want ErrInvalidArgument", key, err)
		}
	}
	// Invalid UTF-8 is refused by the database as data: invalid argument.
	_, err := b.Acquire(ctx, backend.AcquireRequest{Key: "\xff\xfe", OwnerToken: "t", TTL: time.Second})
	if !errors.Is(err, backend.ErrInvalidArgument) {
		t.Errorf("Acquire(invalid UTF-8) err = %v, want ErrInvalidArgument", err)
	}
	if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: "nobody", OwnerToken: "x"}); ok || err != nil {
		t.Errorf("Release(unknown) = %v %v", ok, err)
	}
}

func TestOptions(t *testing.T) {
	cases := []struct {
		opts map[string]string
		want string
	}{
		{map[string]string{}, "dsn is required"},
		{map[string]string{"dsn": "x", "bogus": "1"}, "unknown option(s) bogus"},
		{map[string]string{"dsn": "x", "max_conns": "0"}, "max_conns"},
		{map[string]string{"dsn": "x", "call_timeout": "soon"}, "call_timeout"},
		{map[string]string{"dsn": "x", "idle_retention": "1s", "statement_timeout": "2s"}, "must exceed statement_timeout"},
		{map[string]string{"dsn": "x", "schema": strings.Repeat("s", 51)}, "schema"},
		{map[string]string{"dsn": "x", "schema": "a-b"}, "schema"},
		{map[string]string{"dsn": "x", "schema": "1abc"}, "schema"},
		{map[string]string{"dsn": "x", "schema": "x'; drop"}, "schema"},
	}
	for _, c := range cases {
		_, err := postgres.ParseOptions(c.opts)
		if !errors.Is(err, backend.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseOptions(%v) = %v, want invalid argument mentioning %q", c.opts, err, c.want)
		}
	}
}

// Racers on one key, with request identities (lock_acquire) or without
// (the plain statement), on a key without a row (the INSERT decides) and
// then on its free row (the row lock decides): exactly one wins each race,
// and every loser reports the winner.
func TestRacingAcquirers(t *testing.T) {
	b := open(t, map[string]string{"max_conns": "32"})
	for _, rid := range []bool{false, true} {
		for round := range 3 {
			key := fmt.Sprintf("race/%t/%d", rid, round)
			var last uint64
			for race := range 2 { // on a new key, then on its free row
				winner, tok, fence := race1(t, b, key, rid)
				if fence <= last {
					t.Fatalf("%s race %d: fencing %d after %d", key, race, fence, last)
				}
				last = fence
				if ok, err := b.Release(context.Background(), backend.ReleaseRequest{Key: key, OwnerToken: tok, Stamp: clock.Now()}); err != nil || !ok {
					t.Fatalf("%s: racer %d's release = %v, %v", key, winner, ok, err)
				}
			}
		}
	}
}

// race1 lets 32 racers acquire key at once and checks that exactly one won
// and every other saw it; it returns the winner, its token and its fencing
// token.
func race1(t *testing.T, b backend.Backend, key string, rid bool) (winner int, tok string, fence uint64) {
	t.Helper()
	const n = 32
	var wg sync.WaitGroup
	results := make([]backend.AcquireResult, n)
	errs := make([]error, n)
	toks := make([]string, n)
	start := make(chan struct{})
	for i := range n {
		toks[i] = token()
		req := backend.AcquireRequest{Key: key, OwnerToken: toks[i], TTL: 10 * time.Second, Holder: fmt.Sprint(i), Stamp: clock.Now()}
		if rid {
			req.Request = backend.Request{ID: token(), Fingerprint: "fp"}
		}
		wg.Go(func() {
			<-start
			results[i], errs[i] = b.Acquire(context.Background(), req)
		})
	}
	close(start)
	wg.Wait()
	winners := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("%s: racer %d: %v", key, i, errs[i])
		}
		if results[i].Acquired {
			winners++
			winner, tok, fence = i, toks[i], results[i].Record.FencingToken
		}
	}
	if winners != 1 {
		t.Fatalf("%s: %d winners, want exactly 1", key, winners)
	}
	for i := range n {
		if results[i].Record.FencingToken != fence || results[i].Record.Holder != fmt.Sprint(winner) {
			t.Fatalf("%s: racer %d saw %+v, winner %d has fencing %d", key, i, results[i].Record, winner, fence)
		}
	}
	return winner, tok, fence
}

func TestRacingTakeoverAfterExpiry(t *testing.T) {
	b := open(t, map[string]string{"max_conns": "16"})
	_, first := acquire(t, b, "takeover", 20*time.Millisecond)
	time.Sleep(30 * time.Millisecond) // let the lease run out: the point of the test is expiry
	const n = 16
	var wg sync.WaitGroup
	var mu sync.Mutex
	winners := 0
	for range n {
		wg.Go(func() {
			res, err := b.Acquire(context.Background(), backend.AcquireRequest{
				Key: "takeover", OwnerToken: token(), TTL: 10 * time.Second, Stamp: clock.Now(),
			})
			if err != nil {
				t.Error(err)
				return
			}
			if res.Acquired {
				mu.Lock()
				winners++
				mu.Unlock()
				if res.Record.FencingToken <= first.Record.FencingToken {
					t.Errorf("takeover fencing %d <= %d", res.Record.FencingToken, first.Record.FencingToken)
				}
			}
		})
	}
	wg.Wait()
	if winners != 1 {
		t.Fatalf("%d winners of an expired key, want exactly 1", winners)
	}
}

func TestStaleReleaseLeavesSuccessor(t *testing.T) {
	ctx := context.Background()
	b := open(t, nil)
	stale, first := acquire(t, b, "k", 50*time.Millisecond)
	var second backend.AcquireResult
	var succ string
	eventually(t, 2*time.Second, "successor acquires after expiry", func() bool {
		succ, second = acquire(t, b, "k", 10*time.Second)
		return second.Acquired
	})
	if release(t, b, "k", stale) {
		t.Fatal("stale holder's release succeeded")
	}
	ext, err := b.Extend(ctx, backend.ExtendRequest{Key: "k", OwnerToken: stale, TTL: time.Minute})
	if err != nil || ext.Extended {
		t.Fatalf("stale Extend = %+v %v", ext, err)
	}
	rec, ok, err := b.Get(ctx, "k")
	if err != nil || !ok || rec.FencingToken != second.Record.FencingToken {
		t.Fatalf("Get after stale release = %+v %v %v, want the successor", rec, ok, err)
	}
	if second.Record.FencingToken <= first.Record.FencingToken {
		t.Fatalf("fencing went %d -> %d", first.Record.FencingToken, second.Record.FencingToken)
	}
	if !release(t, b, "k", succ) {
		t.Fatal("successor cannot release")
	}
}

// TestExpiryByDatabaseClock: a lock is held for at least its TTL and free
// within TTL + granularity (+ slack for round trips and polling on a busy
// 2-core machine).
func TestExpiryByDatabaseClock(t *testing.T) {
	ctx := context.Background()
	b := open(t, nil)
	info, _ := b.Info(ctx)
	const ttl = 300 * time.Millisecond
	const slack = 150 * time.Millisecond // round trips and polling on a loaded 2-core machine
	for i := range 3 {
		key := fmt.Sprintf("ttl/%d", i)
		before := time.Now()
		_, res := acquire(t, b, key, ttl)
		after := time.Now()
		if !res.Acquired {
			t.Fatal("not acquired")
		}
		var freed time.Time
		for {
			// An attempt is judged by when it was sent: one sent before the
			// deadline may be answered after it when the machine stalls,
			// and finding the lock held then is no fault of the backend's.
			sent := time.Now()
			_, r := acquire(t, b, key, time.Second)
			if r.Acquired {
				freed = time.Now()
				break
			}
			if sent.Sub(after) > ttl+info.TTLGranularity+slack {
				t.Fatalf("still held by an Acquire sent %s after the first one returned (ttl %s, granularity %s, slack %s)",
					sent.Sub(after), ttl, info.TTLGranularity, slack)
			}
			time.Sleep(time.Millisecond)
		}
		// The database set the expiry while the first Acquire ran (after
		// before) and checked it while the successful one ran (before
		// freed); both clocks are this machine's.
		if held := freed.Sub(before); held < ttl {
			t.Fatalf("lock free %s after the Acquire was sent, before its ttl %s", held, ttl)
		}
		t.Logf("ttl %s: free between %s and %s after the acquire", ttl, freed.Sub(after), freed.Sub(before))
	}
}

func TestFencingAndStampsIncrease(t *testing.T) {
	ctx := context.Background()
	b1 := open(t, nil)
	// A second plugin on the same schema: fencing is shared through the
	// database, not kept in the plugin.
	b2 := open(t, map[string]string{"schema": b1Schema(t, b1)})
	var lastFence uint64
	var lastStamp hlc.Timestamp
	check := func(res backend.AcquireResult) {
		t.Helper()
		if !res.Acquired {
			t.Fatalf("not acquired: %+v", res)
		}
		if res.Record.FencingToken <= lastFence {
			t.Fatalf("fencing %d after %d", res.Record.FencingToken, lastFence)
		}
		if !res.Record.Stamp.After(lastStamp) {
			t.Fatalf("stamp %s after %s", res.Record.Stamp, lastStamp)
		}
		lastFence, lastStamp = res.Record.FencingToken, res.Record.Stamp
	}
	for i := range 10 {
		bk := []*postgres.Backend{b1, b2}[i%2]
		tok, res := acquire(t, bk, "f", time.Minute)
		check(res)
		switch i % 3 {
		case 0:
			release(t, bk, "f", tok)
		case 1: // expire
			if ok, _ := bk.Release(ctx, backend.ReleaseRequest{Key: "f", OwnerToken: tok}); !ok {
				t.Fatal("release")
			}
			_, res = acquire(t, bk, "f", 5*time.Millisecond)
			check(res)
			eventually(t, time.Second, "expiry", func() bool { _, ok, _ := bk.Get(ctx, "f"); return !ok })
		case 2:
			release(t, bk, "f", tok)
		}
	}

	// A proposal behind the key's last stamp (a server whose clock is
	// behind) is raised past it: NextStamp(last, proposed).
	behind := hlc.Timestamp{WallTime: lastStamp.WallTime - int64(time.Hour)}
	res, err := b1.Acquire(ctx, backend.AcquireRequest{Key: "f", OwnerToken: token(), TTL: time.Second, Stamp: behind})
	if err != nil || !res.Acquired || !res.Record.Stamp.After(lastStamp) {
		t.Fatalf("Acquire with a stamp behind = %+v %v, want a stamp after %s", res, err, lastStamp)
	}
	// A release stamp later than the acquisition's is kept for the next holder.
	tok, res := acquire(t, b1, "g", time.Minute)
	far := hlc.Timestamp{WallTime: res.Record.Stamp.WallTime + int64(time.Minute), Logical: 7}
	if ok, err := b1.Release(ctx, backend.ReleaseRequest{Key: "g", OwnerToken: tok, Stamp: far}); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	_, res = acquire(t, b1, "g", time.Minute)
	if res.Record.Stamp != far.Next() {
		t.Fatalf("stamp after a later release stamp = %s, want %s", res.Record.Stamp, far.Next())
	}
	// Logical overflow carries into the wall time.
	tok, _ = acquire(t, b1, "h", time.Minute)
	top := hlc.Timestamp{WallTime: far.WallTime + 1, Logical: ^uint32(0)}
	if ok, err := b1.Release(ctx, backend.ReleaseRequest{Key: "h", OwnerToken: tok, Stamp: top}); !ok || err != nil {
		t.Fatalf("release with the top stamp: %v %v", ok, err)
	}
	_, res = acquire(t, b1, "h", time.Minute)
	if res.Record.Stamp != (hlc.Timestamp{WallTime: top.WallTime + 1}) {
		t.Fatalf("stamp after logical max = %s", res.Record.Stamp)
	}
}

func b1Schema(t testing.TB, b *postgres.Backend) string {
	t.Helper()
	return b.Schema()
}

// closedPort is a loopback port nothing listens on.
func closedPort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

func TestWatch(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	// The long max sleep keeps this plugin's cleaner to the expiries it
	// stores itself (see the takeover below).
	b := open(t, map[string]string{"cleaner_max_sleep": "1h"})
	events := make(chan backend.Event, 100)
	done := make(chan error, 1)
	go func() {
		done <- b.Watch(ctx, "w/", func(ev backend.Event) error {
			events <- ev
			return nil
		})
	}()
	next := func() backend.Event {
		t.Helper()
		select {
		case ev := <-events:
			return ev
		case <-time.After(5 * time.Second):
			t.Fatal("no event within 5s")
		}
		return backend.Event{}
	}
	if ev := next(); ev.Type != backend.EventSynced {
		t.Fatalf("first event %v, want synced", ev.Type)
	}
	acquire(t, b, "other/1", time.Minute) // outside the prefix
	tok, res := acquire(t, b, "w/1", time.Minute)
	if ev := next(); ev.Type != backend.EventAcquired || ev.Record.Key != "w/1" ||
		ev.Record.FencingToken != res.Record.FencingToken || ev.Record.Stamp != res.Record.Stamp ||
		ev.Record.Holder != "test" || ev.Record.Remaining <= 0 || !ev.Record.ExpiresAt.Equal(res.Record.ExpiresAt) {
		t.Fatalf("event %+v, want acquired %+v", ev, res.Record)
	}
	release(t, b, "w/1", tok)
	if ev := next(); ev.Type != backend.EventReleased || ev.Record.Key != "w/1" || ev.Record.FencingToken != res.Record.FencingToken {
		t.Fatalf("event %+v, want released", ev)
	}

	// Expiry: the cleaner announces it within a few ms of the TTL.
	// The lease starts somewhere between sent and acquiredAt (the
	// database's clock is this machine's): the event may not come before
	// sent+TTL, and must come soon after acquiredAt+TTL. (Measuring both
	// from acquiredAt failed the lower bound whenever the answer took over
	// 5ms to reach us, which a loaded machine does.) The upper slack is
	// for scheduling on a loaded 2-core machine under -race, where a
	// timer-driven wake-up in-process was seen 117ms late; a cleaner that
	// missed its timer would wait for cleaner_max_sleep (1h here).
	const ttl = 200 * time.Millisecond
	sent := time.Now()
	_, res = acquire(t, b, "w/2", ttl)
	acquiredAt := time.Now()
	if ev := next(); ev.Type != backend.EventAcquired {
		t.Fatalf("event %+v, want acquired", ev)
	}
	ev := next()
	at := time.Now()
	if ev.Type != backend.EventExpired || ev.Record.Key != "w/2" || ev.Record.FencingToken != res.Record.FencingToken {
		t.Fatalf("event %+v, want expired w/2", ev)
	}
	early, lag := at.Sub(sent), at.Sub(acquiredAt)
	if early < ttl-5*time.Millisecond || lag > ttl+250*time.Millisecond {
		t.Fatalf("expired event %s after the acquire was sent, %s after it was answered; want about %s", early, lag, ttl)
	}
	t.Logf("expired event %s after a %s lease was answered", lag, ttl)

	// Takeover of an expired lock before any cleaner has marked it: the
	// acquiring statement itself announces expired (the old holder) and then
	// acquired. b2 has no cleaner; b's sleeps until other/1 expires, but
	// only once the round that announced w/2's expiry is over: that round
	// reads the earliest expiry of the table after its NOTIFY reached us,
	// and if b2 stored w/3 before that read (a loaded machine), it would
	// sleep until w/3's expiry and mark it free. So wait for that sleep.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if at, asleep := postgres.CleanerSleepsUntil(b); asleep && time.Until(at) > 30*time.Second {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("b's cleaner did not settle to sleep until other/1 expires")
		}
	}
	b2 := postgres.NewWithoutCleaner(t, pgtest.DSN(t), b.Schema())
	_, res = acquire(t, b2, "w/3", 10*time.Millisecond)
	if ev := next(); ev.Type != backend.EventAcquired || ev.Record.Key != "w/3" {
		t.Fatalf("event %+v, want acquired w/3", ev)
	}
	time.Sleep(20 * time.Millisecond) // let the 10ms lease run out: the point of the test
	if got := query[int64](t, pgtest.DSN(t), "SELECT count(*) FROM "+pgx.Identifier{b.Schema(), "locks"}.Sanitize()+
		" WHERE key = 'w/3' AND owner IS NOT NULL"); got != 1 {
		t.Fatalf("a cleaner marked w/3 free; the takeover path is not exercised")
	}
	_, res2 := acquire(t, b2, "w/3", time.Minute)
	if !res2.Acquired {
		t.Fatal("takeover after expiry failed")
	}
	if ev := next(); ev.Type != backend.EventExpired || ev.Record.FencingToken != res.Record.FencingToken {
		t.Fatalf("event %+v, want expired w/3 fencing %d", ev, res.Record.FencingToken)
	}
	if ev := next(); ev.Type != backend.EventAcquired || ev.Record.FencingToken != res2.Record.FencingToken {
		t.Fatalf("event %+v, want acquired w/3 fencing %d", ev, res2.Record.FencingToken)
	}

	// A quiet watch pings its connection and keeps delivering.
	restore := postgres.SetWatchPing(50 * time.Millisecond)
	defer restore()
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	events2 := make(chan backend.Event, 10)
	done2 := make(chan error, 1)
	go func() {
		done2 <- b.Watch(ctx2, "q/", func(ev backend.Event) error { events2 <- ev; return nil })
	}()
	if ev := <-events2; ev.Type != backend.EventSynced {
		t.Fatalf("first event %v", ev.Type)
	}
	time.Sleep(300 * time.Millisecond) // several ping rounds: the point of this part
	acquire(t, b, "q/1", time.Minute)
	select {
	case ev := <-events2:
		if ev.Type != backend.EventAcquired {
			t.Fatalf("event after pings %+v", ev)
		}
	case err := <-done2:
		t.Fatalf("quiet watch ended: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("no event after quiet pings")
	}
	cancel2()
	if err := <-done2; !errors.Is(err, context.Canceled) {
		t.Fatalf("quiet watch returned %v, want context.Canceled", err)
	}

	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch returned %v, want context.Canceled", err)
	}
}

// TestTableBounded: rows of free keys are deleted after idle_retention, so
// many unique keys do not grow the table without bound.
func TestTableBounded(t *testing.T) {
	dsn := pgtest.DSN(t)
	const n, retention = 1000, 3 * time.Second
	b := open(t, map[string]string{"statement_timeout": "2s", "idle_retention": retention.String(), "cleaner_max_sleep": "200ms"})
	count := func() int64 {
		return query[int64](t, dsn, "SELECT count(*) FROM "+pgx.Identifier{b.Schema(), "locks"}.Sanitize())
	}
	var maxFence uint64
	// freed: when each free row was at the latest made free (the time
	// before its Release or its 1ms Acquire was sent).
	freed := map[string]time.Time{}
	for i := range n {
		key := fmt.Sprintf("u/%d", i)
		tok, res := acquire(t, b, key, time.Minute)
		maxFence = max(maxFence, res.Record.FencingToken)
		if i%2 == 0 {
			freed[key] = time.Now()
			release(t, b, key, tok)
		} else {
			// the others expire
			freed[key+"/short"] = time.Now()
			acquire(t, b, key+"/short", time.Millisecond)
		}
	}
	// Free rows are kept for idle_retention: every row freed less than that
	// before the read is there, and every held one. On a loaded machine the
	// loop can outlast idle_retention, and the cleaner rightly deleted the
	// rows freed first (a run counted 779 rows of 1500).
	read := time.Now()
	rows := map[string]bool{}
	for _, k := range query[[]string](t, dsn, "SELECT coalesce(array_agg(key), '{}') FROM "+pgx.Identifier{b.Schema(), "locks"}.Sanitize()) {
		rows[k] = true
	}
	kept := 0
	for i := 1; i < n; i += 2 {
		if k := fmt.Sprintf("u/%d", i); !rows[k] {
			t.Fatalf("held key %q has no row", k)
		}
	}
	for k, at := range freed {
		if read.Sub(at) < retention {
			if !rows[k] {
				t.Fatalf("row of %q deleted %s after it was freed, before idle_retention %s", k, read.Sub(at), retention)
			}
			kept++
		}
	}
	t.Logf("%d rows freed within idle_retention of the read, all kept; %d rows in all", kept, len(rows))
	eventually(t, 20*time.Second, "free rows deleted after idle_retention", func() bool {
		return count() == n/2 // the still-held u/<odd> keys
	})
	// A key whose row was deleted starts again above every token handed out.
	_, res := acquire(t, b, "u/0", time.Minute)
	if !res.Acquired || res.Record.FencingToken <= maxFence {
		t.Fatalf("re-acquired deleted key: %+v, want fencing above %d", res, maxFence)
	}
}

func TestBadDSN(t *testing.T) {
	dsn := pgtest.DSN(t)
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, dsn, want string
		sentinel        error
	}{
		{"wrong password", strings.Replace(dsn, ":"+cfg.Password+"@", ":wrong@", 1), "password authentication failed", backend.ErrUnavailable},
		{"wrong port", fmt.Sprintf("postgres://holdfast:x@127.0.0.1:%d/holdfast?connect_timeout=2", closedPort(t)), "connect", backend.ErrUnavailable},
		{"malformed", "postgres://holdfast:x@127.0.0.1:notaport/holdfast", "dsn", backend.ErrInvalidArgument},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			_, err := postgres.Open(context.Background(), map[string]string{"dsn": c.dsn, "schema": schemaName(t)})
			took := time.Since(start)
			if err == nil || !errors.Is(err, c.sentinel) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Open = %v, want %v mentioning %q", err, c.sentinel, c.want)
			}
			if strings.Contains(err.Error(), cfg.Password) {
				t.Fatalf("error leaks the password: %v", err)
			}
			if took > 10*time.Second {
				t.Fatalf("Open took %s to fail", took)
			}
			t.Logf("%s: failed in %s: %v", c.name, took.Round(time.Millisecond), err)
		})
	}
}

func TestConcurrentMigration(t *testing.T) {
	dsn := pgtest.DSN(t)
	schema := schemaName(t)
	t.Cleanup(func() { dropSchema(t, dsn, schema) })
	const n = 4
	var wg sync.WaitGroup
	errs := make([]error, n)
	backends := make([]backend.Backend, n)
	for i := range n {
		wg.Go(func() {
			backends[i], errs[i] = postgres.Open(context.Background(), map[string]string{"dsn": dsn, "schema": schema})
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("Open %d: %v", i, errs[i])
		}
		defer backends[i].(*postgres.Backend).Close()
	}
	comment := query[string](t, dsn, "SELECT obj_description(to_regclass($1), 'pg_class')",
		pgx.Identifier{schema, "locks"}.Sanitize())
	if comment != "holdfast locks v8" {
		t.Fatalf("table comment %q", comment)
	}
	// Opening again is a no-op.
	b := open(t, map[string]string{"schema": schema})
	acquire(t, b, "x", time.Second)
}

// TestCleaner: the cleaner announces the expiry of a lock stored by another
// plugin (which has no cleaner, as if it had died) within cleaner_max_sleep,
// and skips a row someone else has locked instead of waiting for it.
func TestCleaner(t *testing.T) {
	dsn := pgtest.DSN(t)
	b := open(t, map[string]string{"cleaner_max_sleep": "300ms"})
	other := postgres.NewWithoutCleaner(t, dsn, b.Schema())
	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan backend.Event, 100)
	done := make(chan error, 1)
	go func() {
		done <- b.Watch(ctx, "", func(ev backend.Event) error { events <- ev; return nil })
	}()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Watch returned %v, want context.Canceled", err)
		}
	}()
	if ev := <-events; ev.Type != backend.EventSynced {
		t.Fatalf("first event %v", ev.Type)
	}
	expired := func(within time.Duration) string {
		t.Helper()
		deadline := time.After(within)
		for {
			select {
			case ev := <-events:
				if ev.Type == backend.EventExpired {
					return ev.Record.Key
				}
			case <-deadline:
				t.Fatalf("no expired event within %s", within)
			}
		}
	}

	acquire(t, other, "orphan", 50*time.Millisecond)
	start := time.Now()
	if k := expired(2 * time.Second); k != "orphan" {
		t.Fatalf("expired %q", k)
	}
	t.Logf("expiry of another plugin's lock announced %s after its acquire (ttl 50ms, max sleep 300ms)", time.Since(start))

	// Two expired rows, one of them locked by a transaction: the cleaner
	// takes the other at once and the locked one after the transaction. The
	// lock must be taken before the rows expire; on a machine too loaded
	// for that, the round is tried again with new keys.
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	const ttl = 200 * time.Millisecond
	for attempt := 0; ; attempt++ {
		locked, free := fmt.Sprintf("locked/%d", attempt), fmt.Sprintf("free/%d", attempt)
		acquired := time.Now()
		acquire(t, other, locked, ttl)
		acquire(t, other, free, ttl)
		tx, err := conn.Begin(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(context.Background(), "SELECT 1 FROM "+pgx.Identifier{b.Schema(), "locks"}.Sanitize()+
			" WHERE key = $1 FOR UPDATE", locked); err != nil {
			t.Fatal(err)
		}
		if time.Since(acquired) > ttl*3/4 {
			_ = tx.Rollback(context.Background())
			expired(2 * time.Second)
			expired(2 * time.Second)
			if attempt == 3 {
				t.Fatal("could not lock a row before its lease ran out in 4 attempts")
			}
			continue
		}
		if k := expired(2 * time.Second); k != free {
			t.Fatalf("expired %q first, want %s (%s is locked by a transaction)", k, free, locked)
		}
		if err := tx.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
		if k := expired(2 * time.Second); k != locked {
			t.Fatalf("expired %q, want %s", k, locked)
		}
		return
	}
}
