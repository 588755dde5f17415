package e2e

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/protobuf/types/known/durationpb"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
)

var metricsURL = regexp.MustCompile(`msg="metrics serving" url=(http://\S+/metrics)`)

type families map[string]*dto.MetricFamily

func scrape(t *testing.T, hc *http.Client, url string) families {
	t.Helper()
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// value is the value of the series name{labels} (a histogram's count), and
// whether it exists.
func (f families) value(name string, labels ...string) (float64, bool) {
	fam, ok := f[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range fam.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if got[labels[i]] != labels[i+1] {
				continue next
			}
		}
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue(), true
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue(), true
		case m.GetHistogram() != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		case m.GetUntyped() != nil:
			return m.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

func (f families) want(t *testing.T, v float64, name string, labels ...string) {
	t.Helper()
	got, ok := f.value(name, labels...)
	if !ok || got != v {
		t.Fatalf("%s%v = %v (present %t), want %v", name, labels, got, ok, v)
	}
}

// until scrapes until cond holds (or fails the test at the deadline).
func until(t *testing.T, hc *http.Client, url, what string, cond func(families) bool) families {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		f := scrape(t, hc, url)
		if cond(f) {
			return f
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestMetrics(t *testing.T) {
	s := startServer(t, nil, "--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0")
	s.waitStderr(t, `msg="metrics serving"`)
	m := metricsURL.FindStringSubmatch(s.Logs())
	if m == nil {
		t.Fatalf("no metrics URL in the log:\n%s", s.Logs())
	}
	url := m[1]
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	c := lockv1connect.NewLockServiceClient(hc, "http://"+s.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	acquire := func(key string, ttl, wait time.Duration) *lockv1.AcquireResponse {
		t.Helper()
		req := &lockv1.AcquireRequest{Key: key, Ttl: durationpb.New(ttl)}
		if wait > 0 {
			req.Wait = durationpb.New(wait)
		}
		resp, err := c.Acquire(ctx, req)
		if err != nil {
			t.Fatalf("acquire %s: %v", key, err)
		}
		return resp
	}

	// Three held locks before the first scrape counts them.
	a := acquire("k", time.Minute, 0).GetLease()
	acquire("held/1", time.Minute, 0)
	acquire("held/2", time.Minute, 0)
	if acquire("k", time.Minute, 0).GetAcquired() {
		t.Fatal("k acquired twice")
	}
	if _, err := c.Acquire(ctx, &lockv1.AcquireRequest{Key: "k", Ttl: durationpb.New(-time.Second)}); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("bad ttl: %v", err)
	}
	// A queued waiter, and a watcher.
	waited := make(chan *lockv1.AcquireResponse, 1)
	go func() {
		resp, _ := c.Acquire(ctx, &lockv1.AcquireRequest{Key: "k", Ttl: durationpb.New(time.Minute), Wait: durationpb.New(20 * time.Second)})
		waited <- resp
	}()
	stream, err := c.Watch(ctx, &lockv1.WatchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().GetType() != lockv1.EventType_EVENT_TYPE_SYNCED {
		t.Fatalf("watch: %v", stream.Err())
	}
	f := until(t, hc, url, "one waiter", func(f families) bool {
		v, _ := f.value("holdfast_waiters")
		return v == 1
	})
	f.want(t, 3, "holdfast_locks_held")
	f.want(t, 1, "holdfast_rpc_streams", "method", "Watch")
	f.want(t, 1, "holdfast_info", "version", binVersion, "backend", "memory")
	f.want(t, 1, "holdfast_backend_up")
	f.want(t, 0, "holdfast_backend_restarts_total")

	if r, err := c.Extend(ctx, &lockv1.ExtendRequest{Key: "k", OwnerToken: a.GetOwnerToken(), Ttl: durationpb.New(time.Minute)}); err != nil || !r.GetExtended() {
		t.Fatalf("extend: %v %v", r, err)
	}
	if r, err := c.Release(ctx, &lockv1.ReleaseRequest{Key: "k", OwnerToken: a.GetOwnerToken()}); err != nil || !r.GetReleased() {
		t.Fatalf("release: %v %v", r, err)
	}
	if r := <-waited; !r.GetAcquired() {
		t.Fatalf("the waiter did not get k: %v", r)
	}
	if r, err := c.Release(ctx, &lockv1.ReleaseRequest{Key: "k", OwnerToken: a.GetOwnerToken()}); err != nil || r.GetReleased() {
		t.Fatalf("stale release: %v %v", r, err)
	}
	if r, err := c.Extend(ctx, &lockv1.ExtendRequest{Key: "k", OwnerToken: a.GetOwnerToken(), Ttl: durationpb.New(time.Minute)}); err != nil || r.GetExtended() {
		t.Fatalf("stale extend: %v %v", r, err)
	}
	acquire("short", 50*time.Millisecond, 0)

	f = until(t, hc, url, "the expiry of short", func(f families) bool {
		v, _ := f.value("holdfast_lease_expirations_total")
		return v == 1
	})
	f.want(t, 5, "holdfast_acquisitions_total", "outcome", "acquired") // k, held/1, held/2, the waiter, short
	f.want(t, 1, "holdfast_acquisitions_total", "outcome", "contended")
	f.want(t, 1, "holdfast_acquire_wait_seconds", "outcome", "acquired")
	f.want(t, 1, "holdfast_releases_total", "outcome", "released")
	f.want(t, 1, "holdfast_releases_total", "outcome", "stale")
	f.want(t, 1, "holdfast_extends_total", "outcome", "extended")
	f.want(t, 1, "holdfast_extends_total", "outcome", "lost")
	f.want(t, 0, "holdfast_waiters")
	f.want(t, 6, "holdfast_rpc_duration_seconds", "method", "Acquire", "code", "ok")
	f.want(t, 1, "holdfast_rpc_duration_seconds", "method", "Acquire", "code", "invalid_argument")
	f.want(t, 2, "holdfast_rpc_duration_seconds", "method", "Release", "code", "ok")
	f.want(t, 2, "holdfast_rpc_duration_seconds", "method", "Extend", "code", "ok")
	if v, ok := f.value("holdfast_backend_call_duration_seconds", "method", "Acquire", "outcome", "ok"); !ok || v < 5 {
		t.Fatalf("backend Acquire calls: %v %t", v, ok)
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes", "holdfast_backend_call_duration_seconds"} {
		if _, ok := f[name]; !ok {
			t.Fatalf("no %s", name)
		}
	}
	// Keys are unbounded: no series carries one.
	for name, fam := range f {
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "key" || strings.HasPrefix(l.GetValue(), "held/") || l.GetValue() == "short" {
					t.Fatalf("%s has a per-key label %s=%q", name, l.GetName(), l.GetValue())
				}
			}
		}
	}

	// A plugin crash: counted, and up again.
	s.waitStderr(t, `plugin_pid=`)
	pm := pluginStarted.FindStringSubmatch(s.Logs())
	pid, err := strconv.Atoi(pm[1])
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	until(t, hc, url, "a counted restart", func(f families) bool {
		r, _ := f.value("holdfast_backend_restarts_total")
		up, _ := f.value("holdfast_backend_up")
		return r == 1 && up == 1
	})
	stream.Close()
	tr.CloseIdleConnections()
	if err := s.stop(t); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
}

// Without --metrics-addr nothing listens for metrics.
func TestMetricsOffByDefault(t *testing.T) {
	s := startServer(t, nil, "--addr", "127.0.0.1:0")
	if strings.Contains(s.Logs(), "metrics serving") {
		t.Fatalf("metrics served without --metrics-addr:\n%s", s.Logs())
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("http://" + s.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("the API port serves /metrics: %s", resp.Status)
	}
}
