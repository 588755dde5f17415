package chaos

import (
	"cmp"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/holdfast/holdfast/harness"
)

// Flags (each also read from an environment variable, for make):
//
//	-chaos.duration  HOLDFAST_CHAOS_DURATION  how long clients run per backend (default 15s)
//	-chaos.seed      HOLDFAST_CHAOS_SEED      the seed (default: from the clock, printed)
//	-chaos.backends  HOLDFAST_CHAOS_BACKENDS  comma-separated (default memory,etcd,redis,postgres)
//	-chaos.out       HOLDFAST_CHAOS_OUT       where failing histories are saved (default a new temp dir)
var (
	flagDuration = flag.Duration("chaos.duration", envDuration("HOLDFAST_CHAOS_DURATION", 15*time.Second), "how long clients run per backend")
	flagSeed     = flag.Uint64("chaos.seed", envUint("HOLDFAST_CHAOS_SEED", uint64(time.Now().UnixNano())), "seed of every random choice")
	flagBackends = flag.String("chaos.backends", envString("HOLDFAST_CHAOS_BACKENDS", "memory,etcd,redis,postgres"), "backends to run")
	flagOut      = flag.String("chaos.out", os.Getenv("HOLDFAST_CHAOS_OUT"), "directory for failing histories")
)

func envString(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func envDuration(k string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(k)); err == nil && d > 0 {
		return d
	}
	return def
}

func envUint(k string, def uint64) uint64 {
	if n, err := strconv.ParseUint(os.Getenv(k), 10, 64); err == nil {
		return n
	}
	return def
}

// TestChaos runs the seeded fault run on every backend — locks, a semaphore,
// a read-write lock and a leader election side by side under the same
// faults — and checks each primitive's history with porcupine against its
// model (and the election's Observe streams with CheckObservations),
// logging a "figures" line per backend and primitive.
func TestChaos(t *testing.T) {
	t.Logf("chaos seed %d (rerun with -chaos.seed=%d or HOLDFAST_CHAOS_SEED=%d), duration %s per backend",
		*flagSeed, *flagSeed, *flagSeed, *flagDuration)
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bins := t.TempDir()
	build := func(name string) string {
		t.Helper()
		p, err := harness.Binary(t.Context(), bins, name)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	serverBin := build("holdfast")
	clientBin, err := harness.Build(t.Context(), bins, "chaos-client", "./chaos/cmd/chaos-client")
	if err != nil {
		t.Fatal(err)
	}
	for b := range strings.SplitSeq(*flagBackends, ",") {
		t.Run(b, func(t *testing.T) {
			svc, err := StartService(t.Context(), root, b, t.TempDir())
			if err != nil {
				harness.SkipOrFail(t, err.Error())
			}
			t.Cleanup(svc.Stop)
			var plugin string
			if b != "memory" {
				plugin = build("holdfast-backend-" + b)
			}
			cfg := Config{
				Backend: b, Duration: *flagDuration, Seed: *flagSeed,
				Clients: 6, Keys: 3, SemaphoreLimit: 3, RWLock: true, Election: true,
				TTL: 2 * time.Second, FaultEvery: 1500 * time.Millisecond,
				Server: serverBin, Plugin: plugin, Client: clientBin, Service: svc,
				Logf: t.Logf,
			}
			rep, err := Run(t.Context(), cfg)
			if err != nil {
				t.Fatalf("harness: %v", err)
			}
			t.Logf("%s: %s", b, rep.Summary())
			for _, f := range rep.Findings {
				t.Errorf("finding: %s", f)
			}
			// One check per primitive, each with its own model; the faults
			// were injected into the one run all of them shared.
			for _, prim := range []string{PrimMutex, PrimSemaphore, PrimRWLock, PrimElection} {
				if prim == PrimElection && rep.NoElection {
					line := fmt.Sprintf("%-8s %-9s not run: the backend does not list KIND_ELECTION seed=%d", b, prim, *flagSeed)
					t.Log(line)
					addFigures("%s", line)
					continue
				}
				res := CheckPrimitive(rep.History, prim, 5*time.Minute)
				name := cmp.Or(prim, "mutex")
				n := 0
				for _, c := range res.Ops {
					n += c
				}
				// Peak: the most grants seen writing one key at once, which
				// shows the sharing the model checks did happen.
				// (Lock keys' writes are fenced by watermark: "-".)
				peak := "-"
				if prim != PrimMutex && prim != PrimElection {
					n := 0
					for _, o := range rep.History {
						if o.Prim == prim && o.Kind == Write {
							n = max(n, len(o.Occupants))
						}
					}
					peak = fmt.Sprint(n)
				}
				extra := ""
				if prim == PrimElection {
					// What the Observe streams saw, checked on their own.
					bad := CheckObservations(rep.History, rep.Observations)
					leaders := 0
					for _, o := range rep.Observations {
						if !o.None {
							leaders++
						}
					}
					verdict := "Ok"
					if len(bad) > 0 {
						verdict = fmt.Sprintf("%d-violations", len(bad))
						for _, v := range bad[:min(len(bad), 20)] {
							t.Errorf("%s: observation: %s", b, v)
						}
						path := filepath.Join(outDir(t), fmt.Sprintf("%s-election-observations-seed%d.jsonl", b, *flagSeed))
						if err := SaveObservations(rep.History, rep.Observations, path); err != nil {
							t.Fatalf("saving the observations: %v", err)
						}
						t.Errorf("%s: %d observations refused; election ops and observations in %s", b, len(bad), path)
					}
					extra = fmt.Sprintf(" proclaims=%d observed=%d(%d leaders) observe-check=%s",
						res.Ops[Proclaim], len(rep.Observations), leaders, verdict)
					if leaders == 0 {
						t.Errorf("%s: the Observe streams saw no leader: the observers did not run", b)
					}
				}
				line := fmt.Sprintf("%-8s %-9s ops=%-5d grants=%-4d faults=%-2d porcupine=%-7s check=%-5s peak-writers=%s%s seed=%d",
					b, name, n, res.Grants, len(rep.Faults), res.Result, res.Took.Round(time.Millisecond), peak, extra, *flagSeed)
				t.Log(line)
				addFigures("%s", line)
				if n == 0 || res.Grants == 0 {
					t.Errorf("%s %s: no grants in the run: the workload did not run", b, name)
				}
				if res.Result != porcupine.Ok {
					base := filepath.Join(outDir(t), fmt.Sprintf("%s-%s-seed%d", b, name, *flagSeed))
					jsonl, html, err := SaveWithFaults(rep.History, rep.Faults, res, base)
					if err != nil {
						t.Fatalf("saving the history: %v", err)
					}
					t.Errorf("%s: %s history not linearizable against its model (%s): history %s, visualisation %s",
						b, name, res.Result, jsonl, html)
				}
			}
			if rep.LostWrites > 0 && rep.LostWritesRefused == 0 {
				t.Logf("note: %d writes after a known lease loss were all accepted (no successor had written yet)", rep.LostWrites)
			}
		})
	}
}

// outDir is where a failing run's files go: -chaos.out, else a new temp dir
// (kept: the test prints the paths).
func outDir(t *testing.T) string {
	t.Helper()
	if *flagOut != "" {
		return *flagOut
	}
	dir, err := os.MkdirTemp("", "holdfast-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}
