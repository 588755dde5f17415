package conformance_test

import (
	"encoding/xml"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holdfast/holdfast/harness"
)

// The suite must catch each deliberately broken backend by the spec named
// for its bug. Each runs through the holdfast-conformance command, the way a
// third-party author would run it, and is judged by its JUnit report.
func TestSuiteCatchesBrokenBackends(t *testing.T) {
	cli := binary(t, "holdfast-conformance")
	// A durable store for the backends on filestore, in each run's own
	// directory.
	store := func(dir string) []string { return []string{"--plugin-opt", "path=" + filepath.Join(dir, "locks.json")} }
	cases := []struct {
		backend string // conformance/internal/brokenbackends/<backend>
		label   string // the promise's label: only its specs run
		spec    string // the spec that must fail
		args    func(dir string) []string
	}{
		{backend: "releasewithoutcompare", label: "owner-token", spec: "owner token makes a stale holder's release after expiry and takeover a no-op"},
		{backend: "readthenwrite", label: "atomic-acquire", spec: "atomic acquire lets exactly one of N racing acquirers win a free key"},
		{backend: "neverexpires", label: "ttl", spec: "TTL holds a lock for at least its TTL and frees it within TTL + granularity + slack"},
		{backend: "ignoresstamps", label: "stamps", spec: "stamps stores at least the proposed stamp"},
		{backend: "fencingfromone", label: "fencing", spec: "fencing keeps increasing after kill -9 of the plugin"},
		{backend: "extendresurrects", label: "owner-token", spec: "owner token answers false and changes nothing for the token of a lease its owner released"},
		{backend: "emptytokenreleases", label: "owner-token", spec: "owner token never matches an empty owner token"},
		{backend: "unchainedstamps", label: "stamps", spec: "stamps stores a stamp after the previous holder's even when the proposed stamp is older", args: store},
		{backend: "listprefixpattern", label: "list", spec: "list pages through held locks under a prefix in key order"},
		{backend: "silentexpiry", label: "watch", spec: "watch sends synced first, then acquired, released and expired events",
			// (the other watch specs wait out their timeouts for the
			// expiries too)
			args: func(string) []string { return []string{"--focus", "sends synced first"} }},
		{backend: "extenddoesnotrenew", label: "ttl", spec: "TTL renews a lease for its TTL counted from the extend"},
		{backend: "claimsshared", label: "sharing", spec: "sharing shows a lock taken through one plugin instance to another"},
		{backend: "overgrants", label: "semaphore", spec: "semaphore never grants more permits than the limit to racing acquirers, checked at a fenced counter"},
		{backend: "proclaimswithoutowner", label: "election", spec: "election lets the leader's token alone replace the value, changing nothing else, and announces it in Watch"},
		{backend: "countskeys", label: "count", spec: "count counts a held lease and each grant of a semaphore once, and a released lease no more"},
		{backend: "followsall", label: "follow", spec: "follow sends the changes of followed keys and prefixes, and only those"},
		{backend: "secondowner", label: "sharing", spec: "sharing refuses a second plugin instance on a single-instance store while the first runs",
			args: func(dir string) []string { return append(store(dir), "--single-instance") }},
	}
	for _, c := range cases {
		t.Run(c.backend, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			plugin := brokenBackend(t, c.backend)
			report := filepath.Join(dir, "junit.xml")
			args := []string{"backend", "--plugin", plugin, "--label-filter", c.label, "--junit-report", report}
			if c.args != nil {
				args = append(args, c.args(dir)...)
			}
			cmd := exec.CommandContext(t.Context(), cli, args...)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("holdfast-conformance on %s: %v, want exit status 1; output:\n%s", c.backend, err, out)
			}
			cases := readJUnit(t, report)
			var failed []string
			found := false
			for _, tc := range cases {
				if tc.Status == "failed" {
					failed = append(failed, tc.Name)
				}
				if strings.Contains(tc.Name, c.spec) {
					found = true
					if tc.Status != "failed" {
						t.Errorf("%s: spec %q is %s, want failed", c.backend, c.spec, tc.Status)
					}
				}
			}
			if !found {
				t.Fatalf("%s: no spec %q in the report; output:\n%s", c.backend, c.spec, out)
			}
			t.Logf("%s fails: %s", c.backend, strings.Join(failed, "; "))
			if !strings.Contains(string(out), "FAIL  "+c.spec) {
				t.Errorf("%s: the summary does not name the failed spec %q; output:\n%s", c.backend, c.spec, out)
			}
		})
	}
}

// The same command passes a correct backend and reports what did not apply.
func TestCommandPassesMemory(t *testing.T) {
	dir := t.TempDir()
	cli := binary(t, "holdfast-conformance")
	plugin := binary(t, "holdfast-backend-memory")
	report := filepath.Join(dir, "junit.xml")
	out, err := exec.CommandContext(t.Context(), cli, "backend", "--plugin", plugin,
		"--label-filter", "!disruptive && !ttl && !watch", "--junit-report", report).CombinedOutput()
	if err != nil {
		t.Fatalf("holdfast-conformance on memory: %v; output:\n%s", err, out)
	}
	if !strings.Contains(string(out), "N/A   sharing") || !strings.Contains(string(out), "shared=false") {
		t.Errorf("the summary does not say why the sharing spec did not apply; output:\n%s", out)
	}
	for _, tc := range readJUnit(t, report) {
		if tc.Status == "failed" {
			t.Errorf("spec %q failed", tc.Name)
		}
	}
}

type junitCase struct {
	Name    string `xml:"name,attr"`
	Status  string `xml:"status,attr"`
	Skipped *struct {
		Message string `xml:"message,attr"`
	} `xml:"skipped"`
}

func readJUnit(t *testing.T, path string) []junitCase {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("JUnit report: %v", err)
	}
	var doc struct {
		Suites []struct {
			Cases []junitCase `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("JUnit report %s: %v", path, err)
	}
	var out []junitCase
	for _, s := range doc.Suites {
		out = append(out, s.Cases...)
	}
	return out
}

// The service level of the command drives a server given by address, and
// says which specs needed more than an address.
func TestCommandServiceLevel(t *testing.T) {
	cli := binary(t, "holdfast-conformance")
	s := harness.StartT(t, harness.Options{Backend: "memory", Binary: binary(t, "holdfast")})
	out, err := exec.CommandContext(t.Context(), cli, "service", "--addr", s.URL,
		"--label-filter", "server-info || owner-token || disruptive").CombinedOutput()
	if err != nil {
		t.Fatalf("holdfast-conformance service: %v; output:\n%s", err, out)
	}
	for _, want := range []string{
		"N/A   server info behaves as shared or not shared",
		"no second server",
		"N/A   fencing keeps increasing across a restart of the server",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("summary lacks %q; output:\n%s", want, out)
		}
	}
}

// Bad usage is refused with status 2 before anything runs.
func TestCommandUsage(t *testing.T) {
	cli := binary(t, "holdfast-conformance")
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"backend"},
		{"service"},
		{"backend", "--plugin", "x", "--plugin-opt", "novalue"},
	} {
		err := exec.CommandContext(t.Context(), cli, args...).Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("holdfast-conformance %q: %v, want exit status 2", args, err)
		}
	}
}

// A known-failing list lets a backend with a known gap pass, and fails the
// run once a listed spec passes or names nothing.
func TestCommandKnownFailing(t *testing.T) {
	cli := binary(t, "holdfast-conformance")
	plugin := brokenBackend(t, "releasewithoutcompare")
	run := func(known string) (int, string) {
		t.Helper()
		f := filepath.Join(t.TempDir(), "known")
		if err := os.WriteFile(f, []byte(known), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.CommandContext(t.Context(), cli, "backend", "--plugin", plugin,
			"--label-filter", "owner-token", "--known-failing", f).CombinedOutput()
		var exit *exec.ExitError
		switch {
		case err == nil:
			return 0, string(out)
		case errors.As(err, &exit):
			return exit.ExitCode(), string(out)
		}
		t.Fatalf("holdfast-conformance: %v", err)
		return 0, ""
	}
	failing := "# the bug under test\nowner token ignores a release with a token that never held the key\nowner token makes a stale holder's release\n" +
		"owner token never matches an empty owner token\nowner token never matches the owner token of another key\n"
	if code, out := run(failing); code != 0 || !strings.Contains(out, "XFAIL") {
		t.Errorf("every failure listed: exit %d, want 0 with XFAIL; output:\n%s", code, out)
	}
	if code, out := run("owner token makes a stale holder's release\n"); code != 1 {
		t.Errorf("one failure unlisted: exit %d, want 1; output:\n%s", code, out)
	}
	if code, out := run(failing + "owner token extends only with the holding token\n"); code != 1 || !strings.Contains(out, "it passes now") {
		t.Errorf("a passing spec listed: exit %d, want 1 naming it; output:\n%s", code, out)
	}
	if code, out := run(failing + "no such spec\n"); code != 1 || !strings.Contains(out, "STALE") {
		t.Errorf("a stale entry: exit %d, want 1 naming it; output:\n%s", code, out)
	}
}

// A plugin that does not start fails the run, and the summary says why (the
// plugin's own error), not only that setup failed.
func TestCommandReportsWhyThePluginDidNotStart(t *testing.T) {
	cli := binary(t, "holdfast-conformance")
	plugin := binary(t, "holdfast-backend-memory")
	out, err := exec.CommandContext(t.Context(), cli, "backend", "--plugin", plugin, "--plugin-opt", "bogus=1").CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("holdfast-conformance with a bad option: %v, want exit status 1; output:\n%s", err, out)
	}
	_, summary, _ := strings.Cut(string(out), "=== holdfast conformance")
	if !strings.Contains(summary, "FAIL  [BeforeSuite]") || !strings.Contains(summary, "unknown option(s) bogus") {
		t.Errorf("the summary does not give the plugin's reason; output:\n%s", out)
	}
}

// --restart-store runs a shell command as Config.RestartStore: the store
// restart spec passes a correct backend and catches fencing that goes back.
// The "store" of these backends is the plugin process, so the command kills
// it, by the PID the suite gives it, and waits until it is gone.
func TestCommandRestartStore(t *testing.T) {
	cli := binary(t, "holdfast-conformance")
	const killPlugin = `pid=$HOLDFAST_CONFORMANCE_PLUGIN_PID; kill -9 "$pid" && while kill -0 "$pid" 2>/dev/null; do sleep 0.01; done`
	for _, c := range []struct {
		plugin   string
		wantExit int
	}{
		{binary(t, "holdfast-backend-memory"), 0},
		{brokenBackend(t, "fencingfromone"), 1},
	} {
		cmd := exec.CommandContext(t.Context(), cli, "backend", "--plugin", c.plugin,
			"--label-filter", "store-restart", "--restart-store", killPlugin)
		out, err := cmd.CombinedOutput()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		want := "1 passed"
		if c.wantExit != 0 {
			want = "FAIL  store restart keeps fencing increasing"
		}
		if code != c.wantExit || !strings.Contains(string(out), want) {
			t.Errorf("%s: exit %d, want %d and %q in the output:\n%s", filepath.Base(c.plugin), code, c.wantExit, want, out)
		}
	}
	// Without the hook the spec does not apply, and the report says so.
	out, err := exec.CommandContext(t.Context(), cli, "backend", "--plugin", binary(t, "holdfast-backend-memory"),
		"--label-filter", "store-restart").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "N/A   store restart") || !strings.Contains(string(out), "--restart-store") {
		t.Errorf("without --restart-store: %v, want the spec reported not applicable; output:\n%s", err, out)
	}
}
