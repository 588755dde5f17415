package chaos

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/holdfast/holdfast/harness"
)

// TestChaosCatchesBrokenBackends proves the whole pipeline can fail: the
// same run against the conformance suite's deliberately broken backends must
// end with a history porcupine calls illegal, saved and visualised.
func TestChaosCatchesBrokenBackends(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real servers")
	}
	bins := t.TempDir()
	serverBin, err := harness.Binary(t.Context(), bins, "holdfast")
	if err != nil {
		t.Fatal(err)
	}
	clientBin, err := harness.Build(t.Context(), bins, "chaos-client", "./chaos/cmd/chaos-client")
	if err != nil {
		t.Fatal(err)
	}
	// One executable serves every broken backend, chosen by the name it is
	// started under: each case runs it through a link named after its bug.
	brokenBin, err := harness.Build(t.Context(), bins, "holdfast-backend-broken", "./conformance/internal/brokenbackends/cmd/holdfast-backend-broken")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name   string
		faults []string
	}{
		// Release without comparing owner tokens: a holder paused past its
		// TTL wakes up and its release frees its successor's lock.
		{"releasewithoutcompare", []string{FaultClientPause}},
		// Fencing restarts from 1 in a relaunched plugin.
		{"fencingfromone", []string{FaultPluginKill}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			plugin := filepath.Join(bins, tc.name)
			if err := os.Symlink(brokenBin, plugin); err != nil {
				t.Fatal(err)
			}
			svc, err := StartService(t.Context(), "", "memory", "")
			if err != nil {
				t.Fatal(err)
			}
			rep, err := Run(t.Context(), Config{
				Backend: tc.name, Duration: 8 * time.Second, Seed: *flagSeed,
				Clients: 6, Keys: 1, TTL: 2 * time.Second, FaultEvery: time.Second, Faults: tc.faults,
				Server: serverBin, Plugin: plugin, Client: clientBin, Service: svc, Logf: t.Logf,
			})
			if err != nil {
				t.Fatalf("harness: %v", err)
			}
			res := Check(rep.History, time.Minute)
			t.Logf("%s: %s; porcupine: %s", tc.name, rep.Summary(), res.Result)
			if os.Getenv("CHAOS_DEBUG") != "" {
				_, _, _ = SaveWithFaults(rep.History, rep.Faults, res, "/tmp/chaosdebug-"+tc.name)
			}
			if res.Result != porcupine.Illegal {
				t.Fatalf("porcupine says %s for a broken backend, want Illegal", res.Result)
			}
			jsonl, html, err := SaveWithFaults(rep.History, rep.Faults, res, filepath.Join(t.TempDir(), tc.name))
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{jsonl, html} {
				if fi, err := os.Stat(p); err != nil || fi.Size() == 0 {
					t.Fatalf("%s not written: %v", p, err)
				}
			}
		})
	}
}
