package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/holdfast/holdfast/proto/hlc"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
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
