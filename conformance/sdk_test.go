package conformance_test

import (
	"encoding/xml"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast/holdfast/conformance"
	"github.com/holdfast/holdfast/harness"
)

// The SDK matrix: the SDK-level specs, written once, run against each SDK's
// adapter process (Go, TypeScript, Python) on holdfast servers the suite
// starts on each backend.
//
// Every SDK runs on every backend: the 3 x 4 matrix.
// HOLDFAST_CONFORMANCE_SDKS=go,typescript,python picks the SDKs and
// HOLDFAST_CONFORMANCE_BACKENDS the backends, as for the other levels.
// HOLDFAST_SDK_MATRIX_FILE, when set, receives the matrix table (make
// test-sdk-conformance prints it). An SDK whose adapter does not pass some
// specs yet lists them in testdata/known-failing/SDK.txt (the run fails as
// soon as a listed spec passes).

// sdkBackends lists the backends the SDK specs run on, with the environment
// variables their options come from (skipped, or failed under
// HOLDFAST_REQUIRE_SERVICES=1, when unset).
var sdkBackends = []struct {
	name string
	env  map[string]string // option -> environment variable
	// extra options, computed once per run (a namespace of the run's own).
	extra func() map[string]string
	// ttl is the lease the specs use on this backend (0: sdkTTL).
	ttl time.Duration
}{
	{name: "memory"},
	{name: "etcd", env: map[string]string{"endpoints": "HOLDFAST_ETCD_ENDPOINTS"}, extra: func() map[string]string {
		return map[string]string{"prefix": fmt.Sprintf("/holdfast-sdk-conformance/%d/", time.Now().UnixNano())}
	}},
	{name: "redis", env: map[string]string{"addrs": "HOLDFAST_REDIS_ADDR"}},
	// PostgreSQL's renewals are the slowest of the stores under load: with
	// this matrix running on the 2-core CI machine at load 8-10, an Extend
	// from the Go SDK through server, plugin and PostgreSQL took p50 3.5ms,
	// p99 103ms and at worst 258ms (533 renewals), and an Acquire once took
	// over 300ms. A 1s lease gives each renewal attempt TTL/3 = 333ms, so
	// one slow round trip fails it and two in a row lose the lease; 2s
	// gives each attempt 667ms, well over the worst seen.
	{name: "postgres", env: map[string]string{"dsn": "HOLDFAST_POSTGRES_DSN"}, extra: func() map[string]string {
		return map[string]string{"schema": fmt.Sprintf("sdkconf_%d", time.Now().UnixNano())}
	}, ttl: 2 * time.Second},
}

// sdkTTL is the lease the SDK specs use unless the backend needs a longer
// one: Node and Python adapters on a loaded 2-core machine (several test
// runs at once) can stall for a few hundred milliseconds; a 1s lease keeps
// those stalls from ending leases the specs expect to be renewed.
const sdkTTL = time.Second

// ttlFor is the lease the SDK specs use on backend name.
func ttlFor(name string) time.Duration {
	for _, b := range sdkBackends {
		if b.name == name && b.ttl > 0 {
			return b.ttl
		}
	}
	return sdkTTL
}

var sdkNames = []string{"go", "typescript", "python"}

// sdkRows is the (sdk, backend) pairs to run.
func sdkRows() (rows [][2]string) {
	only := os.Getenv("HOLDFAST_CONFORMANCE_BACKENDS")
	sdks := os.Getenv("HOLDFAST_CONFORMANCE_SDKS")
	for _, b := range sdkBackends {
		if only != "" && !slices.Contains(strings.Split(only, ","), b.name) {
			continue
		}
		for _, s := range sdkNames {
			if sdks == "" || slices.Contains(strings.Split(sdks, ","), s) {
				rows = append(rows, [2]string{s, b.name})
			}
		}
	}
	return rows
}

// matrixDirEnv carries, to the suite processes, where their JUnit reports go.
const matrixDirEnv = "HOLDFAST_SDK_MATRIX_DIR"

// matrixParallelEnv says how many cells of the matrix run at once (default
// 3). Cells mostly wait on timers (leases, waits, backoff), so a few at once
// cost little CPU; each starts its own servers and adapter.
const matrixParallelEnv = "HOLDFAST_SDK_MATRIX_PARALLEL"

// backendIndependent labels SDK specs that do not touch the backend (an
// address nothing listens on, the SDK's own validation and errors, the
// server's TLS and tokens): they run on the memory backend only.
const backendIndependent = "backend-independent"

// TestSDKConformance runs the SDK-level suite for each (SDK, backend) row
// and reports the matrix.
func TestSDKConformance(t *testing.T) {
	rows := sdkRows()
	if len(rows) == 0 {
		t.Skip("no SDK × backend row selected (HOLDFAST_CONFORMANCE_SDKS, HOLDFAST_CONFORMANCE_BACKENDS)")
	}
	child := os.Getenv("HOLDFAST_CONFORMANCE_CHILD") != ""
	if os.Getenv(matrixDirEnv) == "" {
		t.Setenv(matrixDirEnv, t.TempDir())
	}
	if !child && slices.ContainsFunc(rows, func(r [2]string) bool { return r[0] == "typescript" }) {
		// Built once for every TypeScript cell's suite process.
		t.Setenv(tsMainEnv, buildTSAdapter(t))
	}
	parallel := 3
	if v := os.Getenv(matrixParallelEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number", matrixParallelEnv, v)
		}
		parallel = n
	}
	slots := make(chan struct{}, parallel)
	var mu sync.Mutex
	results := map[[2]string]string{}
	t.Run("cells", func(t *testing.T) {
		for _, row := range rows {
			sdk, backendName := row[0], row[1]
			report := filepath.Join(os.Getenv(matrixDirEnv), sdk+"-"+backendName+".xml")
			t.Run(sdk+"/"+backendName, func(t *testing.T) {
				if !child {
					t.Parallel()
					slots <- struct{}{}
					defer func() { <-slots }()
				}
				defer func() {
					mu.Lock()
					defer mu.Unlock()
					results[row] = matrixCell(report, !t.Failed(), knownFailing(t, sdk))
				}()
				var cfg conformance.Config
				if conformance.SuiteProcess(t) {
					cfg = conformance.Config{
						Name:         sdk + " SDK on " + backendName,
						Runner:       adapterCommand(t, sdk),
						Serve:        serveOptions(t, backendName),
						JUnitReport:  report,
						KnownFailing: knownFailing(t, sdk),
						TTL:          ttlFor(backendName),
					}
					if backendName != "memory" {
						cfg.LabelFilter = "!" + backendIndependent
					}
				}
				conformance.RunSDK(t, cfg)
			})
		}
	})
	if child {
		return // a suite process for one row (see conformance.RunSDK); the parent reports
	}
	table := matrixTable(rows, results)
	fmt.Print(table)
	t.Log("\n" + table)
	if f := os.Getenv("HOLDFAST_SDK_MATRIX_FILE"); f != "" {
		if err := os.WriteFile(f, []byte(table), 0o644); err != nil {
			t.Errorf("writing the matrix: %v", err)
		}
	}
}

// knownFailing is the SDK's list of specs its adapter does not pass yet
// (testdata/known-failing/SDK.txt; none when the file does not exist).
func knownFailing(t *testing.T, sdk string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "known-failing", sdk+".txt"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return conformance.ParseKnownFailing(b)
}

// serveOptions says how the suite starts its servers on backend name; it
// skips (or fails under HOLDFAST_REQUIRE_SERVICES=1) when the backend's
// service is not configured.
func serveOptions(t *testing.T, name string) *harness.Options {
	t.Helper()
	for _, b := range sdkBackends {
		if b.name != name {
			continue
		}
		opts, err := harness.OptionsFromEnv(b.env)
		if err != nil {
			harness.SkipOrFail(t, name+": "+err.Error())
		}
		if b.extra != nil {
			for k, v := range b.extra() {
				opts[k] = v
			}
		}
		if name == "memory" {
			return &harness.Options{Backend: name}
		}
		// By path: the plugin need not sit next to the holdfast binary.
		return &harness.Options{Backend: binary(t, "holdfast-backend-"+name), BackendOptions: opts}
	}
	t.Fatalf("unknown backend %q", name)
	return nil
}

// tsMainEnv carries the TypeScript adapter the parent built to the suite
// processes.
const tsMainEnv = "HOLDFAST_SDK_TS_ADAPTER"

// adapterCommand returns the command line of the SDK's adapter, building
// what it needs.
func adapterCommand(t *testing.T, sdk string) []string {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	switch sdk {
	case "go":
		p, err := harness.Build(t.Context(), buildDir, "holdfast-conformance-go-runner", "./conformance/cmd/holdfast-conformance-go-runner")
		if err != nil {
			t.Fatal(err)
		}
		return []string{p}
	case "typescript":
		if p := os.Getenv(tsMainEnv); p != "" {
			return []string{"node", p}
		}
		return []string{"node", buildTSAdapter(t)}
	case "python":
		py := filepath.Join(root, "sdk-python", ".venv", "bin", "python")
		if _, err := os.Stat(py); err != nil {
			harness.SkipOrFail(t, "sdk-python/.venv is missing (run scripts/setup.d/50-python.sh or make sdk-codegen-tools)")
		}
		return []string{py, filepath.Join(root, "sdk-python", "conformance_runner", "holdfast_conformance_runner.py")}
	}
	t.Fatalf("unknown SDK %q", sdk)
	return nil
}

// buildTSAdapter compiles the TypeScript adapter with sdk-ts's own tsc and
// compiler settings, into a directory of this test's own under sdk-ts (so
// Node finds sdk-ts/node_modules and its "type": "module"), removed when
// the test ends, and returns its main.js.
func buildTSAdapter(t *testing.T) string {
	t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "sdk-ts")
	tsc := filepath.Join(dir, "node_modules", "typescript", "bin", "tsc")
	if _, err := os.Stat(tsc); err != nil {
		harness.SkipOrFail(t, "sdk-ts/node_modules is missing (run scripts/setup.d/40-node.sh or make sdk-codegen-tools)")
	}
	if _, err := exec.LookPath("node"); err != nil {
		harness.SkipOrFail(t, "node is not installed")
	}
	if err := os.MkdirAll(filepath.Join(dir, "build-conformance-runner"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := os.MkdirTemp(filepath.Join(dir, "build-conformance-runner"), "test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(out) })
	cmd := exec.Command("node", tsc, "-p", "conformance-runner/tsconfig.json", "--outDir", out)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tsc -p sdk-ts/conformance-runner/tsconfig.json: %v\n%s", err, b)
	}
	return filepath.Join(out, "conformance-runner", "main.js")
}

// matrixCell summarises one row's JUnit report: passed/failed/known
// failing/not applicable.
func matrixCell(report string, ok bool, known []string) string {
	verdict := "PASS"
	if !ok {
		verdict = "FAIL"
	}
	b, err := os.ReadFile(report)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			if ok {
				return "skipped"
			}
			return "FAIL (no report)"
		}
		return "FAIL (" + err.Error() + ")"
	}
	var passed, failed, xfail, na int
	for _, c := range parseJUnit(b) {
		if !strings.HasPrefix(c.Name, "[It]") {
			if c.Status == "failed" || c.Status == "panicked" || c.Status == "timedout" {
				failed++
			}
			continue
		}
		switch c.Status {
		case "passed":
			passed++
		case "skipped", "pending":
			// A spec the label filter left out says only "skipped"; one
			// that does not apply says why.
			if c.Skipped == nil || strings.TrimSpace(c.Skipped.Message) != "skipped" {
				na++
			}
		default:
			if slices.ContainsFunc(known, func(k string) bool { return strings.Contains(c.Name, k) }) {
				xfail++
			} else {
				failed++
			}
		}
	}
	return fmt.Sprintf("%s %d/%d/%d/%d", verdict, passed, failed, xfail, na)
}

func matrixTable(rows [][2]string, results map[[2]string]string) string {
	var sdks, backends []string
	for _, r := range rows {
		if !slices.Contains(sdks, r[0]) {
			sdks = append(sdks, r[0])
		}
		if !slices.Contains(backends, r[1]) {
			backends = append(backends, r[1])
		}
	}
	var b strings.Builder
	b.WriteString("\nSDK conformance matrix (verdict passed/failed/known-failing/not-applicable specs;\n")
	b.WriteString("specs labelled " + backendIndependent + " run on memory only):\n")
	fmt.Fprintf(&b, "  %-12s", "sdk \\ backend")
	for _, be := range backends {
		fmt.Fprintf(&b, " %-16s", be)
	}
	b.WriteString("\n")
	for _, s := range sdks {
		fmt.Fprintf(&b, "  %-12s", s)
		for _, be := range backends {
			cell, ok := results[[2]string{s, be}]
			if !ok {
				cell = "-"
			}
			fmt.Fprintf(&b, " %-16s", cell)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func parseJUnit(b []byte) []junitCase {
	var doc struct {
		Suites []struct {
			Cases []junitCase `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(b, &doc); err != nil {
		return []junitCase{{Name: "[ReportAfterSuite] malformed JUnit report: " + err.Error(), Status: "failed"}}
	}
	var out []junitCase
	for _, s := range doc.Suites {
		out = append(out, s.Cases...)
	}
	return out
}

// The SDK-level specs must catch an SDK with each of the bugs lock clients
// in the field have had: internal/brokenadapter gives the (correct) Go
// adapter one bug at a time, and the spec named for it must fail. Run
// through the holdfast-conformance command, as an SDK author would.
func TestSuiteCatchesBrokenSDKs(t *testing.T) {
	cli := binary(t, "holdfast-conformance")
	goRunner, err := harness.Build(t.Context(), buildDir, "holdfast-conformance-go-runner", "./conformance/cmd/holdfast-conformance-go-runner")
	if err != nil {
		t.Fatal(err)
	}
	broken, err := harness.Build(t.Context(), buildDir, "brokenadapter", "./conformance/internal/brokenadapter")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		bug   string // brokenadapter's bug
		label string // the promise's label: only its specs run
		spec  string // the spec that must fail
	}{
		{"silent-unlock", "owner-token", "owner token answers a stale holder's unlock and extend with lease_lost"},
		{"hides-loss", "watchdog", "watchdog poisons a guard within its TTL when its server stops answering"},
		{"forgets-clock", "stamps", "stamps carries what the SDK clock observed into the next acquisition"},
		{"rounds-tokens", "fencing", "fencing validates writes"},
		{"ignores-permits", "semaphore", "semaphore grants permits up to the limit at once and no further"},
		{"proclaims-blindly", "election", "election answers a deposed leader's proclaim with lease_lost"},
	}
	for _, c := range cases {
		t.Run(c.bug, func(t *testing.T) {
			t.Parallel()
			report := filepath.Join(t.TempDir(), "junit.xml")
			cmd := exec.CommandContext(t.Context(), cli, "sdk", "--runner", broken+" "+c.bug+" "+goRunner,
				"--label-filter", c.label, "--junit-report", report)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("holdfast-conformance sdk with bug %s: %v, want exit status 1; output:\n%s", c.bug, err, out)
			}
			found := false
			for _, tc := range readJUnit(t, report) {
				if strings.Contains(tc.Name, c.spec) {
					found = true
					if tc.Status != "failed" {
						t.Errorf("%s: spec %q is %s, want failed", c.bug, c.spec, tc.Status)
					}
				}
			}
			if !found {
				t.Fatalf("%s: no spec %q in the report; output:\n%s", c.bug, c.spec, out)
			}
			if !strings.Contains(string(out), "FAIL  "+c.spec) {
				t.Errorf("%s: the summary does not name the failed spec %q; output:\n%s", c.bug, c.spec, out)
			}
		})
	}
}

// The sdk level of the command refuses a missing or malformed --runner
// with exit status 2.
func TestCommandSDKUsage(t *testing.T) {
	cli := binary(t, "holdfast-conformance")
	for _, args := range [][]string{
		{"sdk"},
		{"sdk", "--runner", ""},
		{"sdk", "--runner", `node "unterminated`},
	} {
		out, err := exec.CommandContext(t.Context(), cli, args...).CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("holdfast-conformance %q: %v, want exit status 2; output:\n%s", args, err, out)
		}
		if !strings.Contains(string(out), "--runner") {
			t.Errorf("holdfast-conformance %q: the message does not name --runner:\n%s", args, out)
		}
	}
}
