// Package cli is the holdfast command line: `holdfast serve`, `holdfast
// version`, and the hidden `holdfast backend memory`, which runs the
// embedded memory backend as a plugin process (so one binary serves the
// default with no other file).
package cli

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/plugins/memory"
)

// Main runs the command line with args (without the program name) and
// returns the process exit code.
func Main(ctx context.Context, version string, args []string, stdout, stderr io.Writer) int {
	root := newRoot(ctx, version, stdout, stderr)
	root.SetArgs(args)
	if err := root.Execute(); err != nil {
		fmt.Fprintf(stderr, "holdfast: %v\n", err)
		return 1
	}
	return 0
}

func newRoot(ctx context.Context, version string, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "holdfast",
		Short:         "holdfast is a distributed lock service (leases with fencing tokens)",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetContext(ctx)
	root.AddCommand(newServe(version, stdout, stderr), newVersion(version, stdout), newBackend())
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
			backend.Serve(memory.Open) // does not return
			os.Exit(0)
		},
	})
	return cmd
}
