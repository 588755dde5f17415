package metrics

import (
	"bytes"
	"net/http"
	"sync"
	"time"
)

// ScrapeReuse is how long a rendering of the registry answers further
// scrapes. A rendering costs the server a millisecond or two of CPU (the
// process collector's reads of /proc, the text encoding, gzip): nothing at
// Prometheus's intervals, but a scraper in a loop (or many dashboards)
// would take a processor from the lock calls. Within ScrapeReuse, scrapes
// share one rendering, so /metrics costs at most one rendering per variant
// (format and compression) per ScrapeReuse, however often it is asked. A
// value read is at most this old, much less than any scrape interval.
const ScrapeReuse = time.Second

// maxVariants bounds the renderings kept: one per Accept and
// Accept-Encoding pair; a client that varies them endlessly gets fresh
// renderings and evicts the others, nothing grows.
const maxVariants = 8

// reuse serves next's answers again to scrapes of the same variant while
// they are younger than every. One rendering is made at a time: scrapes
// that arrive meanwhile wait for it and share it.
type reuse struct {
	next  http.Handler
	every time.Duration
	now   func() time.Time

	mu    sync.Mutex
	kept  map[string]*rendering
	fresh int // renderings made (tests)
}

// rendering is one answer of next, as it was written.
type rendering struct {
	at     time.Time
	status int
	header http.Header
	body   bytes.Buffer
}

func (r *rendering) Header() http.Header { return r.header }

func (r *rendering) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}

func (r *rendering) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func newReuse(next http.Handler, every time.Duration) *reuse {
	return &reuse{next: next, every: every, now: time.Now, kept: make(map[string]*rendering)}
}

func (c *reuse) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r := c.rendering(req)
	for k, v := range r.header {
		w.Header()[k] = v
	}
	w.WriteHeader(r.status)
	_, _ = w.Write(r.body.Bytes())
}

// rendering is the answer to req: a kept one of its variant, or a new one.
func (c *reuse) rendering(req *http.Request) *rendering {
	variant := req.Header.Get("Accept") + "\x00" + req.Header.Get("Accept-Encoding")
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := c.kept[variant]; r != nil && c.now().Sub(r.at) < c.every {
		return r
	}
	r := &rendering{at: c.now(), header: make(http.Header)} // the values' age counts from here
	c.next.ServeHTTP(r, req)
	if r.status == 0 {
		r.status = http.StatusOK
	}
	c.fresh++
	if r.status != http.StatusOK { // an error is answered once, not kept
		delete(c.kept, variant)
		return r
	}
	if _, ok := c.kept[variant]; !ok && len(c.kept) >= maxVariants {
		clear(c.kept)
	}
	c.kept[variant] = r
	return r
}
