package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/holdfast/holdfast/proto/hlc"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	holdfast "github.com/holdfast/holdfast/sdk-go"
)

// leaderJSON is an election's leader as `observe -o json` prints it.
type leaderJSON struct {
	Key       string     `json:"key"`
	Term      uint64     `json:"term,string"`
	Holder    string     `json:"holder"`
	Value     string     `json:"value"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	Stamp     stampJSON  `json:"stamp"`
}

func leaderOf(l *lockv1.Leader) *leaderJSON {
	if l == nil {
		return nil
	}
	j := &leaderJSON{Key: l.GetKey(), Term: l.GetTerm(), Holder: l.GetHolder(), Value: l.GetValue(), Stamp: stampOf(hlc.FromProto(l.GetStamp()))}
	if l.GetExpiresAt() != nil {
		t := l.GetExpiresAt().AsTime()
		j.ExpiresAt = &t
	}
	return j
}

func newElect(stdout, stderr io.Writer) *cobra.Command {
	var (
		r     lockRun
		value string
	)
	cmd := &cobra.Command{
		Use:   "elect KEY [--value V] -- CMD [ARGS...]",
		Short: "campaign for the leadership of the election KEY and run a command while leader",
		Long: `Elect campaigns for the leadership of the election KEY with --value (what
observers are told: an address, a name; up to 4096 bytes of UTF-8),
queueing behind earlier campaigners in arrival order, runs CMD while it
leads, and resigns when CMD exits. A watchdog renews the leadership at
about a third of --ttl while CMD runs.

CMD gets the leadership's term in HOLDFAST_TERM (also in
HOLDFAST_FENCING_TOKEN: the term is the lease's fencing token, strictly
increasing over every leader of KEY) and the key in HOLDFAST_ELECTION_KEY.
Pass the term to whatever CMD writes to, and have it refuse terms older
than the last one it saw: a leader can lose its leadership (a pause or
partition longer than --ttl) and then another leads.

If the leadership is lost while CMD runs, CMD's process group gets
SIGTERM, then SIGKILL after --grace, and elect exits with 75. Signals are
passed on as in lock. holdfast observe KEY follows the leader from
anywhere.

KEY used as a lock, a semaphore or an rwlock is refused (exit 1, the
server's failed_precondition). The backend must keep elections (holdfast
info lists the kinds it keeps).

Exit status: CMD's exit status when it ran to the end, 3 not the leader
within --wait (or at once with --no-wait), 75 the leadership was lost and
CMD was stopped, 69 server unreachable, 127 CMD could not be started, 1
any other error.`,
		Example: `  # one scheduler leads at a time; the others wait to take over
  holdfast elect services/scheduler --value "$(hostname):8080" -- ./scheduler

  # the term fences the leader's writes
  holdfast elect services/scheduler -- sh -c './scheduler --term "$HOLDFAST_TERM"'`,
		Args: oneKeyThenCommand("elect"),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			r.campaign = func(ctx context.Context, c *holdfast.Client, once bool) (*holdfast.Guard, error) {
				e := c.Election(key).TTL(r.ttl)
				switch {
				case once:
					e = e.Wait(0)
				case r.wait > 0:
					e = e.Wait(r.wait)
				}
				lead, err := e.Campaign(ctx, value)
				if err != nil {
					return nil, err
				}
				return lead.Guard, nil
			}
			return r.start(cmd, args)
		},
	}
	r.addFlags(cmd, stdout, stderr)
	cmd.Flags().StringVar(&value, "value", "", "the leader's value observers see (up to 4096 bytes of UTF-8)")
	return cmd
}

func newObserve(stdout io.Writer) *cobra.Command {
	var o clientOptions
	cmd := &cobra.Command{
		Use:   "observe KEY",
		Short: "stream the leader of the election KEY (term, holder, value) until Ctrl-C",
		Long: `Observe streams the leader of the election KEY until interrupted, one line
per message: first the leader of now (or "no leader"), then each change: a
new leader, a new value it proclaimed, no leader (it resigned, or its lease
ran out). Two lines in a row never say the same thing and a term never
goes back. With -o json each message is one JSON object on its own line
(JSON Lines); "leader" is absent when nobody leads.

KEY held as a lock, a semaphore or an rwlock is refused (exit 1, the
server's failed_precondition). The backend must keep elections (holdfast
info lists the kinds it keeps).

Exit status: 0 when interrupted (Ctrl-C), 69 when the server is unreachable
or ends the stream (observe again), 1 any other error.`,
		Example: `  holdfast observe services/scheduler
  holdfast observe services/scheduler -o json | jq -r '.leader.value // "none"'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.resolve(cmd); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			rpc, closeRPC := o.rawClient()
			defer closeRPC()
			stream, err := rpc.Observe(ctx, &lockv1.ObserveRequest{Key: args[0]})
			if err != nil {
				return o.callError(err)
			}
			defer stream.Close()
			enc := json.NewEncoder(stdout)
			for stream.Receive() {
				msg := stream.Msg()
				at := time.Unix(0, msg.GetServerStamp().GetWallTimeNs()).UTC()
				l := msg.GetLeader()
				if o.output == "json" {
					out := struct {
						Time   time.Time   `json:"time"`
						Leader *leaderJSON `json:"leader,omitempty"`
					}{Time: at, Leader: leaderOf(l)}
					if err := enc.Encode(out); err != nil {
						return err
					}
					continue
				}
				if l == nil {
					fmt.Fprintf(stdout, "%s  no leader\n", at.Format(time.RFC3339Nano))
					continue
				}
				fmt.Fprintf(stdout, "%s  leader  term=%d holder=%q value=%q\n", at.Format(time.RFC3339Nano), l.GetTerm(), l.GetHolder(), l.GetValue())
			}
			if err := stream.Err(); err != nil && ctx.Err() == nil {
				return o.callError(err)
			}
			return nil // interrupted
		},
	}
	addClientFlags(cmd, &o)
	return cmd
}
