package conformance

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/holdfast/holdfast/harness"
)

// Config is the one description of what to test and how, filled either by a
// Go test (RunBackend, RunService) or by the holdfast-conformance command.
// The backend level reads the Plugin fields; the service level reads Addr or
// Serve. Zero values mean the defaults documented on each field.
type Config struct {
	// Name labels the run in the report; empty means the plugin's base name
	// or the server address.
	Name string

	// --- backend level ---

	// Plugin is the backend executable to drive through the plugin host. A
	// bare name without a path separator that is not an existing file names
	// an in-tree backend: "memory" means holdfast-backend-memory from
	// $HOLDFAST_BIN_DIR, else built from this source tree.
	Plugin string
	// PluginArgs are extra command-line arguments for the plugin.
	PluginArgs []string
	// SingleInstance says the backend's store allows one owner at a time: a
	// file the plugin locks, an embedded database. The suite then never runs
	// two plugin instances, or two servers, on it at once: the specs that
	// would (a second plugin instance or server on the same store) check
	// instead that a second owner is refused while the first runs, and the
	// specs that start servers of their own (restarts, kill -9 of the
	// plugin) stop the server under test first and start it again after.
	// A single-instance store cannot be shared: the run fails if the
	// backend declares shared=true.
	SingleInstance bool
	// PluginOptions reach the plugin's open function (the plugin host passes
	// them in HOLDFAST_BACKEND_OPTIONS), e.g. {"endpoints": "127.0.0.1:2379"}.
	PluginOptions map[string]string

	// --- service level ---

	// Addr is the base URL of a running holdfast server
	// ("http://127.0.0.1:7410"). When empty, Serve must be set.
	Addr string
	// SecondAddr is optional: another server started with the same backend
	// configuration. The sharing specs use it and are skipped without it.
	SecondAddr string
	// Serve makes the suite start its servers itself (two, with the same
	// options) through the harness, instead of using Addr and SecondAddr.
	// Specs that pause or restart a server need this and are skipped without
	// it.
	Serve *harness.Options

	// --- sdk level ---

	// Runner is the command line of an SDK adapter process (the runner
	// protocol, sdkrunner/PROTOCOL.md), e.g. {"node", "main.js"}. The SDK
	// level drives it against servers it starts from Serve.
	Runner []string
	// RunnerDir is the adapter's working directory; empty means the
	// current one.
	RunnerDir string

	// --- timing ---

	// TTL is the short lease the timing specs use; 0 means 300ms, raised to
	// the backend's min TTL (and to 3x its TTL granularity) when those are
	// larger.
	TTL time.Duration
	// Slack is what the TTL specs allow beyond TTL + the backend's TTL
	// granularity before a lock must be free again; 0 means 250ms.
	Slack time.Duration
	// WakeBound is how soon after a release a queued waiter must hold the
	// lock (service level), on top of two uncontended acquire+release round
	// trips measured on the same server just before; 0 means 50ms.
	WakeBound time.Duration
	// Racers is how many acquirers race for one key; 0 means 32.
	Racers int
	// RestartTimeout bounds how long the plugin host may take to restart a
	// killed plugin; 0 means 20s.
	RestartTimeout time.Duration
	// RestartStore, when set, restarts the store behind the plugin (the
	// Redis or PostgreSQL server, the etcd cluster; for a store that lives in
	// the plugin process, that process) and returns once the restart has
	// been done, or with an error. The "store restart" spec calls it while a
	// lock is held: fencing tokens must keep increasing, and a durable
	// backend must keep the lock. Calls may answer ErrUnavailable until the
	// backend is back (within RestartTimeout). Nil skips that spec.
	// PluginPID(ctx) is the plugin instance's process id, for a store that
	// lives in the plugin process (the command gives it to --restart-store
	// as $HOLDFAST_CONFORMANCE_PLUGIN_PID).
	RestartStore func(ctx context.Context) error

	// --- report ---

	// JUnitReport, when set, is where a JUnit XML report is written.
	JUnitReport string
	// LabelFilter selects specs by label (ginkgo's label filter language,
	// e.g. "fencing || stamps", "!kill"). Empty runs every spec, unless the
	// -ginkgo.label-filter flag says otherwise.
	LabelFilter string
	// Focus and Skip select specs by a regular expression on their text.
	Focus, Skip string
	// KnownFailing lists specs (each entry a substring of the spec's full
	// text, as the report prints it) that are expected to fail: their
	// failure does not fail the run, but their passing does, and so does an
	// entry that names no spec, so the list cannot rot.
	KnownFailing []string
}

func (c Config) withDefaults() Config {
	if c.TTL == 0 {
		c.TTL = 300 * time.Millisecond
	}
	if c.Slack == 0 {
		c.Slack = 250 * time.Millisecond
	}
	if c.WakeBound == 0 {
		c.WakeBound = 50 * time.Millisecond
	}
	if c.Racers == 0 {
		c.Racers = 32
	}
	if c.RestartTimeout == 0 {
		c.RestartTimeout = 20 * time.Second
	}
	if c.Name == "" {
		switch {
		case c.Plugin != "":
			c.Name = filepath.Base(c.Plugin)
		case len(c.Runner) > 0:
			c.Name = filepath.Base(c.Runner[0])
			if c.Serve != nil && c.Serve.Backend != "" {
				c.Name += " on " + filepath.Base(c.Serve.Backend)
			}
		case c.Serve != nil && c.Serve.Backend != "":
			c.Name = "server on " + c.Serve.Backend
		case c.Addr != "":
			c.Name = c.Addr
		}
	}
	return c
}

// isInTreeName reports whether plugin names an in-tree backend rather than a
// path.
func isInTreeName(plugin string) bool {
	if strings.ContainsRune(plugin, os.PathSeparator) {
		return false
	}
	_, err := os.Stat(plugin)
	return err != nil
}

type pluginPIDKey struct{}

// PluginPID is the process id of the plugin instance under test, in the
// context the suite passes to Config.RestartStore, and 0 in any other. A
// store that lives in the plugin process restarts by killing it: the plugin
// host starts a new one.
func PluginPID(ctx context.Context) int {
	pid, _ := ctx.Value(pluginPIDKey{}).(int)
	return pid
}

func withPluginPID(ctx context.Context, pid int) context.Context {
	return context.WithValue(ctx, pluginPIDKey{}, pid)
}

// KillPlugin is a Config.RestartStore for a store that lives in the plugin
// process (or that the plugin process owns, as a locked file): it sends
// SIGKILL to the plugin instance under test and returns once the process is
// gone, so the suite's next call reaches the instance the plugin host starts
// instead.
func KillPlugin(ctx context.Context) error {
	pid := PluginPID(ctx)
	if pid <= 0 {
		return errors.New("conformance: KillPlugin: no plugin process in this context (it is Config.RestartStore's)")
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("conformance: kill plugin %d: %w", pid, err)
	}
	// Until the host has reaped it: a zombie still answers signal 0.
	for syscall.Kill(pid, 0) == nil {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// ParseKnownFailing reads a known-failing list (Config.KnownFailing): one
// substring of a spec's text per line; blank lines and lines starting with
// # are skipped.
func ParseKnownFailing(b []byte) []string {
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	return out
}
