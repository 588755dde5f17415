package etcd_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/holdfast/holdfast/harness"
	"github.com/holdfast/holdfast/plugins/etcd"
	"github.com/holdfast/holdfast/plugins/etcd/internal/etcdtest"
)

// sharedEndpoints is the etcd most tests use: HOLDFAST_ETCD_ENDPOINTS, or one
// started by TestMain when that is unset; startErr says why there is none.
var (
	sharedEndpoints string
	startErr        error
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var stop func()
	sharedEndpoints, stop, startErr = etcdtest.StartShared()
	code := m.Run()
	stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	return code
}

// requireEtcd skips (or fails, under HOLDFAST_REQUIRE_SERVICES=1) when no
// etcd is available, and returns the endpoints.
func requireEtcd(t testing.TB) string {
	t.Helper()
	if sharedEndpoints == "" {
		harness.SkipOrFail(t, fmt.Sprintf("no etcd: %s unset and none could be started: %v", etcdtest.EndpointsEnv, startErr))
	}
	return sharedEndpoints
}

var prefixSeq atomic.Int64

// testPrefix is a key namespace no other test (or run) shares.
func testPrefix(t testing.TB) string {
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	return fmt.Sprintf("/holdfast-test/%d-%d-%s/", time.Now().UnixNano(), prefixSeq.Add(1), name)
}

// open opens a backend on endpoints with a private prefix (unless opts sets
// one) and closes it at the end of the test.
func open(t testing.TB, endpoints string, opts map[string]string) *etcd.Backend {
	t.Helper()
	o := map[string]string{"endpoints": endpoints, "prefix": testPrefix(t)}
	for k, v := range opts {
		o[k] = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := etcd.New(ctx, o)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}
