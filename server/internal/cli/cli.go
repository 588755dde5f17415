// Package cli is the holdfast command line: `holdfast serve`, `holdfast
// version`, the client commands (`holdfast lock|acquire|release|extend|
// inspect|list|watch|info|health`, which talk to a server through sdk-go), and the hidden `holdfast backend memory`, which runs the
// embedded memory backend as a plugin process (so one binary serves the
// default with no other file).
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/holdfast/holdfast/core/backend/backendserver"
	"github.com/holdfast/holdfast/plugins/memory"
	"github.com/holdfast/holdfast/server/internal/tracing"
)

// Main runs the command line with args (without the program name) and
// returns the process exit code.
func Main(ctx context.Context, version string, args []string, stdout, stderr io.Writer) int {
	root := newRoot(ctx, version, stdout, stderr)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		var ee *exitError
		if !errors.As(err, &ee) || ee.err != nil {
			fmt.Fprintf(stderr, "holdfast: %s\n", escapeControls(err.Error()))
		}
		return exitCode(err)
	}
	return 0
}

func newRoot(ctx context.Context, version string, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "holdfast",
		Short: "holdfast is a distributed lock service (leases with fencing tokens)",
		Long: `holdfast is a distributed lock service: leases with fencing tokens, served
over Connect, gRPC and gRPC-Web, on pluggable backends (memory, etcd, Redis,
PostgreSQL).

"holdfast serve" runs the server. The other commands are its clients: they
talk to --server (default http://127.0.0.1:7410, or HOLDFAST_SERVER) and
print tables, or JSON with -o json.

A lock is a lease, not a mutex: a holder that stops renewing (crash, pause,
partition) loses it after its TTL, and someone else may run. Keep TTLs well
above the work's pauses, and pass the fencing token to what you protect.`,
		Example: `  holdfast serve                          # a server on 127.0.0.1:7410 (memory backend)
  holdfast lock demo -- sleep 5           # run a command under the lock
  holdfast list                           # who holds what
  holdfast watch --prefix jobs/           # follow acquire/release/expire events
  holdfast info                           # the backend's promises (shared? durable?)
  source <(holdfast completion bash)      # shell completion`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetContext(ctx)
	root.AddCommand(newServe(version, stdout, stderr), newVersion(version, stdout), newBackend())
	// The client commands (client.go): they talk to a server.
	root.AddCommand(newLock(stdout, stderr), newSemaphore(stdout, stderr), newRWLock(stdout, stderr), newElect(stdout, stderr), newAcquire(stdout), newRelease(stdout), newExtend(stdout),
		newInspect(stdout), newList(stdout), newWatch(stdout), newObserve(stdout), newInfo(stdout), newHealth(stdout))
	return root
}

func newVersion(version string, stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print the version",
		Args:  cobra.NoArgs,
		Run:   func(*cobra.Command, []string) { fmt.Fprintln(stdout, version) },
	}
}

// newBackend is the hidden `holdfast backend memory`: the plugin process that
// `holdfast serve` starts from its own executable.
func newBackend() *cobra.Command {
	cmd := &cobra.Command{
		Use:    "backend",
		Short:  "run an embedded backend as a plugin process (started by holdfast serve)",
		Hidden: true,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "memory",
		Short: "the in-memory backend",
		Args:  cobra.NoArgs,
		Run: func(*cobra.Command, []string) {
			// Spans of its own only when the host traces (it says so in
			// the environment); stdout is the handshake, so a tracing
			// set-up error leaves tracing off rather than printing.
			tr, err := tracing.Plugin(context.Background(), "memory", "")
			if err != nil {
				tr = tracing.Off()
			}
			backendserver.Serve(memory.Open, // does not return
				backendserver.WithGRPCServerOptions(tr.ServerOptions()...),
				backendserver.WithOnExit(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					defer cancel()
					_ = tr.Shutdown(ctx)
				}))
			os.Exit(0)
		},
	})
	return cmd
}
