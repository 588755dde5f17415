package conformance

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

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
	default:
		panic(fmt.Sprintf("conformance: unknown level %q", level))
	}
	ginkgo.ReportAfterSuite("holdfast conformance summary", func(r ginkgo.Report) {
		printSummary(os.Stdout, level, cfg.Name, r)
	})
	return ginkgo.RunSpecs(t, fmt.Sprintf("holdfast conformance (%s): %s", level, cfg.Name),
		ginkgo.Label(string(level)), suiteConfig, reporterConfig)
}

// printSummary writes the readable end-of-run report: counts, then every
// spec that failed and every spec that did not apply, with the reason.
func printSummary(w *os.File, level Level, name string, r ginkgo.Report) {
	var passed, failed, skipped, filtered int
	var failures, skips []string
	for _, s := range r.SpecReports {
		if s.LeafNodeType != types.NodeTypeIt {
			continue
		}
		text := s.FullText()
		switch {
		case s.State == types.SpecStatePassed:
			passed++
		case s.State.Is(types.SpecStateFailureStates):
			failed++
			failures = append(failures, fmt.Sprintf("  FAIL  %s\n        %s", text, firstLine(s.Failure.Message)))
		case s.State == types.SpecStateSkipped && s.Failure.Message != "":
			skipped++
			skips = append(skips, fmt.Sprintf("  N/A   %s\n        %s", text, firstLine(s.Failure.Message)))
		default:
			filtered++
		}
	}
	fmt.Fprintf(w, "\n=== holdfast conformance (%s) %s: %d passed, %d failed, %d not applicable, %d not selected\n",
		level, name, passed, failed, skipped, filtered)
	for _, l := range failures {
		fmt.Fprintln(w, l)
	}
	for _, l := range skips {
		fmt.Fprintln(w, l)
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}
