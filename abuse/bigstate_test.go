package abuse

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/holdfast/holdfast/harness"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// pageLister lists pages of 100 locks (the default page size) of every key as a client that only
// follows the pages would: uncompressed, and reading of each answer only
// its next_page_token (this process's work stays small; the server's is
// what is measured).
func pageLister(t *testing.T, s *harness.Server) func(ctx context.Context, token string) (string, error) {
	tr := transport(t, clientOpts{from: "127.0.0.3"})
	tr.DisableCompression = true
	hc := &http.Client{Transport: tr}
	return func(ctx context.Context, token string) (string, error) {
		body, _ := proto.Marshal(&lockv1.ListRequest{PageSize: 100, PageToken: token})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/holdfast.lock.v1.LockService/List", bytes.NewReader(body))
		if err != nil {
			return "", err
		}
		req.Header.Set("Content-Type", "application/proto")
		resp, err := hc.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("list: %s: %w", resp.Status, err)
		}
		for len(raw) > 0 {
			num, typ, n := protowire.ConsumeTag(raw)
			if n < 0 {
				return "", protowire.ParseError(n)
			}
			raw = raw[n:]
			if num == 2 && typ == protowire.BytesType {
				v, _ := protowire.ConsumeString(raw)
				return v, nil
			}
			if n = protowire.ConsumeFieldValue(num, typ, raw); n < 0 {
				return "", protowire.ParseError(n)
			}
			raw = raw[n:]
		}
		return "", nil
	}
}

// Issue 13, item 2, big state: with many locks held, List pages and the
// held-locks metric cost O(page) and hold no backend-wide lock for a full
// scan, so two List loops and a metrics scrape loop leave a normal
// Acquire's latency as it was; holdfast_locks_held keeps reporting.
func TestBigStateListAndScrapes(t *testing.T) {
	const locks = 20000
	s := serve(t, append([]string{"--metrics-addr", "127.0.0.1:0"}, hardened("--max-locks-per-client", "0")...)...)
	metrics := logged(t, s, metricsURLLine)
	ctx := t.Context()
	p := newProbe(t, s, clientOpts{}, "probe/")

	filler := client(t, s, clientOpts{from: "127.0.0.2"})
	start := time.Now()
	got, err := flood(ctx, filler, "big/"+strings.Repeat("k", 400)+"/", 32, locks)
	if err != nil || got != locks {
		t.Fatalf("filling: %d locks, %v", got, err)
	}
	t.Logf("%d locks held (%s to acquire them)", locks, time.Since(start).Round(time.Millisecond))
	idle := p.p50(t)

	lister := pageLister(t, s)
	var pages, scrapes int
	stop := during(t, func(ctx context.Context) {
		loop(ctx, 3, func(ctx context.Context, w int) {
			if w == 2 { // the third worker scrapes
				if _, _, err := scrape(ctx, metrics, "holdfast_locks_held"); err == nil {
					scrapes++
				}
				return
			}
			tok := ""
			for ctx.Err() == nil {
				next, err := lister(ctx, tok)
				if err != nil {
					return
				}
				if w == 0 {
					pages++
				}
				if tok = next; tok == "" {
					return
				}
			}
		})
	})
	attacked := p.p50(t)
	stop()
	t.Logf("during the probe: %d List pages (one lister), %d scrapes", pages, scrapes)
	unaffected(t, "2 List and scrapes over 20000 locks", idle, attacked, 10)

	// The metric is there and counts them all (within the probe's own).
	var held float64
	ok := eventually(15*time.Second, func() bool {
		v, found, err := scrape(ctx, metrics, "holdfast_locks_held")
		held = v
		return err == nil && found && v >= locks
	})
	expect(t, ok, "holdfast_locks_held is %v, want at least %d", held, locks)
}
