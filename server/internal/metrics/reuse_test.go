package metrics

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// scrapeBody is one scrape of h with the given Accept-Encoding, its body
// decompressed when it came gzipped.
func scrapeBody(t *testing.T, h http.Handler, encoding string) (string, *httptest.ResponseRecorder) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	if encoding != "" {
		req.Header.Set("Accept-Encoding", encoding)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var body io.Reader = rec.Body
	if rec.Header().Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(rec.Body)
		if err != nil {
			t.Fatal(err)
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), rec
}

// clock is a settable time for reuse.now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Scrapes within the reuse window get the first one's rendering (the
// counter as it was), each variant (compression) its own; once the window
// has passed a scrape renders again and sees the counter as it is.
func TestScrapesWithinReuseShareOneRendering(t *testing.T) {
	m := New()
	h := newReuse(m.Handler(), time.Second)
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	h.now = clk.now
	m.ReleaseDone(true)
	first, rec := scrapeBody(t, h, "gzip")
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Encoding") != "gzip" || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain") {
		t.Fatalf("first scrape: %d %v", rec.Code, rec.Header())
	}
	const one, two = `holdfast_releases_total{outcome="released"} 1` + "\n", `holdfast_releases_total{outcome="released"} 2` + "\n"
	if !strings.Contains(first, one) {
		t.Fatalf("first scrape lacks %q:\n%s", one, first)
	}
	m.ReleaseDone(true)
	clk.add(time.Second - time.Nanosecond)
	again, rec := scrapeBody(t, h, "gzip")
	if again != first || rec.Header().Get("Content-Encoding") != "gzip" {
		t.Fatalf("a scrape within the window rendered again (%v):\n%s", rec.Header(), again)
	}
	plain, rec := scrapeBody(t, h, "")
	if rec.Header().Get("Content-Encoding") != "" || !strings.Contains(plain, two) {
		t.Fatalf("the uncompressed variant was not rendered on its own (%v):\n%s", rec.Header(), plain)
	}
	if h.fresh != 2 {
		t.Fatalf("%d renderings for two variants", h.fresh)
	}
	clk.add(time.Nanosecond)
	if body, _ := scrapeBody(t, h, "gzip"); !strings.Contains(body, two) || h.fresh != 3 {
		t.Fatalf("no fresh rendering once the window passed (%d renderings):\n%s", h.fresh, body)
	}
}

// Scrapes that arrive while a rendering is made wait for it and share it.
func TestConcurrentScrapesShareOneRendering(t *testing.T) {
	h := newReuse(New().Handler(), time.Hour)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
			if rec.Code != http.StatusOK {
				t.Errorf("scrape: %d", rec.Code)
			}
		})
	}
	wg.Wait()
	if h.fresh != 1 {
		t.Fatalf("8 scrapes made %d renderings", h.fresh)
	}
}

// failing is a collector whose Collect fails while fail is set.
type failing struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	fail bool
}

func (f *failing) Describe(ch chan<- *prometheus.Desc) { ch <- f.desc }

func (f *failing) Collect(ch chan<- prometheus.Metric) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		ch <- prometheus.NewInvalidMetric(f.desc, io.ErrUnexpectedEOF)
		return
	}
	ch <- prometheus.MustNewConstMetric(f.desc, prometheus.GaugeValue, 1)
}

// An error answer is not kept: the next scrape renders again.
func TestFailedScrapeIsNotReused(t *testing.T) {
	m := New()
	f := &failing{desc: prometheus.NewDesc("test_failing", "Fails on demand.", nil, nil), fail: true}
	m.Registry().MustRegister(f)
	h := newReuse(m.Handler(), time.Hour)
	if _, rec := scrapeBody(t, h, ""); rec.Code != http.StatusInternalServerError {
		t.Fatalf("failing collector: %d, want 500", rec.Code)
	}
	f.mu.Lock()
	f.fail = false
	f.mu.Unlock()
	body, rec := scrapeBody(t, h, "")
	if rec.Code != http.StatusOK || !strings.Contains(body, "test_failing 1\n") {
		t.Fatalf("the scrape after a failed one: %d\n%s", rec.Code, body)
	}
	if _, rec := scrapeBody(t, h, ""); rec.Code != http.StatusOK || h.fresh != 2 {
		t.Fatalf("the good rendering was not kept: %d, %d renderings", rec.Code, h.fresh)
	}
}

// Variants past maxVariants evict the others instead of growing the cache.
func TestReuseKeepsBoundedVariants(t *testing.T) {
	h := newReuse(New().Handler(), time.Hour)
	for i := range 3 * maxVariants {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.Header.Set("Accept", "text/plain;v="+strings.Repeat("x", i))
		h.ServeHTTP(httptest.NewRecorder(), req)
		if n := len(h.kept); n > maxVariants {
			t.Fatalf("%d variants kept, at most %d", n, maxVariants)
		}
	}
}
