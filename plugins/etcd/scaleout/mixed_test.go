package scaleout_test

import (
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/harness"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
)

// oldPluginEnv names a holdfast-backend-etcd binary of an earlier version
// (built from the previous release or main), for TestMixedVersions.
const oldPluginEnv = "HOLDFAST_ETCD_OLD_PLUGIN"

// A rolling upgrade: a server on an earlier plugin and one on this one
// share one etcd namespace. A lock taken through either is released,
// extended, replayed and fenced correctly through the other; a lock-delay
// ends with a release through either. Opt-in (it needs the earlier
// binary): HOLDFAST_ETCD_OLD_PLUGIN=/path/to/holdfast-backend-etcd.
func TestMixedVersions(t *testing.T) {
	old := os.Getenv(oldPluginEnv)
	if old == "" {
		t.Skipf("%s not set: no earlier plugin to run beside this one", oldPluginEnv)
	}
	endpoints := etcdEndpoints(t)
	prefix := fmt.Sprintf("/holdfast-mixed/%d/", time.Now().UnixNano())
	buildDir := t.TempDir()
	plugin, err := harness.Binary(t.Context(), buildDir, "holdfast-backend-etcd")
	if err != nil {
		t.Fatal(err)
	}
	clients := map[string]lockv1connect.LockServiceClient{}
	for name, bin := range map[string]string{"old": old, "new": plugin} {
		s := harness.StartT(t, harness.Options{BuildDir: buildDir, Backend: bin,
			BackendOptions: map[string]string{"endpoints": endpoints, "prefix": prefix}})
		clients[name] = lockv1connect.NewLockServiceClient(http.DefaultClient, s.URL)
	}
	ctx := t.Context()
	ttl := durationpb.New(2 * time.Second)
	n := 0
	acquire := func(via, key string, delay time.Duration) *lockv1.Lease {
		t.Helper()
		n++
		resp, err := clients[via].Acquire(ctx, &lockv1.AcquireRequest{Key: key, Ttl: ttl, RequestId: fmt.Sprintf("%s-acquire-%04d", prefix, n),
			LockDelay: durationpb.New(delay)})
		if err != nil || !resp.GetAcquired() {
			t.Fatalf("acquire %q through %s: %v %v", key, via, resp, err)
		}
		return resp.GetLease()
	}
	release := func(via string, l *lockv1.Lease, id string) {
		t.Helper()
		resp, err := clients[via].Release(ctx, &lockv1.ReleaseRequest{Key: l.GetKey(), OwnerToken: l.GetOwnerToken(), RequestId: id})
		if err != nil || !resp.GetReleased() {
			t.Fatalf("release %q (%s) through %s: %v %v", l.GetKey(), id, via, resp, err)
		}
	}
	free := func(key string) {
		t.Helper()
		for _, via := range []string{"old", "new"} {
			resp, err := clients[via].Inspect(ctx, &lockv1.InspectRequest{Key: key})
			if err != nil || resp.GetHeld() || resp.GetDelayed() != nil {
				t.Fatalf("%q through %s after its release: %v %v, want free", key, via, resp, err)
			}
		}
	}
	pairs := [][2]string{{"new", "old"}, {"old", "new"}, {"new", "new"}, {"old", "old"}}
	for i, p := range pairs {
		taker, other := p[0], p[1]
		key := fmt.Sprintf("k%d", i)
		var last uint64
		for round, delay := range []time.Duration{0, time.Second} {
			l := acquire(taker, key, delay)
			if l.GetFencingToken() <= last {
				t.Fatalf("%s then %s: fencing token %d after %d", taker, other, l.GetFencingToken(), last)
			}
			last = l.GetFencingToken()
			// Extended through the other server (the record moves to
			// another lease), then through the taker.
			for _, via := range []string{other, taker} {
				resp, err := clients[via].Extend(ctx, &lockv1.ExtendRequest{Key: key, OwnerToken: l.GetOwnerToken(), Ttl: ttl})
				if err != nil || !resp.GetExtended() {
					t.Fatalf("extend %q (taken through %s) through %s: %v %v", key, taker, via, resp, err)
				}
			}
			id := fmt.Sprintf("%s-release-%d-%d", prefix, i, round)
			release(other, l, id)
			free(key)             // no lock-delay after a release
			release(taker, l, id) // a repeat of that release, through the other version
			// Taken and released through one server: the releasing
			// server knows the lock it granted.
			l = acquire(taker, key, delay)
			if l.GetFencingToken() <= last {
				t.Fatalf("%s: fencing token %d after %d", taker, l.GetFencingToken(), last)
			}
			last = l.GetFencingToken()
			release(taker, l, id+"-again")
			free(key)
			release(other, l, id+"-again")
		}
	}
}
