// Command holdfast-conformance runs holdfast's conformance suite against a
// backend plugin executable or a running server, the way csi-sanity runs
// CSI's against a driver:
//
//	holdfast-conformance backend --plugin ./holdfast-backend-mine [--plugin-opt k=v ...] [--junit-report FILE]
//	holdfast-conformance service --addr http://127.0.0.1:7410 [--second-addr http://...]
//	holdfast-conformance sdk --runner "node runner.js" [--backend memory] [--backend-opt k=v ...]
//
// The sdk level drives an SDK through its adapter process (the runner
// protocol, conformance/sdkrunner/PROTOCOL.md) against holdfast servers it
// starts itself, so an SDK in any language can be checked.
//
// It prints ginkgo's report and a summary that lists every failed spec and
// every spec that did not apply, with the reason. Select specs with
// --label-filter (labels are the promises: atomic-acquire, owner-token, ttl,
// fencing, stamps, watch, list, get, sharing, durable, watchdog, waiting,
// server-info, bad-input, store-restart, disruptive), --focus and --skip.
// --restart-store CMD gives the backend level a shell command that restarts
// the store behind the plugin, for the store-restart spec
// ($HOLDFAST_CONFORMANCE_PLUGIN_PID is the plugin's PID, for a store that
// lives in the plugin process). --single-instance says the store allows one
// owner at a time. A backend with
// known gaps lists them in a file given to --known-failing: those specs may
// fail, but the run fails when one of them passes (so the list cannot rot).
// Any ginkgo flag can be passed as --ginkgo.NAME. Exit status: 0 when every selected spec
// passed, 1 when one failed, 2 for bad usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/holdfast/holdfast/conformance"
	"github.com/holdfast/holdfast/conformance/sdkrunner"
	"github.com/holdfast/holdfast/harness"
)

func main() { os.Exit(run(os.Args[1:], os.Stderr)) }

const usage = `usage:
  holdfast-conformance backend --plugin PATH [--plugin-opt key=value ...] [--plugin-arg ARG ...] [flags]
  holdfast-conformance service --addr URL [--second-addr URL] [flags]
  holdfast-conformance sdk --runner "CMD ARGS" [--backend NAME|PATH] [--backend-opt key=value ...] [--server PATH] [flags]

flags:
`

// multi collects a repeated flag.
type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func run(args []string, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "backend" && args[0] != "service" && args[0] != "sdk") {
		fmt.Fprint(stderr, usage)
		fmt.Fprintln(stderr, "  (run with a level and -h for its flags)")
		return 2
	}
	level := conformance.Level(args[0])

	// Our flags and ginkgo's live in different flag sets, so they cannot
	// collide: --ginkgo.* goes to ginkgo, everything else is ours.
	var own, ginkgoArgs []string
	for _, a := range args[1:] {
		if strings.HasPrefix(strings.TrimLeft(a, "-"), "ginkgo.") {
			ginkgoArgs = append(ginkgoArgs, a)
		} else {
			own = append(own, a)
		}
	}

	var cfg conformance.Config
	var pluginOpts, pluginArgs multi
	var runner, backendName, serverBin string
	var verbose bool
	var restartStore string
	fs := flag.NewFlagSet("holdfast-conformance "+string(level), flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	switch level {
	case conformance.LevelBackend:
		fs.StringVar(&cfg.Plugin, "plugin", "", "backend plugin executable to test (required)")
		fs.Var(&pluginOpts, "plugin-opt", "plugin option key=value (repeatable)")
		fs.Var(&pluginArgs, "plugin-arg", "extra argument for the plugin (repeatable)")
		fs.DurationVar(&cfg.RestartTimeout, "restart-timeout", 0, "how long the plugin host may take to restart a killed plugin (default 20s)")
		fs.StringVar(&restartStore, "restart-store", "", "shell command that restarts the backend's store (e.g. 'scripts/redis.sh restart DIR'; $"+pluginPIDEnv+" is the plugin's PID); enables the store-restart spec")
	case conformance.LevelSDK:
		fs.StringVar(&runner, "runner", "", "command line of the SDK adapter to drive, e.g. \"node runner.js\" (required; quotes group words)")
		fs.StringVar(&cfg.RunnerDir, "runner-dir", "", "working directory of the adapter")
		fs.StringVar(&backendName, "backend", "memory", "backend of the servers the suite starts (a name or a plugin path)")
		fs.Var(&pluginOpts, "backend-opt", "backend option key=value for those servers (repeatable)")
		fs.StringVar(&serverBin, "server", "", "holdfast server binary (default: $HOLDFAST_BIN_DIR/holdfast, else built from this source tree)")
		fs.DurationVar(&cfg.WakeBound, "wake-bound", 0, "how soon after an unlock a waiter must hold the lock (default 50ms)")
	default:
		fs.StringVar(&cfg.Addr, "addr", "", "base URL of the running server to test (required)")
		fs.StringVar(&cfg.SecondAddr, "second-addr", "", "optional second server on the same backend configuration, for the sharing specs")
		fs.DurationVar(&cfg.WakeBound, "wake-bound", 0, "how soon after a release a waiter must hold the lock (default 50ms)")
	}
	fs.StringVar(&cfg.Name, "name", "", "name of the run in the report")
	fs.BoolVar(&cfg.SingleInstance, "single-instance", false, "the store allows one owner at a time (a locked file): never run two plugin instances or servers on it at once, and check that a second one is refused")
	fs.StringVar(&cfg.JUnitReport, "junit-report", "", "write a JUnit XML report to this file")
	fs.StringVar(&cfg.LabelFilter, "label-filter", "", "run only specs whose labels match (e.g. 'fencing || ttl', '!disruptive')")
	fs.StringVar(&cfg.Focus, "focus", "", "run only specs whose text matches this regular expression")
	fs.StringVar(&cfg.Skip, "skip", "", "skip specs whose text matches this regular expression")
	fs.DurationVar(&cfg.TTL, "ttl", 0, "short lease used by the timing specs (default 300ms, within the backend's bounds)")
	fs.DurationVar(&cfg.Slack, "slack", 0, "allowed lateness of expiry beyond TTL + granularity (default 250ms)")
	fs.IntVar(&cfg.Racers, "racers", 0, "concurrent acquirers of one key (default 32)")
	var knownFile string
	fs.StringVar(&knownFile, "known-failing", "", "file listing specs expected to fail, one per line (a substring of the spec text; # comments): they do not fail the run, but passing does")
	fs.BoolVar(&verbose, "v", false, "verbose: report every spec as it runs")
	if err := fs.Parse(own); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "unexpected arguments: %q\n", fs.Args())
		return 2
	}
	if level == conformance.LevelBackend && cfg.Plugin == "" {
		fmt.Fprintln(stderr, "--plugin is required")
		return 2
	}
	if restartStore != "" {
		cfg.RestartStore = shellHook(restartStore, stderr)
	}
	if level == conformance.LevelService && cfg.Addr == "" {
		fmt.Fprintln(stderr, "--addr is required")
		return 2
	}
	if level == conformance.LevelSDK {
		words, err := sdkrunner.SplitCommandLine(runner)
		if err != nil || len(words) == 0 {
			if err == nil {
				err = errors.New("empty")
			}
			fmt.Fprintf(stderr, "--runner is required: the adapter's command line (%v)\n", err)
			return 2
		}
		cfg.Runner = words
	}
	cfg.PluginArgs = pluginArgs
	if len(pluginOpts) > 0 {
		cfg.PluginOptions = map[string]string{}
		for _, kv := range pluginOpts {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				name := "--plugin-opt"
				if level == conformance.LevelSDK {
					name = "--backend-opt"
				}
				fmt.Fprintf(stderr, "%s %q: want key=value\n", name, kv)
				return 2
			}
			cfg.PluginOptions[k] = v
		}
	}
	if level == conformance.LevelSDK {
		cfg.Serve = &harness.Options{Binary: serverBin, Backend: backendName, BackendOptions: cfg.PluginOptions}
		cfg.PluginOptions = nil
	}
	if knownFile != "" {
		b, err := os.ReadFile(knownFile)
		if err != nil {
			fmt.Fprintf(stderr, "--known-failing: %v\n", err)
			return 2
		}
		cfg.KnownFailing = conformance.ParseKnownFailing(b)
	}
	// ginkgo registers its flags on the process's flag.CommandLine.
	if err := flag.CommandLine.Parse(ginkgoArgs); err != nil {
		return 2
	}
	if verbose {
		_ = flag.Set("ginkgo.v", "true")
	}

	t := &reporter{}
	if !conformance.Run(t, level, cfg) || t.failed {
		return 1
	}
	return 0
}

// reporter is the testing.T stand-in ginkgo reports the outcome to.
type reporter struct{ failed bool }

func (r *reporter) Fail() { r.failed = true }

// pluginPIDEnv gives the --restart-store command the plugin's process id.
const pluginPIDEnv = "HOLDFAST_CONFORMANCE_PLUGIN_PID"

// shellHook runs command with sh -c, its output on stderr, with the plugin's
// PID in $HOLDFAST_CONFORMANCE_PLUGIN_PID, and fails with its exit status.
func shellHook(command string, stderr io.Writer) func(context.Context) error {
	return func(ctx context.Context) error {
		cmd := exec.CommandContext(ctx, "sh", "-c", command)
		cmd.Env = append(os.Environ(), pluginPIDEnv+"="+strconv.Itoa(conformance.PluginPID(ctx)))
		cmd.Stdout, cmd.Stderr = stderr, stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%q: %w", command, err)
		}
		return nil
	}
}
