package metrics

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/core/engine"
	"github.com/holdfast/holdfast/plugins/memory"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/server/internal/turns"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// listing counts List and Count calls on the real memory backend and can
// fail them, or answer Count as unsupported (a plugin without the call).
type listing struct {
	*memory.Backend
	lists, counts    atomic.Int64
	fail, failCount  atomic.Bool
	countUnsupported atomic.Bool
}

func (l *listing) List(ctx context.Context, req backend.ListRequest) (backend.ListPage, error) {
	l.lists.Add(1)
	if l.fail.Load() {
		return backend.ListPage{}, backend.ErrUnavailable
	}
	return l.Backend.List(ctx, req)
}

func (l *listing) Count(ctx context.Context) (int64, error) {
	l.counts.Add(1)
	switch {
	case l.countUnsupported.Load():
		return 0, errors.ErrUnsupported
	case l.failCount.Load():
		return 0, backend.ErrUnavailable
	}
	return l.Backend.Count(ctx)
}

// holdFour holds two mutexes and a semaphore of two leases on b: four
// leases, on three keys.
func holdFour(t *testing.T, b backend.Backend) {
	t.Helper()
	ctx := context.Background()
	for _, k := range []string{"a", "b"} {
		if _, err := b.Acquire(ctx, backend.AcquireRequest{Key: k, OwnerToken: "t", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tok := range []string{"s1", "s2"} {
		res, err := b.Acquire(ctx, backend.AcquireRequest{Key: "sem", OwnerToken: tok, TTL: time.Minute, Kind: backend.KindSemaphore, Limit: 3, Permits: 1})
		if err != nil || !res.Acquired {
			t.Fatal(res, err)
		}
	}
}

type plugin struct{}

func (plugin) Up() bool         { return true }
func (plugin) Restarts() uint64 { return 2 }

func get(t *testing.T, url string) string {
	t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestServeAndScrapeTimeSeries(t *testing.T) {
	b := &listing{Backend: memory.New()}
	defer b.Close()
	ctx := context.Background()
	e, err := engine.New(ctx, b, engine.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	holdFour(t, b)
	m := New()
	m.Track(Sources{Version: "v1", BackendName: "memory", Engine: e, Backend: b, Plugin: plugin{}})
	m.AcquireDone(true, true, 20*time.Millisecond)
	m.Granted(backend.KindRWLock, lockv1.Mode_MODE_SHARED)
	m.ReleaseDone(false)
	m.Granted(backend.KindElection, lockv1.Mode_MODE_UNSPECIFIED)
	m.ProclaimDone(true)
	m.ProclaimDone(false)
	m.ProclaimDone(false)
	m.PluginCall("Get", time.Millisecond, errors.New("boom"))
	srv, err := Serve("127.0.0.1:0", m, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := srv.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()

	body := get(t, "http://"+srv.Addr().String()+"/metrics")
	for _, want := range []string{
		"holdfast_locks_held 4\n",
		`holdfast_grants_total{kind="rwlock",mode="shared"} 1` + "\n",
		`holdfast_grants_total{kind="semaphore",mode=""} 0` + "\n",
		`holdfast_grants_total{kind="election",mode=""} 1` + "\n",
		`holdfast_proclaims_total{outcome="proclaimed"} 1` + "\n",
		`holdfast_proclaims_total{outcome="stale"} 2` + "\n",
		`holdfast_rpc_streams{method="Observe"} 0` + "\n",
		`holdfast_acquisitions_total{outcome="acquired"} 1` + "\n",
		`holdfast_acquisitions_total{outcome="contended"} 0` + "\n",
		`holdfast_acquire_wait_seconds_bucket{outcome="acquired",le="0.025"} 1` + "\n",
		`holdfast_releases_total{outcome="stale"} 1` + "\n",
		`holdfast_backend_call_duration_seconds_count{method="Get",outcome="error"} 1` + "\n",
		"holdfast_backend_restarts_total 2\n",
		"holdfast_backend_up 1\n",
		`holdfast_info{backend="memory",version="v1"} 1` + "\n",
		"holdfast_waiters 0\n",
		"go_goroutines ",
	} {
		if !strings.Contains(body, want) {
			t.Fatalf("/metrics lacks %q:\n%s", want, body)
		}
	}
	// The count came from one Count, not a walk of the locks, and a
	// second scrape within HeldRefresh reuses it.
	if n, l := b.counts.Load(), b.lists.Load(); n != 1 || l != 0 {
		t.Fatalf("one scrape made %d Counts and %d Lists, want 1 and 0", n, l)
	}
	get(t, "http://"+srv.Addr().String()+"/metrics")
	if n := b.counts.Load(); n != 1 {
		t.Fatalf("the held count was asked again within %s (%d Counts)", HeldRefresh, n)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A backend that cannot be listed leaves holdfast_locks_held out rather
// than reporting a wrong count.
func TestHeldCountOmittedWhenListFails(t *testing.T) {
	b := &listing{Backend: memory.New()}
	defer b.Close()
	b.countUnsupported.Store(true)
	b.fail.Store(true)
	c := &heldCollector{b: b}
	if _, ok := c.countLocks(); ok {
		t.Fatal("count reported although List failed")
	}
}

// A backend whose Count fails (other than unsupported) leaves the series
// out too, without listing behind its back.
func TestHeldCountOmittedWhenCountFails(t *testing.T) {
	b := &listing{Backend: memory.New()}
	defer b.Close()
	b.failCount.Store(true)
	c := &heldCollector{b: b}
	if _, ok := c.countLocks(); ok {
		t.Fatal("count reported although Count failed")
	}
	if n := b.lists.Load(); n != 0 {
		t.Fatalf("a failed Count was followed by %d Lists", n)
	}
}

// A backend that does not count (a plugin without the Count call) is
// listed page by page, each semaphore lease counted, as a counting one
// counts: the gauge means the same on both.
func TestHeldCountListsWhenCountUnsupported(t *testing.T) {
	b := &listing{Backend: memory.New()}
	defer b.Close()
	holdFour(t, b)
	b.countUnsupported.Store(true)
	c := &heldCollector{b: b}
	n, ok := c.countLocks()
	if !ok || n != 4 {
		t.Fatalf("listed count = %d, %v; want 4 leases", n, ok)
	}
	if b.lists.Load() == 0 {
		t.Fatal("counted without listing")
	}
	b.countUnsupported.Store(false)
	if m, ok := c.countLocks(); !ok || m != n {
		t.Fatalf("Count = %d, %v; the listed count was %d", m, ok, n)
	}
}

// BenchmarkScrape: one scrape of /metrics as Prometheus makes it (gzip
// accepted) on a server that has answered every method.
func BenchmarkScrape(b *testing.B) {
	be := memory.New()
	defer be.Close()
	ctx := context.Background()
	e, err := engine.New(ctx, be, engine.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	m := New()
	m.Track(Sources{Version: "v1", BackendName: "memory", Engine: e, Backend: be, Plugin: plugin{}})
	for _, method := range []string{"Acquire", "Release", "Extend", "ExtendBatch", "List", "Get", "Watch", "Count"} {
		m.rpc.WithLabelValues(method, "ok").Observe(0.001)
		m.PluginCall(method, time.Millisecond, nil)
	}
	h := m.Handler()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatal(rec.Code)
		}
		b.SetBytes(int64(rec.Body.Len()))
	}
}

// A scrape waits for a turn shared with List pages (package turns), so a
// scraper in a loop and a lister together leave lock calls a processor.
func TestScrapeTakesATurn(t *testing.T) {
	tu := turns.New(1, time.Hour)
	srv, err := Serve("127.0.0.1:0", New(), slog.New(slog.DiscardHandler), tu)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := srv.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	url := "http://" + srv.Addr().String() + "/metrics"
	release, err := tu.Take(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := (&http.Client{Transport: tr}).Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("a scrape was answered (%s) while the only turn was taken", resp.Status)
	}
	release()
	if body := get(t, url); !strings.Contains(body, "go_goroutines ") {
		t.Fatalf("scrape after the turn came back:\n%s", body)
	}
}
