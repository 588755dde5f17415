package abuse

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/harness"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
)

// baseline is set to measure a binary without the protections (package
// doc).
var baseline = os.Getenv("HOLDFAST_ABUSE_BASELINE") == "1"

// report collects one line per attack, printed at the end of the run.
var report struct {
	mu    sync.Mutex
	lines []string
}

// TestMain writes the report to $HOLDFAST_ABUSE_REPORT_FILE when it is
// set (make test-abuse prints it: go test shows a passing package's output
// only with -v), else to stdout.
func TestMain(m *testing.M) {
	code := m.Run()
	report.mu.Lock()
	slices.Sort(report.lines)
	var b strings.Builder
	if len(report.lines) > 0 {
		b.WriteString("normal client's Acquire p50, idle and during each attack (same client, same test):\n")
		for _, l := range report.lines {
			b.WriteString("  " + l + "\n")
		}
	}
	report.mu.Unlock()
	if f := os.Getenv("HOLDFAST_ABUSE_REPORT_FILE"); f != "" {
		if err := os.WriteFile(f, []byte(b.String()), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "abuse report:", err)
			code = 1
		}
	} else {
		fmt.Print(b.String())
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// hardened returns args, or nothing in baseline mode (an older binary
// does not know these flags).
func hardened(args ...string) []string {
	if baseline {
		return nil
	}
	return args
}

// expect fails the test when ok is false, except in baseline mode, where a
// missing protection is only logged.
func expect(t *testing.T, ok bool, format string, args ...any) bool {
	t.Helper()
	if ok {
		return true
	}
	if baseline {
		t.Logf("baseline: "+format, args...)
		return false
	}
	t.Errorf(format, args...)
	return false
}

// serve starts holdfast serve with args on a free loopback port.
func serve(t *testing.T, args ...string) *harness.Server {
	t.Helper()
	return harness.StartT(t, harness.Options{Args: args})
}

// logged waits until the server's log matches re and returns the first
// submatch.
func logged(t *testing.T, s *harness.Server, re *regexp.Regexp) string {
	t.Helper()
	var m []string
	if !eventually(10*time.Second, func() bool { m = re.FindStringSubmatch(s.Logs()); return m != nil }) {
		t.Fatalf("log does not match %s:\n%s", re, s.Logs())
	}
	return m[1]
}

var (
	metricsURLLine = regexp.MustCompile(`msg="metrics serving" url=(http://\S+/metrics)`)
	pluginPIDLine  = regexp.MustCompile(`msg="holdfast serving".* plugin_pid=(\d+)`)
)

// token is one entry of a tokens file; quota is extra YAML lines of the
// entry ("max_locks: 10"), left out in baseline mode.
type token struct {
	name     string
	prefixes []string
	quota    []string
}

// secret is the bearer token of an entry.
func (tk token) secret() string { return "abuse-test-token-" + tk.name }

// tokensFile writes a tokens file (sha256 entries) and returns its path.
func tokensFile(t *testing.T, tokens ...token) string {
	t.Helper()
	var b strings.Builder
	for _, tk := range tokens {
		sum := sha256.Sum256([]byte(tk.secret()))
		quoted := make([]string, len(tk.prefixes))
		for i, p := range tk.prefixes {
			quoted[i] = strconv.Quote(p)
		}
		fmt.Fprintf(&b, "- name: %s\n  sha256: %s\n  prefixes: [%s]\n", tk.name, hex.EncodeToString(sum[:]), strings.Join(quoted, ", "))
		if !baseline {
			for _, q := range tk.quota {
				fmt.Fprintf(&b, "  %s\n", q)
			}
		}
	}
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// clientOpts says how a test client reaches the server.
type clientOpts struct {
	bearer string      // sent as Authorization: Bearer
	from   string      // local IP to dial from (another 127/8 address stands for another client); "" is 127.0.0.1
	http1  bool        // Connect JSON over HTTP/1.1 instead of gRPC over h2c
	tls    *tls.Config // HTTPS (HTTP/2 by ALPN) instead of cleartext
}

type bearer struct {
	tok  string
	next http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.tok == "" {
		return b.next.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.tok)
	return b.next.RoundTrip(r)
}

// dialer dials from the local IP from ("" for the default).
func dialer(from string) *net.Dialer {
	d := &net.Dialer{Timeout: 5 * time.Second}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	return d
}

// transport is an HTTP transport of its own (its own connections), closed
// at the end of the test.
func transport(t *testing.T, o clientOpts) *http.Transport {
	protocols := new(http.Protocols)
	switch {
	case o.http1:
		protocols.SetHTTP1(true)
	case o.tls != nil:
		protocols.SetHTTP2(true)
	default:
		protocols.SetUnencryptedHTTP2(true)
	}
	tr := &http.Transport{Protocols: protocols, DialContext: dialer(o.from).DialContext, MaxIdleConnsPerHost: 64, TLSClientConfig: o.tls}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// client is a LockService client on a transport of its own.
func client(t *testing.T, s *harness.Server, o clientOpts) lockv1connect.LockServiceClient {
	var opts []connect.ClientOption
	if !o.http1 {
		opts = append(opts, connect.WithGRPC())
	} else {
		opts = append(opts, connect.WithProtoJSON())
	}
	url := s.URL
	if o.tls != nil {
		url = "https://" + s.Addr
	}
	return lockv1connect.NewLockServiceClient(&http.Client{Transport: bearer{o.bearer, transport(t, o)}}, url, opts...)
}

// probe is the normal client whose latency each test compares.
type probe struct {
	c      lockv1connect.LockServiceClient
	prefix string
	n      int
	seq    int
}

// newProbe makes the normal client; it acquires keys under prefix.
func newProbe(t *testing.T, s *harness.Server, o clientOpts, prefix string) *probe {
	p := &probe{c: client(t, s, o), prefix: prefix, n: 40}
	p.p50(t) // warm up: the connection, the server's first-call paths
	return p
}

// p50 measures n try-once Acquires of fresh keys (each released after) and
// returns their median.
func (p *probe) p50(t *testing.T) time.Duration {
	t.Helper()
	d, err := p.measure(t.Context(), false)
	if err != nil {
		t.Fatalf("normal client: %v", err)
	}
	return d
}

// measure is p50; with failuresOK an Acquire that fails is measured too
// (the time to answer, e.g. unavailable while the backend is frozen).
func (p *probe) measure(ctx context.Context, failuresOK bool) (time.Duration, error) {
	samples := make([]time.Duration, 0, p.n)
	for range p.n {
		p.seq++
		key := fmt.Sprintf("%sk%d", p.prefix, p.seq)
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		start := time.Now()
		resp, err := p.c.Acquire(cctx, &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(time.Minute), Holder: "probe"})
		took := time.Since(start)
		cancel()
		switch {
		case err != nil && !failuresOK:
			return 0, fmt.Errorf("acquire %s: %w", key, err)
		case err == nil && !resp.GetAcquired():
			return 0, fmt.Errorf("acquire %s: not acquired (held by %v)", key, resp.GetCurrent())
		case err == nil:
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			_, err = p.c.Release(rctx, &lockv1.ReleaseRequest{Key: key, OwnerToken: resp.GetLease().GetOwnerToken()})
			cancel()
			if err != nil && !failuresOK {
				return 0, fmt.Errorf("release %s: %w", key, err)
			}
		}
		samples = append(samples, took)
	}
	slices.Sort(samples)
	return samples[len(samples)/2], nil
}

// unaffected checks the normal client's p50 during an attack against its
// idle p50 and records both for the run's report.
func unaffected(t *testing.T, attack string, idle, attacked time.Duration, maxRatio float64) {
	t.Helper()
	ratio := float64(attacked) / float64(idle)
	line := fmt.Sprintf("%-44s idle %8s  attacked %10s  x%.1f (bound x%.0f)", attack, idle.Round(10*time.Microsecond), attacked.Round(10*time.Microsecond), ratio, maxRatio)
	if baseline {
		line += "  [baseline binary]"
	}
	report.mu.Lock()
	report.lines = append(report.lines, line)
	report.mu.Unlock()
	t.Log(line)
	expect(t, ratio <= maxRatio, "%s: a normal Acquire's p50 went from %s idle to %s during the attack (x%.1f, bound x%.0f)",
		attack, idle, attacked, ratio, maxRatio)
}

// during runs attack in the background until the returned stop is called;
// stop waits for it to end.
func during(t *testing.T, attack func(ctx context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		attack(ctx)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	t.Cleanup(stop)
	return stop
}

// loop runs fn in n goroutines, over and over, until ctx ends, and returns
// when they all have.
func loop(ctx context.Context, n int, fn func(ctx context.Context, worker int)) {
	var wg sync.WaitGroup
	for w := range n {
		wg.Go(func() {
			for ctx.Err() == nil {
				fn(ctx, w)
			}
		})
	}
	wg.Wait()
}

// code is the Connect code of err, or "ok".
func code(err error) string {
	if err == nil {
		return "ok"
	}
	return connect.CodeOf(err).String()
}

// scrape reads one series (exact name and labels as printed, e.g.
// `holdfast_rpc_streams{method="Watch"}`) from a metrics endpoint.
func scrape(ctx context.Context, url, series string) (float64, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, false, err
	}
	req.Close = true // no idle connection outlives the test
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, false, err
	}
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil, err
		}
	}
	return 0, false, nil
}

// eventually polls cond every 20ms until it holds or within passes.
func eventually(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}
