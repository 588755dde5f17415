package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/harness"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
)

// List, metrics and Watch off the hot path (-list-load): a normal client's
// Acquire+Release p50 on a memory server that is idle, against the same
// while the server holds many locks and other clients page through all of
// them with List "" in a loop, scrape /metrics (whose held-lock count lists
// the backend) in a loop, and watch every key.
type listLoad struct {
	Locks    int        `json:"held_locks"`
	Watchers int        `json:"watchers"`
	Idle     throughput `json:"idle"`
	Held     throughput `json:"held"`
	Loaded   throughput `json:"loaded"`
	// Pages listed and scrapes made while Loaded ran, and their p50s (µs).
	Pages      int     `json:"list_pages"`
	PageP50    float64 `json:"list_page_p50_us"`
	Scrapes    int     `json:"scrapes"`
	ScrapeP50  float64 `json:"scrape_p50_us"`
	WatchEvent int     `json:"watch_events"`
	// CPU over the Loaded window, in % of one core: the server, its
	// plugin and the loops' process. On a shared machine these are the
	// steadier numbers: a closed loop takes what it is given, and what
	// the server and plugin spend per page and per scrape is what lock
	// calls compete with.
	ServerCPU float64 `json:"server_cpu_percent"`
	PluginCPU float64 `json:"plugin_cpu_percent"`
	LoopsCPU  float64 `json:"loops_cpu_percent"`
}

func (l listLoad) ratio() float64 {
	if l.Idle.P50 == 0 {
		return 0
	}
	return l.Loaded.P50 / l.Idle.P50
}

var (
	listLoadOn       = flag.Bool("list-load", false, "measure Acquire beside List, metrics scrapes and watchers on many held locks (a few minutes)")
	listLoadLocks    = flag.Int("list-load-locks", 300_000, "-list-load: locks held")
	listLoadWatchers = flag.Int("list-load-watchers", 20, "-list-load: Watch streams on every key")
	listLoadLoops    = flag.String("list-load-loops", "", "internal: run -list-load's List, scrape and Watch loops against this server address until SIGTERM")
	listLoadMetrics  = flag.String("list-load-metrics", "", "internal: with -list-load-loops, the metrics URL to scrape")
)

func measureListLoad(ctx context.Context) (*listLoad, error) {
	n := *listLoadLocks
	args := append(bigServerArgs(n), "--metrics-addr", "127.0.0.1:0")
	srv, err := startProcess(ctx, filepath.Join(*binDir, "holdfast"), args...)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	ll := &listLoad{Locks: n, Watchers: *listLoadWatchers}
	normal := newClient(srv.addr)
	run := fmt.Sprintf("ll/%d", time.Now().UnixNano())
	ll.Idle = measure(ctx, "Acquire+Release, idle server", 1, *duration, acquireRelease(normal, run+"/normal"))

	clients := make([]lockv1connect.LockServiceClient, 64)
	for i := range clients {
		clients[i] = newClient(srv.addr)
	}
	logf("list-load: holding %d locks", n)
	if err := parallel(ctx, n, func(i int) error {
		resp, err := clients[i%len(clients)].Acquire(ctx, &lockv1.AcquireRequest{
			Key: fmt.Sprintf("%s/held/%07d", run, i), Ttl: durationpb.New(time.Hour)})
		if err == nil && !resp.GetAcquired() {
			err = fmt.Errorf("held lock %d not acquired", i)
		}
		return err
	}); err != nil {
		return nil, fmt.Errorf("holding %d locks: %w", n, err)
	}
	ll.Held = measure(ctx, fmt.Sprintf("Acquire+Release, %d held", n), 1, *duration, acquireRelease(normal, run+"/normal"))

	// The loops run in their own process (this program with
	// -list-load-loops), as a dashboard, a scraper and watchers do in
	// production: in this process their decoding would share the Go
	// scheduler of the client being measured, and the row would time that
	// scheduler rather than the server.
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	loopArgs := []string{"-list-load-loops", srv.addr, "-list-load-watchers", fmt.Sprint(ll.Watchers)}
	if url := srv.metricsURL(); url != "" {
		loopArgs = append(loopArgs, "-list-load-metrics", url)
	} else {
		logf("list-load: the server did not log its metrics address; no scrapes")
	}
	loopProc, err := startProcess(ctx, self, loopArgs...)
	if err != nil {
		return nil, fmt.Errorf("list-load loops: %w", err)
	}
	profiled := profile(ctx, srv, "list-load", *duration)
	pluginPID, _, _ := srv.logged()
	cpu0s, cpu0p, cpu0l := cpuTicks(srv.PID()), cpuTicks(pluginPID), cpuTicks(loopProc.PID())
	start := time.Now()
	ll.Loaded = measure(ctx, fmt.Sprintf("Acquire+Release, %d held, List loop, scrapes, %d watchers", n, ll.Watchers), 1, *duration, acquireRelease(normal, run+"/normal"))
	elapsed := time.Since(start)
	ll.ServerCPU = cpuPercent(cpu0s, cpuTicks(srv.PID()), elapsed)
	ll.PluginCPU = cpuPercent(cpu0p, cpuTicks(pluginPID), elapsed)
	ll.LoopsCPU = cpuPercent(cpu0l, cpuTicks(loopProc.PID()), elapsed)
	profiled()
	loopProc.stop()
	res, err := loopsResult(loopProc.Stdout())
	if err != nil {
		return nil, fmt.Errorf("list-load loops: %w", err)
	}
	pages, scrapes := res.Pages, res.Scrapes
	slices.Sort(pages)
	slices.Sort(scrapes)
	ll.Pages, ll.PageP50 = len(pages), micros(percentile(pages, 0.5))
	ll.Scrapes, ll.ScrapeP50 = len(scrapes), micros(percentile(scrapes, 0.5))
	ll.WatchEvent = res.Events
	return ll, nil
}

// loopsResultPrefix starts the line in which -list-load-loops reports
// what its loops did, on stdout after the readiness line.
const loopsResultPrefix = "list-load result "

// loopsReport is what the loops of -list-load-loops did until stopped.
type loopsReport struct {
	Pages   []time.Duration `json:"pages"`
	Scrapes []time.Duration `json:"scrapes"`
	Events  int             `json:"events"`
	Err     string          `json:"error,omitempty"`
}

func loopsResult(stdout []string) (*loopsReport, error) {
	for _, line := range stdout {
		if raw, ok := strings.CutPrefix(line, loopsResultPrefix); ok {
			var r loopsReport
			if err := json.Unmarshal([]byte(raw), &r); err != nil {
				return nil, err
			}
			if r.Err != "" {
				return nil, errors.New(r.Err)
			}
			return &r, nil
		}
	}
	return nil, errors.New("no result line on stdout")
}

// runListLoadLoops is -list-load-loops: one client pages List "" in a loop,
// one scrapes the metrics URL in a loop, and the watchers watch every key
// of the server at addr, until SIGTERM; then it prints what they did.
func runListLoadLoops(addr, metricsURL string, watchers int) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	loadCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var rep loopsReport
	var loadErr error
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if loadErr == nil && loadCtx.Err() == nil {
			loadErr = err
			cancel()
		}
	}
	// Every watcher's stream is open before the loops report ready, so the
	// measured window has all of them.
	var opened sync.WaitGroup
	opened.Add(watchers)
	for range watchers {
		w := newClient(addr)
		wg.Go(func() {
			stream, err := w.Watch(loadCtx, &lockv1.WatchRequest{Target: &lockv1.WatchRequest_Prefix{Prefix: ""}})
			opened.Done()
			if err != nil {
				fail(fmt.Errorf("watch: %w", err))
				return
			}
			defer stream.Close()
			for stream.Receive() {
				mu.Lock()
				rep.Events++
				mu.Unlock()
			}
			if err := stream.Err(); err != nil && loadCtx.Err() == nil && connect.CodeOf(err) != connect.CodeCanceled {
				fail(fmt.Errorf("watch: %w", err))
			}
		})
	}
	opened.Wait()
	lister := newClient(addr)
	wg.Go(func() {
		token := ""
		for loadCtx.Err() == nil {
			t0 := time.Now()
			resp, err := lister.List(loadCtx, &lockv1.ListRequest{PageSize: 1000, PageToken: token})
			if err != nil {
				fail(fmt.Errorf("list: %w", err))
				return
			}
			mu.Lock()
			rep.Pages = append(rep.Pages, time.Since(t0))
			mu.Unlock()
			token = resp.GetNextPageToken()
		}
	})
	if metricsURL != "" {
		wg.Go(func() {
			for loadCtx.Err() == nil {
				t0 := time.Now()
				if err := scrape(loadCtx, metricsURL); err != nil {
					fail(fmt.Errorf("scrape: %w", err))
					return
				}
				mu.Lock()
				rep.Scrapes = append(rep.Scrapes, time.Since(t0))
				mu.Unlock()
			}
		})
	}
	fmt.Printf("%saddr=%s backend=list-load\n", harness.ReadyPrefix, addr)
	<-loadCtx.Done()
	wg.Wait()
	if loadErr != nil {
		rep.Err = loadErr.Error()
	}
	out, err := json.Marshal(&rep)
	if err != nil {
		return err
	}
	fmt.Printf("%s%s\n", loopsResultPrefix, out)
	return nil
}

func scrape(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	return nil
}

func printListLoad(ll *listLoad) {
	if ll == nil {
		return
	}
	fmt.Printf("\nAcquire+Release at c1 beside List, metrics and Watch: %d locks held; in another process one client pages List \"\" (1000 a page) in a loop, one scrapes /metrics in a loop, %d watch every key\n", ll.Locks, ll.Watchers)
	w := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "state\tops/s\tp50 µs\tp99 µs\tp50 over idle\t")
	for _, r := range []throughput{ll.Idle, ll.Held, ll.Loaded} {
		fmt.Fprintf(w, "%s\t%.0f\t%.0f\t%.0f\t%.2f×\t\n", strings.TrimPrefix(r.Name, "Acquire+Release, "), r.OpsPerSec, r.P50, r.P99, r.P50/max(ll.Idle.P50, 1))
	}
	_ = w.Flush()
	fmt.Printf("meanwhile: %d List pages (p50 %.1f ms), %d scrapes (p50 %.1f ms), %d watch events\n",
		ll.Pages, ll.PageP50/1000, ll.Scrapes, ll.ScrapeP50/1000, ll.WatchEvent)
	fmt.Printf("CPU while loaded (%% of one core): server %.0f%%, plugin %.0f%%, loops %.0f%%\n", ll.ServerCPU, ll.PluginCPU, ll.LoopsCPU)
}
