package memory

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/proto/hlc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newBackend(t *testing.T) *Backend {
	t.Helper()
	b := New()
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func acquire(t *testing.T, b *Backend, key, token string, ttl time.Duration) backend.AcquireResult {
	t.Helper()
	res, err := b.Acquire(context.Background(), backend.AcquireRequest{
		Key: key, OwnerToken: token, TTL: ttl, Holder: "h-" + token,
	})
	if err != nil {
		t.Fatalf("Acquire(%s, %s): %v", key, token, err)
	}
	return res
}

// waitFree polls Get until the key is free or the deadline passes.
func waitFree(t *testing.T, b *Backend, key string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if _, ok, err := b.Get(context.Background(), key); err != nil {
			t.Fatal(err)
		} else if !ok {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("%s still held after %s", key, within)
}

func TestRacingAcquirersExactlyOneWins(t *testing.T) {
	b := newBackend(t)
	const n = 32
	var wg sync.WaitGroup
	wins := make(chan string, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			tok := fmt.Sprintf("tok-%d", i)
			res, err := b.Acquire(context.Background(), backend.AcquireRequest{Key: "race", OwnerToken: tok, TTL: time.Minute})
			if err != nil {
				t.Error(err)
				return
			}
			if res.Acquired {
				wins <- tok
			}
		}()
	}
	close(start)
	wg.Wait()
	close(wins)
	var winners []string
	for w := range wins {
		winners = append(winners, w)
	}
	if len(winners) != 1 {
		t.Fatalf("winners = %v, want exactly one", winners)
	}
	rec, ok, _ := b.Get(context.Background(), "race")
	if !ok || rec.Holder != "" {
		t.Fatalf("Get = %+v, %v", rec, ok)
	}
}

func TestAcquireContendedReportsHolder(t *testing.T) {
	b := newBackend(t)
	first := acquire(t, b, "k", "a", time.Minute)
	if !first.Acquired {
		t.Fatal("first acquire failed")
	}
	second := acquire(t, b, "k", "b", time.Minute)
	if second.Acquired {
		t.Fatal("second acquire won a held key")
	}
	if second.Record.FencingToken != first.Record.FencingToken || second.Record.Holder != "h-a" {
		t.Fatalf("current = %+v, want the first holder %+v", second.Record, first.Record)
	}
	if second.Record.Remaining <= 0 || second.Record.Remaining > time.Minute {
		t.Fatalf("remaining = %s", second.Record.Remaining)
	}
}

func TestStaleReleaseLeavesSuccessor(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	old := acquire(t, b, "k", "old", 5*time.Millisecond)
	waitFree(t, b, "k", time.Second)
	succ := acquire(t, b, "k", "new", time.Minute)
	if !succ.Acquired {
		t.Fatal("takeover after expiry failed")
	}
	if succ.Record.FencingToken <= old.Record.FencingToken {
		t.Fatalf("fence after takeover %d <= %d", succ.Record.FencingToken, old.Record.FencingToken)
	}
	if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: "k", OwnerToken: "old"}); err != nil || ok {
		t.Fatalf("stale release = %v, %v; want false, nil", ok, err)
	}
	if ext, err := b.Extend(ctx, backend.ExtendRequest{Key: "k", OwnerToken: "old", TTL: time.Minute}); err != nil || ext.Extended {
		t.Fatalf("stale extend = %+v, %v", ext, err)
	}
	rec, ok, err := b.Get(ctx, "k")
	if err != nil || !ok || rec.FencingToken != succ.Record.FencingToken {
		t.Fatalf("Get = %+v, %v, %v; want the successor", rec, ok, err)
	}
	if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: "k", OwnerToken: "new"}); err != nil || !ok {
		t.Fatalf("release by holder = %v, %v", ok, err)
	}
	if ok, _ := b.Release(ctx, backend.ReleaseRequest{Key: "k", OwnerToken: "new"}); ok {
		t.Fatal("second release answered true")
	}
}

func TestExpiryIsExactOnAccess(t *testing.T) {
	b := newBackend(t)
	res := acquire(t, b, "k", "a", 30*time.Millisecond)
	// Held for at least the TTL...
	for {
		asked := time.Now()
		if !asked.Before(res.Record.ExpiresAt) {
			break
		}
		if again := acquire(t, b, "k", "b", time.Minute); again.Acquired {
			if asked.Before(res.Record.ExpiresAt.Add(-time.Millisecond)) { // 1ms for wall vs monotonic
				t.Fatalf("acquired %s before expiry", res.Record.ExpiresAt.Sub(asked))
			}
			return // won right at expiry: fine
		}
		time.Sleep(time.Millisecond)
	}
	// ... and free right after it.
	waitFree(t, b, "k", 50*time.Millisecond)
}

func TestExtend(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	res := acquire(t, b, "k", "a", 500*time.Millisecond)
	ext, err := b.Extend(ctx, backend.ExtendRequest{Key: "k", OwnerToken: "a", TTL: time.Minute})
	if err != nil || !ext.Extended {
		t.Fatalf("extend = %+v, %v", ext, err)
	}
	if ext.Record.FencingToken != res.Record.FencingToken || ext.Record.Stamp != res.Record.Stamp {
		t.Fatalf("extend changed fence or stamp: %+v vs %+v", ext.Record, res.Record)
	}
	if ext.Record.Remaining < 50*time.Second {
		t.Fatalf("remaining after extend = %s", ext.Record.Remaining)
	}
	// Past the original expiry, the extension holds.
	time.Sleep(time.Until(res.Record.ExpiresAt) + 10*time.Millisecond)
	if _, ok, _ := b.Get(ctx, "k"); !ok {
		t.Fatal("extended lock expired at its original TTL")
	}
	// Extend can also shorten; the reaper must honour the earlier expiry.
	if ext, _ = b.Extend(ctx, backend.ExtendRequest{Key: "k", OwnerToken: "a", TTL: 5 * time.Millisecond}); !ext.Extended {
		t.Fatal("shortening extend failed")
	}
	waitReaped(t, b, time.Second)
}

// waitReaped waits until the reaper has deleted every entry on its own (no
// access expires them here).
func waitReaped(t *testing.T, b *Backend, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		b.mu.Lock()
		n, h := len(b.locks), len(b.expiries)
		b.mu.Unlock()
		if n == 0 && h == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d entries (%d in heap) left after %s", n, h, within)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestMemoryDoesNotGrowWithUniqueKeys(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	for i := range 1000 {
		key := fmt.Sprintf("rel-%d", i)
		acquire(t, b, key, "t", time.Minute)
		if ok, _ := b.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: "t"}); !ok {
			t.Fatal("release failed")
		}
	}
	for i := range 1000 {
		acquire(t, b, fmt.Sprintf("exp-%d", i), "t", time.Millisecond)
	}
	waitReaped(t, b, 2*time.Second)
}

func TestExpiryEvent(t *testing.T) {
	b := newBackend(t)
	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan backend.Event, 16)
	done := make(chan error, 1)
	go func() {
		done <- b.Watch(ctx, "ev/", func(ev backend.Event) error { events <- ev; return nil })
	}()
	if ev := <-events; ev.Type != backend.EventSynced {
		t.Fatalf("first event %v, want synced", ev.Type)
	}
	acquire(t, b, "other", "x", time.Minute) // not under the prefix
	const ttl = 20 * time.Millisecond
	start := time.Now()
	res := acquire(t, b, "ev/k", "a", ttl)
	ev := <-events
	if ev.Type != backend.EventAcquired || ev.Record.FencingToken != res.Record.FencingToken {
		t.Fatalf("event %v %+v, want acquired", ev.Type, ev.Record)
	}
	select {
	case ev = <-events:
	case <-time.After(5 * time.Second):
		t.Fatal("no expiry event")
	}
	late := time.Since(start)
	if ev.Type != backend.EventExpired || ev.Record.Key != "ev/k" {
		t.Fatalf("event %v %+v, want expired ev/k", ev.Type, ev.Record)
	}
	if late < ttl {
		t.Fatalf("expired after %s, before its TTL %s", late, ttl)
	}
	t.Logf("expiry event %s after acquire (ttl %s)", late, ttl)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch returned %v, want context.Canceled", err)
	}
}

func TestWatchReleaseAndTakeoverEvents(t *testing.T) {
	b := newBackend(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make(chan backend.Event, 16)
	go func() { _ = b.Watch(ctx, "", func(ev backend.Event) error { events <- ev; return nil }) }()
	<-events // synced
	acquire(t, b, "k", "a", time.Minute)
	if ok, _ := b.Release(ctx, backend.ReleaseRequest{Key: "k", OwnerToken: "a"}); !ok {
		t.Fatal("release failed")
	}
	acquire(t, b, "k", "b", 2*time.Millisecond)
	time.Sleep(5 * time.Millisecond)
	acquire(t, b, "k", "c", time.Minute) // takes over inline or after the reaper
	want := []backend.EventType{backend.EventAcquired, backend.EventReleased, backend.EventAcquired, backend.EventExpired, backend.EventAcquired}
	for i, w := range want {
		if ev := <-events; ev.Type != w {
			t.Fatalf("event %d = %v, want %v", i, ev.Type, w)
		}
	}
}

func TestSlowWatcherDoesNotBlockAndIsEnded(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	unblock := make(chan struct{})
	synced := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- b.Watch(ctx, "", func(ev backend.Event) error {
			if ev.Type == backend.EventSynced {
				close(synced)
				return nil
			}
			<-unblock // a watcher that never keeps up
			return nil
		})
	}()
	<-synced
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for i := range watchBuffer + 10 {
			key := fmt.Sprintf("k%d", i)
			acquire(t, b, key, "t", time.Minute)
			_, _ = b.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: "t"})
		}
	}()
	select {
	case <-finished:
	case <-time.After(10 * time.Second):
		t.Fatal("acquire/release blocked behind a slow watcher")
	}
	close(unblock)
	if err := <-done; !errors.Is(err, backend.ErrUnavailable) {
		t.Fatalf("slow watch ended with %v, want ErrUnavailable", err)
	}
}

func TestFencingMonotonic(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	var last uint64
	for i := range 200 {
		key := "fence"
		if i%2 == 1 {
			key = fmt.Sprintf("other-%d", i)
		}
		res := acquire(t, b, key, "t", time.Minute)
		if res.Record.FencingToken <= last {
			t.Fatalf("token %d after %d", res.Record.FencingToken, last)
		}
		last = res.Record.FencingToken
		_, _ = b.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: "t"})
	}
	// A fresh backend (as after a plugin restart) continues above: the
	// clock floors the counter.
	b2 := newBackend(t)
	if res := acquire(t, b2, "fence", "t", time.Minute); res.Record.FencingToken <= last {
		t.Fatalf("token %d after restart, not above %d", res.Record.FencingToken, last)
	}
	if tok := nextFence(); tok < uint64(time.Now().Add(-time.Second).UnixNano()) {
		t.Fatalf("token %d is not floored by the clock", tok)
	}
}

func TestStamps(t *testing.T) {
	b := newBackend(t)
	proposed := hlc.Timestamp{WallTime: 1000, Logical: 0}
	res, _ := b.Acquire(context.Background(), backend.AcquireRequest{Key: "s", OwnerToken: "a", TTL: time.Minute, Stamp: proposed})
	if res.Record.Stamp != proposed {
		t.Fatalf("stamp %v, want the proposal %v", res.Record.Stamp, proposed)
	}
	// Let the entry expire without the reaper (its timer is a minute away),
	// so the next Acquire takes it over inline, with its stamp at hand.
	b.mu.Lock()
	b.locks["s"].expires = time.Now().Add(-time.Millisecond)
	b.mu.Unlock()
	res2, _ := b.Acquire(context.Background(), backend.AcquireRequest{Key: "s", OwnerToken: "b", TTL: time.Minute, Stamp: hlc.Timestamp{WallTime: 5}})
	if !res2.Acquired || res2.Record.Stamp != res.Record.Stamp.Next() {
		t.Fatalf("takeover with an older proposal: stamp %v, want %v", res2.Record.Stamp, res.Record.Stamp.Next())
	}
	// A later proposal wins over the successor of the last stamp.
	b.mu.Lock()
	b.locks["s"].expires = time.Now().Add(-time.Millisecond)
	b.mu.Unlock()
	later := hlc.Timestamp{WallTime: 9000, Logical: 3}
	res3, _ := b.Acquire(context.Background(), backend.AcquireRequest{Key: "s", OwnerToken: "c", TTL: time.Minute, Stamp: later})
	if res3.Record.Stamp != later {
		t.Fatalf("takeover with a later proposal: stamp %v, want %v", res3.Record.Stamp, later)
	}
}

func TestInvalidArguments(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	cases := map[string]error{}
	_, cases["ttl zero"] = b.Acquire(ctx, backend.AcquireRequest{Key: "k", OwnerToken: "t"})
	_, cases["ttl too long"] = b.Acquire(ctx, backend.AcquireRequest{Key: "k", OwnerToken: "t", TTL: 25 * time.Hour})
	_, cases["empty key"] = b.Acquire(ctx, backend.AcquireRequest{OwnerToken: "t", TTL: time.Second})
	_, cases["empty token"] = b.Acquire(ctx, backend.AcquireRequest{Key: "k", TTL: time.Second})
	_, cases["extend ttl"] = b.Extend(ctx, backend.ExtendRequest{Key: "k", OwnerToken: "t", TTL: -1})
	_, cases["page size"] = b.List(ctx, backend.ListRequest{})
	_, cases["page token"] = b.List(ctx, backend.ListRequest{PageSize: 1, PageToken: "!!"})
	for name, err := range cases {
		if !errors.Is(err, backend.ErrInvalidArgument) {
			t.Errorf("%s: err = %v, want ErrInvalidArgument", name, err)
		}
	}
	if _, ok, _ := b.Get(ctx, "k"); ok {
		t.Fatal("a refused acquire stored a lock")
	}
}

func TestListPages(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	for _, k := range []string{"a/3", "a/1", "b/1", "a/2", "a/4", "a/5"} {
		acquire(t, b, k, "t", time.Minute)
	}
	acquire(t, b, "a/0", "t", time.Millisecond)
	time.Sleep(2 * time.Millisecond) // a/0 has expired: not listed
	var got []string
	tok := ""
	pages := 0
	for {
		page, err := b.List(ctx, backend.ListRequest{Prefix: "a/", PageSize: 2, PageToken: tok})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, r := range page.Records {
			got = append(got, r.Key)
		}
		if page.NextPageToken == "" {
			break
		}
		tok = page.NextPageToken
	}
	if fmt.Sprint(got) != "[a/1 a/2 a/3 a/4 a/5]" || pages != 3 {
		t.Fatalf("listed %v in %d pages", got, pages)
	}
}

func TestOpenRejectsOptions(t *testing.T) {
	_, err := Open(context.Background(), map[string]string{"bogus": "1"})
	if !errors.Is(err, backend.ErrInvalidArgument) {
		t.Fatalf("Open with an unknown option: %v", err)
	}
	t.Log(err)
	be, err := Open(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := be.Info(context.Background())
	if info.Name != "memory" || info.Shared || info.Durable || info.MinTTL != time.Millisecond || info.MaxTTL != 24*time.Hour {
		t.Fatalf("info = %+v", info)
	}
	_ = be.(*Backend).Close()
}

func TestCloseEndsWatchesAndCalls(t *testing.T) {
	b := New()
	done := make(chan error, 1)
	synced := make(chan struct{})
	go func() {
		done <- b.Watch(context.Background(), "", func(ev backend.Event) error {
			if ev.Type == backend.EventSynced {
				close(synced)
			}
			return nil
		})
	}()
	<-synced
	acquire(t, b, "k", "t", time.Minute)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, backend.ErrUnavailable) {
		t.Fatalf("watch after close: %v", err)
	}
	if _, err := b.Acquire(context.Background(), backend.AcquireRequest{Key: "k", OwnerToken: "t", TTL: time.Second}); !errors.Is(err, backend.ErrUnavailable) {
		t.Fatalf("acquire after close: %v", err)
	}
	_ = b.Close()
}

// The ordered index follows the map through release, expiry and takeover:
// a List shows exactly the held keys, with the current holder's record.
func TestListIndexFollowsTheLocks(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	for _, k := range []string{"k/1", "k/2", "k/4", "k/5", "l/1"} {
		acquire(t, b, k, "t-"+k, time.Minute)
	}
	acquire(t, b, "k/3", "short", time.Millisecond)
	if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: "k/2", OwnerToken: "t-k/2"}); err != nil || !ok {
		t.Fatal(ok, err)
	}
	time.Sleep(2 * time.Millisecond) // k/3's TTL runs out
	taken := acquire(t, b, "k/3", "new", time.Minute)
	var got []string
	var fences []uint64
	for tok := ""; ; {
		page, err := b.List(ctx, backend.ListRequest{Prefix: "k/", PageSize: 1, PageToken: tok})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Records {
			got = append(got, r.Key)
			fences = append(fences, r.FencingToken)
		}
		if tok = page.NextPageToken; tok == "" {
			break
		}
	}
	if fmt.Sprint(got) != "[k/1 k/3 k/4 k/5]" || fences[1] != taken.Record.FencingToken {
		t.Fatalf("listed %v (fences %v), want k/1 k/3 k/4 k/5 with k/3's new fence %d", got, fences, taken.Record.FencingToken)
	}
	// A token past the prefix's keys ends the list.
	page, err := b.List(ctx, backend.ListRequest{Prefix: "k/", PageSize: 10, PageToken: encodePageToken("k/9")})
	if err != nil || len(page.Records) != 0 || page.NextPageToken != "" {
		t.Fatalf("after the last key: %+v %v", page, err)
	}
}

// A page costs the same with a thousand locks held as with a hundred
// thousand: go test -bench ListPage ./plugins/memory. The page of a
// thousand is the server's largest (engine.MaxPageSize), what a client
// paging through every lock asks for; its allocations are the GC's work
// beside the Acquires the plugin serves meanwhile.
func BenchmarkListPage(b *testing.B) {
	for _, n := range []int{1000, 100000} {
		for _, size := range []int{100, 1000} {
			if size > n/2 {
				continue
			}
			b.Run(fmt.Sprint(n, " locks/page of ", size), func(b *testing.B) {
				be := New()
				defer be.Close()
				ctx := context.Background()
				for i := range n {
					if _, err := be.Acquire(ctx, backend.AcquireRequest{Key: fmt.Sprintf("k/%07d", i), OwnerToken: "t", TTL: time.Hour}); err != nil {
						b.Fatal(err)
					}
				}
				tok := encodePageToken(fmt.Sprintf("k/%07d", n/2-1))
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					page, err := be.List(ctx, backend.ListRequest{Prefix: "k/", PageSize: size, PageToken: tok})
					if err != nil || len(page.Records) != size {
						b.Fatal(len(page.Records), err)
					}
				}
			})
		}
	}
}

func TestExpireEndsALeaseNow(t *testing.T) {
	b := newBackend(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make(chan backend.Event, 16)
	done := make(chan error, 1)
	go func() {
		done <- b.Watch(ctx, "x/", func(ev backend.Event) error { events <- ev; return nil })
	}()
	if ev := <-events; ev.Type != backend.EventSynced {
		t.Fatalf("first event %v, want synced", ev.Type)
	}
	res := acquire(t, b, "x/k", "a", time.Hour)
	<-events // acquired
	if !b.Expire("x/k") {
		t.Fatal("Expire of a held key reported none")
	}
	if ev := <-events; ev.Type != backend.EventExpired || ev.Record.FencingToken != res.Record.FencingToken {
		t.Fatalf("event %v %+v, want expired", ev.Type, ev.Record)
	}
	ext, err := b.Extend(ctx, backend.ExtendRequest{Key: "x/k", OwnerToken: "a", TTL: time.Hour})
	if err != nil || ext.Extended {
		t.Fatalf("Extend after Expire: %+v %v, want extended=false", ext, err)
	}
	next := acquire(t, b, "x/k", "b", time.Hour)
	if !next.Acquired || next.Record.FencingToken <= res.Record.FencingToken {
		t.Fatalf("takeover after Expire: %+v", next)
	}
	if b.Expire("x/none") {
		t.Fatal("Expire of a free key reported a lease")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch returned %v, want context.Canceled", err)
	}
}

func grant(t *testing.T, b *Backend, key, token string, limit, permits int, ttl time.Duration) backend.AcquireResult {
	t.Helper()
	res, err := b.Acquire(context.Background(), backend.AcquireRequest{Key: key, OwnerToken: token, TTL: ttl,
		Kind: backend.KindSemaphore, Limit: limit, Permits: permits})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// A semaphore's pool goes with its last grant, released or expired, and
// leaves nothing behind: not in the map, the index or the heap.
func TestPoolsDoNotOutliveTheirGrants(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	for i := range 200 {
		key := fmt.Sprintf("sem-%d", i)
		for _, tok := range []string{"a", "b"} {
			if !grant(t, b, key, tok, 2, 1, time.Minute).Acquired {
				t.Fatalf("%s: grant %s refused", key, tok)
			}
		}
		for _, tok := range []string{"a", "b"} {
			if ok, err := b.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: tok}); err != nil || !ok {
				t.Fatalf("%s: release %s: %v %v", key, tok, ok, err)
			}
		}
		grant(t, b, fmt.Sprintf("exp-%d", i), "t", 3, 2, time.Millisecond)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		b.mu.Lock()
		n, h, o := len(b.pools), len(b.expiries), b.ordered.Len()
		b.mu.Unlock()
		if n == 0 && h == 0 && o == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d pools, %d heap entries, %d index keys left", n, h, o)
		}
		time.Sleep(time.Millisecond)
	}
}

// Expire ends every grant of a semaphore, each with its own event.
func TestExpireEndsEveryGrantOfAPool(t *testing.T) {
	b := newBackend(t)
	a, c := grant(t, b, "s", "a", 3, 1, time.Hour), grant(t, b, "s", "c", 3, 2, time.Hour)
	if !a.Acquired || !c.Acquired || a.Record.FencingToken >= c.Record.FencingToken {
		t.Fatalf("grants %+v %+v", a, c)
	}
	if !b.Expire("s") {
		t.Fatal("Expire of a held semaphore reported none")
	}
	if _, held, _ := b.Get(context.Background(), "s"); held {
		t.Fatal("the semaphore is still held after Expire")
	}
	if res := grant(t, b, "s", "d", 3, 3, time.Hour); !res.Acquired || res.Record.InUse != 3 {
		t.Fatalf("a grant of the whole limit after Expire: %+v", res)
	}
}

// BenchmarkGrant is one grant and its release on a semaphore that already
// has `held` holders (of a limit of 1024), against a mutex's Acquire and
// Release: the cost of a key's holders on the grant path.
func BenchmarkGrant(b *testing.B) {
	ctx := context.Background()
	b.Run("mutex", func(b *testing.B) {
		m := New()
		defer m.Close()
		for b.Loop() {
			if res, err := m.Acquire(ctx, backend.AcquireRequest{Key: "k", OwnerToken: "t", TTL: time.Minute}); err != nil || !res.Acquired {
				b.Fatal(res, err)
			}
			if ok, err := m.Release(ctx, backend.ReleaseRequest{Key: "k", OwnerToken: "t"}); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
	for _, held := range []int{0, 100, 1000} {
		b.Run(fmt.Sprintf("semaphore/held=%d", held), func(b *testing.B) {
			m := New()
			defer m.Close()
			sem := func(tok string) backend.AcquireRequest {
				return backend.AcquireRequest{Key: "k", OwnerToken: tok, TTL: time.Minute, Kind: backend.KindSemaphore, Limit: backend.MaxLimit, Permits: 1}
			}
			for i := range held {
				if res, err := m.Acquire(ctx, sem(fmt.Sprint("h", i))); err != nil || !res.Acquired {
					b.Fatal(res, err)
				}
			}
			for b.Loop() {
				if res, err := m.Acquire(ctx, sem("t")); err != nil || !res.Acquired {
					b.Fatal(res, err)
				}
				if ok, err := m.Release(ctx, backend.ReleaseRequest{Key: "k", OwnerToken: "t"}); err != nil || !ok {
					b.Fatal(ok, err)
				}
			}
		})
	}
}

// A renewal that moves an expiry later does no heap work: the entry keeps
// its place (due) until the reaper reaches it, which sifts it once to its
// real expiry and expires it only there.
func TestRenewalIsLazyInTheHeap(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	first := acquire(t, b, "k", "a", time.Minute)
	var last backend.ExtendResult
	for range 10 {
		var err error
		if last, err = b.Extend(ctx, backend.ExtendRequest{Key: "k", OwnerToken: "a", TTL: 2 * time.Minute}); err != nil || !last.Extended {
			t.Fatalf("extend = %+v, %v", last, err)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.locks["k"]
	if !e.due.Before(e.expires) {
		t.Fatalf("due %s is not before expires %s: the renewal sifted the heap", e.due, e.expires)
	}
	if !e.due.Round(0).Equal(first.Record.ExpiresAt) {
		t.Fatalf("due %s moved from the acquisition's expiry %s", e.due.Round(0), first.Record.ExpiresAt)
	}
	// The reaper reaches the old place: the lease is kept and sifted to
	// its real expiry.
	old := e.due
	if wait := b.sweep(old); b.locks["k"] != e || !e.due.Equal(e.expires) || wait != e.expires.Sub(old) {
		t.Fatalf("after the old deadline: held %v, due %s, expires %s, next wake in %s", b.locks["k"] == e, e.due, e.expires, wait)
	}
	// A nanosecond before the last renewal's expiry it is still held; at
	// it, expired.
	if b.sweep(e.expires.Add(-time.Nanosecond)); b.locks["k"] != e {
		t.Fatal("expired before the last renewal's expiry")
	}
	if b.sweep(e.expires); b.locks["k"] != nil || len(b.expiries) != 0 {
		t.Fatal("still held at the last renewal's expiry")
	}
}

// An Extend to an earlier expiry (a shorter TTL) moves the entry up the
// heap at once: the reaper wakes for the new expiry, not the old one.
func TestShorterRenewalMovesTheEntryAtOnce(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	acquire(t, b, "k", "a", time.Minute)
	acquire(t, b, "later", "a", 2*time.Minute)
	ext, err := b.Extend(ctx, backend.ExtendRequest{Key: "k", OwnerToken: "a", TTL: time.Second})
	if err != nil || !ext.Extended {
		t.Fatalf("extend = %+v, %v", ext, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.locks["k"]
	if !e.due.Equal(e.expires) || b.expiries[0].e != e {
		t.Fatalf("due %s, expires %s, first in the heap %q", e.due, e.expires, b.expiries[0].e.key)
	}
}

// A lease renewed many times by ExtendBatch (a watchdog) expires at its
// last renewal's expiry, announced with nothing remaining, never at an
// earlier deadline.
func TestBatchRenewedLeaseExpiresAtItsLastDeadline(t *testing.T) {
	b := newBackend(t)
	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan backend.Event, 64)
	done := make(chan error, 1)
	go func() {
		done <- b.Watch(ctx, "", func(ev backend.Event) error { events <- ev; return nil })
	}()
	if ev := <-events; ev.Type != backend.EventSynced {
		t.Fatalf("first event %v, want synced", ev.Type)
	}
	const ttl = 40 * time.Millisecond
	const n = extendChunk + 3 // two holds of the mutex
	reqs := make([]backend.ExtendRequest, n)
	// Each lease's expiry as last set: by its Acquire, then by each renewal
	// that found it held. On a loaded machine a lease can run out before a
	// round reaches it (a stall longer than the TTL); it must then expire at
	// the expiry it had, like any other.
	last := make(map[string]time.Time, n)
	for i := range reqs {
		key := fmt.Sprintf("k%03d", i)
		last[key] = acquire(t, b, key, "a", ttl).Record.ExpiresAt
		reqs[i] = backend.ExtendRequest{Key: key, OwnerToken: "a", TTL: ttl}
		<-events // acquired
	}
	// Renew every TTL/4 for several TTLs, so that the reaper reaches the
	// old deadlines while the leases are renewed.
	tick := time.NewTicker(ttl / 4)
	defer tick.Stop()
	for round := 0; round < 12; round++ {
		<-tick.C
		out, err := b.ExtendBatch(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range out {
			if o.Err != nil {
				t.Fatalf("item %d: %v", i, o.Err)
			}
			if o.Value.Extended {
				last[reqs[i].Key] = o.Value.Record.ExpiresAt
			}
		}
	}
	for range n {
		var ev backend.Event
		select {
		case ev = <-events:
		case <-time.After(5 * time.Second):
			t.Fatal("not every lease expired")
		}
		if ev.Type != backend.EventExpired {
			t.Fatalf("event %v %+v, want expired", ev.Type, ev.Record)
		}
		if ev.Record.Remaining != 0 || !ev.Record.ExpiresAt.Equal(last[ev.Record.Key]) {
			t.Fatalf("%s expired with %s remaining, expiry %s; its last renewal's expiry %s",
				ev.Record.Key, ev.Record.Remaining, ev.Record.ExpiresAt, last[ev.Record.Key])
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch returned %v, want context.Canceled", err)
	}
}

// Each item of an ExtendBatch has its own outcome, across the chunks it is
// decided in: a bad item's error, another owner's lease not renewed, and
// the rest renewed.
func TestExtendBatchItemsAcrossChunks(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	const n = 2*extendChunk + 1
	reqs := make([]backend.ExtendRequest, n)
	for i := range reqs {
		key := fmt.Sprintf("k%03d", i)
		acquire(t, b, key, "a", time.Minute)
		reqs[i] = backend.ExtendRequest{Key: key, OwnerToken: "a", TTL: 2 * time.Minute}
	}
	reqs[extendChunk-1].OwnerToken = "b" // last of the first chunk
	reqs[extendChunk].TTL = 0            // first of the second
	reqs[n-1].Key = ""                   // alone in the third
	grant(t, b, "pool", "a", 2, 1, time.Minute)
	reqs = append(reqs, backend.ExtendRequest{Key: "pool", OwnerToken: "a", TTL: 2 * time.Minute})
	out, err := b.ExtendBatch(ctx, reqs)
	if err != nil || len(out) != len(reqs) {
		t.Fatalf("ExtendBatch: %d outcomes, %v", len(out), err)
	}
	for i, o := range out {
		switch i {
		case extendChunk - 1:
			if o.Err != nil || o.Value.Extended {
				t.Errorf("item %d (another owner): %+v", i, o)
			}
		case extendChunk, n - 1:
			if !errors.Is(o.Err, backend.ErrInvalidArgument) {
				t.Errorf("item %d (invalid): %v, want invalid argument", i, o.Err)
			}
		default:
			if o.Err != nil || !o.Value.Extended || o.Value.Record.Remaining < time.Minute {
				t.Errorf("item %d: %+v", i, o)
			}
		}
	}
	b.Close()
	if _, err := b.ExtendBatch(ctx, reqs); !errors.Is(err, ErrClosed) {
		t.Fatalf("ExtendBatch on a closed backend: %v, want ErrClosed", err)
	}
}

// BenchmarkAcquireBesideList is an Acquire and its Release while another
// goroutine lists 100,000 held locks a page of a thousand at a time, in a
// loop: what a List page's time under the mutex costs the lock calls.
func BenchmarkAcquireBesideList(b *testing.B) {
	m := New()
	defer m.Close()
	ctx := context.Background()
	const n = 100000
	for i := range n {
		if _, err := m.Acquire(ctx, backend.AcquireRequest{Key: fmt.Sprintf("k/%07d", i), OwnerToken: "t", TTL: time.Hour}); err != nil {
			b.Fatal(err)
		}
	}
	stop := make(chan struct{})
	listed := make(chan error, 1)
	go func() {
		token := ""
		for {
			select {
			case <-stop:
				listed <- nil
				return
			default:
			}
			page, err := m.List(ctx, backend.ListRequest{Prefix: "k/", PageSize: 1000, PageToken: token})
			if err != nil {
				listed <- err
				return
			}
			token = page.NextPageToken
		}
	}()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if res, err := m.Acquire(ctx, backend.AcquireRequest{Key: "free", OwnerToken: "a", TTL: time.Minute}); err != nil || !res.Acquired {
			b.Fatal(res, err)
		}
		if ok, err := m.Release(ctx, backend.ReleaseRequest{Key: "free", OwnerToken: "a"}); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
	b.StopTimer()
	close(stop)
	if err := <-listed; err != nil {
		b.Fatal(err)
	}
}
