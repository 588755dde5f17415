package cli

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	holdfast "github.com/holdfast/holdfast/sdk-go"
)

// oneKeyThenCommand is the Args of semaphore and rwlock: KEY -- CMD.
func oneKeyThenCommand(name string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if n := cmd.ArgsLenAtDash(); n != 1 || len(args) <= n {
			return fmt.Errorf(`usage: holdfast %s KEY -- CMD [ARGS...] (one key, then "--", then the command)`, name)
		}
		return nil
	}
}

func newSemaphore(stdout, stderr io.Writer) *cobra.Command {
	var (
		r              lockRun
		limit, permits int
	)
	cmd := &cobra.Command{
		Use:   "semaphore KEY --limit N [--permits P] -- CMD [ARGS...]",
		Short: "run a command while holding permits of the semaphore KEY (at most --limit in use at once)",
		Long: `Semaphore takes --permits (default 1) of the semaphore KEY, whose --limit is
the most permits held at once by everyone, runs CMD while holding them, and
gives them back when CMD exits. It queues behind earlier callers, strictly
in arrival order: a later request for fewer permits does not pass an
earlier one for more. Everything else is as in lock: the watchdog, the
environment (HOLDFAST_FENCING_TOKEN: this lease's fencing token, unique
among every lease of KEY), the signals and the exit status.

A semaphore keeps the limit it was first used with (on etcd, Redis and
PostgreSQL for as long as the key exists; on memory while anyone holds
it): another --limit, or KEY used as a lock, is refused (exit 1, the
server's failed_precondition). The backend must keep semaphores
(holdfast info lists the kinds it keeps).

Exit status: as lock's: CMD's exit status when it ran to the end, 3 not
acquired within --wait (or at once with --no-wait), 75 the lease was lost
and CMD was stopped, 69 server unreachable, 127 CMD could not be started,
1 any other error (a refused --limit included).`,
		Example: `  # at most 3 encoders at once, on any number of machines
  holdfast semaphore jobs/encode --limit 3 -- ./encode.sh

  # a big job takes 2 of the 3 slots
  holdfast semaphore jobs/encode --limit 3 --permits 2 -- ./encode.sh --big`,
		Args: oneKeyThenCommand("semaphore"),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case limit < 1:
				return errors.New("--limit: required, the most permits held at once (1 or more)")
			case permits < 1 || permits > limit:
				return fmt.Errorf("--permits %d: must be between 1 and --limit %d", permits, limit)
			}
			r.builder = func(c *holdfast.Client) holdfast.Lock {
				return c.Semaphore(args[0], limit).Permits(permits)
			}
			return r.start(cmd, args)
		},
	}
	r.addFlags(cmd, stdout, stderr)
	cmd.Flags().IntVar(&limit, "limit", 0, "the semaphore's limit: the most permits held at once (required)")
	cmd.Flags().IntVar(&permits, "permits", 1, "the permits this lease takes, 1 to --limit")
	return cmd
}

func newRWLock(stdout, stderr io.Writer) *cobra.Command {
	var (
		r                 lockRun
		shared, exclusive bool
	)
	cmd := &cobra.Command{
		Use:   "rwlock KEY (--shared | --exclusive) -- CMD [ARGS...]",
		Short: "run a command while holding the read-write lock KEY, shared (a reader) or exclusive (a writer)",
		Long: `Rwlock takes the read-write lock KEY shared (--shared: beside other readers)
or exclusive (--exclusive: nobody else, reader or writer), runs CMD while
holding it, and releases it when CMD exits. Waiters are served strictly in
arrival order: a reader that comes after a waiting writer waits for it, so
writers are never starved, and the readers behind a writer go together
when it is done. Everything else is as in lock: the watchdog, the
environment (HOLDFAST_FENCING_TOKEN: this lease's fencing token), the
signals and the exit status.

KEY used as a lock or a semaphore is refused (exit 1, the server's
failed_precondition). The backend must keep read-write locks (holdfast info
lists the kinds it keeps).

Exit status: as lock's: CMD's exit status when it ran to the end, 3 not
acquired within --wait (or at once with --no-wait), 75 the lease was lost
and CMD was stopped, 69 server unreachable, 127 CMD could not be started,
1 any other error.`,
		Example: `  # many readers at once
  holdfast rwlock config/routes --shared -- ./serve-routes.sh

  # one writer, alone
  holdfast rwlock config/routes --exclusive -- ./rewrite-routes.sh`,
		Args: oneKeyThenCommand("rwlock"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if shared == exclusive {
				return errors.New("rwlock: say --shared (a reader) or --exclusive (a writer)")
			}
			r.builder = func(c *holdfast.Client) holdfast.Lock {
				if shared {
					return c.RWLock(args[0]).Read()
				}
				return c.RWLock(args[0]).Write()
			}
			return r.start(cmd, args)
		},
	}
	r.addFlags(cmd, stdout, stderr)
	cmd.Flags().BoolVar(&shared, "shared", false, "hold the lock shared, beside other readers")
	cmd.Flags().BoolVar(&exclusive, "exclusive", false, "hold the lock alone")
	return cmd
}
