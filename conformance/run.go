package conformance

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	"github.com/onsi/gomega"
)

// Level is which side of holdfast a run drives.
type Level string

const (
	// LevelBackend drives a backend plugin executable through the plugin host.
	LevelBackend Level = "backend"
	// LevelService drives a running holdfast server through its API.
	LevelService Level = "service"
	// LevelSDK drives an SDK through its adapter process (the runner
	// protocol of package sdkrunner) against servers the suite starts.
	LevelSDK Level = "sdk"
)

// childEnv carries, to a re-executed test binary, the name of the test
// whose suite it must run in-process.
const childEnv = "HOLDFAST_CONFORMANCE_CHILD"

// InProcessEnv, set to 1, makes RunBackend and RunService run the suite in
// the calling process (at most one suite per process: ginkgo's rule). The
// default re-executes the test binary so a package may run several suites.
const InProcessEnv = "HOLDFAST_CONFORMANCE_IN_PROCESS"

// RunBackend runs every backend-level spec against cfg.Plugin and fails t
// when any spec fails.
func RunBackend(t *testing.T, cfg Config) {
	t.Helper()
	runT(t, LevelBackend, cfg)
}

// RunService runs every service-level spec against the server at cfg.Addr
// (or servers the suite starts from cfg.Serve) and fails t when any spec
// fails.
func RunService(t *testing.T, cfg Config) {
	t.Helper()
	runT(t, LevelService, cfg)
}

// RunSDK runs every SDK-level spec against the adapter cfg.Runner, with
// servers the suite starts from cfg.Serve, and fails t when any spec fails.
func RunSDK(t *testing.T, cfg Config) {
	t.Helper()
	runT(t, LevelSDK, cfg)
}

// SuiteProcess reports whether RunBackend or RunService called from t runs
// the suite in this process. When it is false, they only re-execute the test
// binary for t (whose child then runs t's function again) and ignore their
// Config; a test can keep setup that creates resources to the process where
// it is used:
//
//	var cfg conformance.Config
//	if conformance.SuiteProcess(t) {
//		cfg.PluginOptions = startMyStore(t)
//	}
//	conformance.RunBackend(t, cfg)
func SuiteProcess(t *testing.T) bool {
	return os.Getenv(InProcessEnv) == "1" || os.Getenv(childEnv) == t.Name()
}

func runT(t *testing.T, level Level, cfg Config) {
	t.Helper()
	if SuiteProcess(t) {
		Run(t, level, cfg)
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("conformance: cannot re-execute the test binary: %v", err)
	}
	args := []string{"-test.run=" + runPattern(t.Name()), "-test.count=1"}
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "test.v" || f.Name == "test.timeout" || strings.HasPrefix(f.Name, "ginkgo.") {
			args = append(args, "-"+f.Name+"="+f.Value.String())
		}
	})
	cmd := exec.CommandContext(t.Context(), exe, args...)
	cmd.Env = append(os.Environ(), childEnv+"="+t.Name())
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("conformance: %s suite failed (%v); the report is above", level, err)
	}
}

// runPattern is a -test.run pattern matching exactly the test (or subtest)
// called name.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// Run runs the suite of the given level in this process and reports whether
// every spec passed. Ginkgo allows one suite per process, so call Run at most
// once; tests use RunBackend or RunService instead.
func Run(t ginkgo.GinkgoTestingT, level Level, cfg Config) bool {
	cfg = cfg.withDefaults()
	gomega.RegisterFailHandler(ginkgo.Fail)
	suiteConfig, reporterConfig := ginkgo.GinkgoConfiguration()
	if fi, err := os.Stdout.Stat(); err == nil && fi.Mode()&os.ModeCharDevice == 0 {
		reporterConfig.NoColor = true // a log file or CI, not a terminal
	}
	if cfg.LabelFilter != "" {
		if suiteConfig.LabelFilter != "" {
			suiteConfig.LabelFilter = "(" + suiteConfig.LabelFilter + ") && (" + cfg.LabelFilter + ")"
		} else {
			suiteConfig.LabelFilter = cfg.LabelFilter
		}
	}
	if cfg.Focus != "" {
		suiteConfig.FocusStrings = append(suiteConfig.FocusStrings, cfg.Focus)
	}
	if cfg.Skip != "" {
		suiteConfig.SkipStrings = append(suiteConfig.SkipStrings, cfg.Skip)
	}
	if cfg.JUnitReport != "" {
		reporterConfig.JUnitReport = cfg.JUnitReport
	}

	switch level {
	case LevelBackend:
		registerBackend(newBackendContext(cfg))
	case LevelService:
		registerService(newServiceContext(cfg))
	case LevelSDK:
		registerSDK(newSDKContext(cfg))
	default:
		panic(fmt.Sprintf("conformance: unknown level %q", level))
	}
	var verdict bool
	ginkgo.ReportAfterSuite("holdfast conformance summary", func(r ginkgo.Report) {
		verdict = judge(os.Stdout, level, cfg, r)
	})
	// Ginkgo fails the run on any failed spec; a spec on the known-failing
	// list is allowed to fail, so the verdict is ours.
	rec := &recordingT{}
	ginkgo.RunSpecs(rec, fmt.Sprintf("holdfast conformance (%s): %s", level, cfg.Name),
		ginkgo.Label(string(level)), suiteConfig, reporterConfig)
	if !verdict {
		t.Fail()
	}
	return verdict
}

// recordingT receives ginkgo's own pass/fail, which judge supersedes.
type recordingT struct{ failed bool }

func (r *recordingT) Fail() { r.failed = true }

// judge writes the readable end-of-run report (counts, then every spec that
// failed, every known failure, and every spec that did not apply, with the
// reason) and decides the run: it passes when every failure is on
// Config.KnownFailing and every entry of that list still names a spec that
// fails, so the list cannot rot.
func judge(w io.Writer, level Level, cfg Config, r ginkgo.Report) bool {
	ok := true
	var passed, failed, known, skipped, filtered int
	var lines []string
	matched := make([]bool, len(cfg.KnownFailing))
	knownIndex := func(text string) int {
		for i, k := range cfg.KnownFailing {
			if k != "" && strings.Contains(text, k) {
				matched[i] = true
				return i
			}
		}
		return -1
	}
	for _, s := range r.SpecReports {
		if s.LeafNodeType != types.NodeTypeIt {
			if s.State.Is(types.SpecStateFailureStates) {
				ok = false
				failed++
				lines = append(lines, fmt.Sprintf("  FAIL  [%s] %s\n%s", s.LeafNodeType, s.FullText(), failureLines(s)))
			}
			continue
		}
		text := s.FullText()
		k := knownIndex(text)
		switch {
		case s.State == types.SpecStatePassed && k >= 0:
			ok = false
			passed++
			lines = append(lines, fmt.Sprintf("  PASS  %s\n        listed as known failing (%q): it passes now, remove it from the list", text, cfg.KnownFailing[k]))
		case s.State == types.SpecStatePassed:
			passed++
		case s.State.Is(types.SpecStateFailureStates) && k >= 0:
			known++
			lines = append(lines, fmt.Sprintf("  XFAIL %s\n%s", text, failureLines(s)))
		case s.State.Is(types.SpecStateFailureStates):
			ok = false
			failed++
			lines = append(lines, fmt.Sprintf("  FAIL  %s\n%s", text, failureLines(s)))
		case s.State == types.SpecStateSkipped && s.Failure.Message != "":
			skipped++
			lines = append(lines, fmt.Sprintf("  N/A   %s\n        %s", text, firstLine(s.Failure.Message)))
		default:
			filtered++
		}
	}
	for i, m := range matched {
		if !m && cfg.KnownFailing[i] != "" {
			ok = false
			lines = append(lines, fmt.Sprintf("  STALE known-failing entry %q names no spec", cfg.KnownFailing[i]))
		}
	}
	fmt.Fprintf(w, "\n=== holdfast conformance (%s) %s: %d passed, %d failed, %d known failing, %d not applicable, %d not selected\n",
		level, cfg.Name, passed, failed, known, skipped, filtered)
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	if ok {
		fmt.Fprintln(w, "=== PASS")
	} else {
		fmt.Fprintln(w, "=== FAIL")
	}
	return ok
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// maxSummaryLine bounds one line of the summary: a failure message may
// carry a server's whole log tail.
const maxSummaryLine = 400

// failureLines is what the summary says about a failed spec, indented: the
// failed assertion's own message on one line with where it failed (gomega's
// "Expected ... to equal ..." or the error, not only its first line), and
// the first line at level ERROR in the spec's log (the plugin's and the
// servers' logs go there), where a plugin's panic or its own error shows.
func failureLines(s types.SpecReport) string {
	msg := oneLine(s.Failure.Message)
	if p := s.Failure.ForwardedPanic; p != "" {
		msg = "panic: " + oneLine(p)
	}
	if loc := s.Failure.Location; loc.FileName != "" {
		msg += fmt.Sprintf(" (%s:%d)", filepath.Base(loc.FileName), loc.LineNumber)
	}
	out := "        " + msg
	if line := firstErrorLine(s.CombinedOutput()); line != "" {
		out += "\n        log: " + oneLine(line)
	}
	return out
}

// oneLine joins s's lines and collapses its white space, up to
// maxSummaryLine bytes.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > maxSummaryLine {
		cut := maxSummaryLine
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + " ..."
	}
	return s
}

// firstErrorLine is the first line of log at level ERROR, as slog's text
// and JSON handlers write it, or "".
func firstErrorLine(log string) string {
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "level=ERROR") || strings.Contains(line, `"level":"ERROR"`) {
			line = strings.TrimSpace(line)
			if rest, ok := strings.CutPrefix(line, "time="); ok { // the text handler's first field
				if _, after, ok := strings.Cut(rest, " "); ok {
					line = after
				}
			}
			return line
		}
	}
	return ""
}
