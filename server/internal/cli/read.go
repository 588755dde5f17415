package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	holdfast "github.com/holdfast/holdfast/sdk-go"
)

func newInspect(stdout io.Writer) *cobra.Command {
	var o clientOptions
	cmd := &cobra.Command{
		Use:   "inspect KEY",
		Short: "show who holds KEY: holder, fencing token, time left, waiters",
		Long: `Inspect shows who holds KEY: the holder's label, its fencing token, when the
lease expires (the server's view) and how many callers queue for it on the
server that answers. It never shows the owner token.

Exit status: 0 (held or not), 69 server unreachable, 1 any other error.`,
		Example: `  holdfast inspect jobs/nightly
  holdfast inspect jobs/nightly -o json | jq .state.fencingToken`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.resolve(cmd); err != nil {
				return err
			}
			c, err := o.dial("")
			if err != nil {
				return err
			}
			defer o.close() // after c.Close, which may still release
			defer c.Close()
			st, held, delay, err := c.InspectDelay(cmd.Context(), args[0])
			if err != nil {
				return o.callError(err)
			}
			out := struct {
				Key     string     `json:"key"`
				Held    bool       `json:"held"`
				State   *stateJSON `json:"state,omitempty"`
				Delayed *delayJSON `json:"delayed,omitempty"`
			}{Key: args[0], Held: held, Delayed: delayOf(delay)}
			if held {
				s := stateOf(st)
				out.State = &s
			}
			if o.output == "json" {
				return printJSON(stdout, out)
			}
			if !held && delay != nil {
				return kv(stdout, "key", args[0], "held", false, "lock-delay", out.Delayed.Remaining+" left (its last lease expired)",
					"free at", fmtTime(&out.Delayed.Until))
			}
			if !held {
				return kv(stdout, "key", args[0], "held", false)
			}
			pairs := []any{"key", args[0], "held", true, "holder", orDash(st.Holder),
				"fencing token", st.FencingToken, "expires in", out.State.ExpiresIn,
				"expires at", fmtTime(out.State.ExpiresAt), "waiters", st.Waiters}
			if st.LockDelay > 0 {
				pairs = append(pairs, "lock-delay", st.LockDelay.String()+" (if it expires)")
			}
			if st.Kind != holdfast.KindMutex {
				// The fields above are the holder whose lease ends first.
				pairs = append(pairs, "kind", st.Kind.String(), "permits in use", fmt.Sprintf("%d of %d", st.PermitsInUse, st.Limit))
				for i, h := range out.State.Holders {
					what := fmt.Sprintf("%q, %d permit(s)", h.Holder, h.Permits)
					switch {
					case h.Mode != "":
						what = fmt.Sprintf("%q, %s", h.Holder, h.Mode)
					case h.Value != nil:
						pairs = append(pairs, "leader", fmt.Sprintf("%q, value %q, term %d, expires in %s", h.Holder, *h.Value, h.FencingToken, orDash(h.ExpiresIn)))
						continue
					}
					pairs = append(pairs, fmt.Sprintf("holder %d", i+1), fmt.Sprintf("%s, fencing token %d, expires in %s", what, h.FencingToken, orDash(h.ExpiresIn)))
				}
			}
			return kv(stdout, pairs...)
		},
	}
	addClientFlags(cmd, &o)
	return cmd
}

func newList(stdout io.Writer) *cobra.Command {
	var (
		o     clientOptions
		limit int
	)
	cmd := &cobra.Command{
		Use:   "list [PREFIX]",
		Short: "list held locks whose keys start with PREFIX (all without one)",
		Long: `List shows the held locks whose keys start with PREFIX, in key order: holder,
fencing token, time left and waiters. Without PREFIX it lists every lock.

Exit status: 0, 69 server unreachable, 1 any other error.`,
		Example: `  holdfast list
  holdfast list jobs/ --limit 20
  holdfast list -o json | jq -r '.[].key'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.resolve(cmd); err != nil {
				return err
			}
			prefix := ""
			if len(args) == 1 {
				prefix = args[0]
			}
			c, err := o.dial("")
			if err != nil {
				return err
			}
			defer o.close() // after c.Close, which may still release
			defer c.Close()
			locks := []stateJSON{}
			for st, err := range c.List(cmd.Context(), prefix) {
				if err != nil {
					return o.callError(err)
				}
				locks = append(locks, stateOf(st))
				if limit > 0 && len(locks) >= limit {
					break
				}
			}
			if o.output == "json" {
				return printJSON(stdout, locks)
			}
			rows := make([][]string, len(locks))
			for i, s := range locks {
				rows[i] = []string{s.Key, orDash(s.Holder), strconv.FormatUint(s.FencingToken, 10), orDash(s.ExpiresIn), strconv.Itoa(int(s.Waiters))}
			}
			return table(stdout, []string{"KEY", "HOLDER", "FENCING", "EXPIRES IN", "WAITERS"}, rows)
		},
	}
	addClientFlags(cmd, &o)
	cmd.Flags().IntVar(&limit, "limit", 0, "show at most this many locks (0: all)")
	return cmd
}

func newWatch(stdout io.Writer) *cobra.Command {
	var (
		o      clientOptions
		prefix bool
	)
	cmd := &cobra.Command{
		Use:   "watch [KEY]",
		Short: "stream acquired/released/expired events on KEY (or a prefix, or every key) until Ctrl-C",
		Long: `Watch streams what happens to KEY (with --prefix: to every key starting with
KEY; with no KEY: to every key) until interrupted: acquired, released and
expired events, one line each. The first line says the watch is synced:
every change after it is shown. With -o json each event is one JSON object
on its own line (JSON Lines).

Exit status: 0 when interrupted (Ctrl-C), 69 when the server is unreachable
or ends the stream (watch again), 1 any other error.`,
		Example: `  holdfast watch jobs/nightly
  holdfast watch --prefix jobs/
  holdfast watch -o json | jq -c 'select(.type == "expired")'`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.resolve(cmd); err != nil {
				return err
			}
			key := ""
			if len(args) == 1 {
				key = args[0]
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			c, err := o.dial("")
			if err != nil {
				return err
			}
			defer o.close() // after c.Close, which may still release
			defer c.Close()
			events := c.WatchPrefix(ctx, key)
			if key != "" && !prefix {
				events = c.Watch(ctx, key)
			}
			enc := json.NewEncoder(stdout)
			for ev, err := range events {
				if err != nil {
					return o.callError(err)
				}
				at := time.Unix(0, ev.Stamp.WallTime).UTC()
				if o.output == "json" {
					out := struct {
						Type  string     `json:"type"`
						Time  time.Time  `json:"time"`
						State *stateJSON `json:"state,omitempty"`
					}{Type: ev.Type.String(), Time: at}
					if ev.Type != holdfast.EventSynced {
						s := stateOf(ev.State)
						out.State = &s
					}
					if err := enc.Encode(out); err != nil {
						return err
					}
					continue
				}
				if ev.Type == holdfast.EventSynced {
					fmt.Fprintf(stdout, "%s  synced (every change from here on is shown)\n", at.Format(time.RFC3339Nano))
					continue
				}
				fmt.Fprintf(stdout, "%s  %-8s  %s  fencing=%d holder=%q\n", at.Format(time.RFC3339Nano), ev.Type, printable(ev.State.Key), ev.State.FencingToken, ev.State.Holder)
			}
			return nil // interrupted
		},
	}
	addClientFlags(cmd, &o)
	cmd.Flags().BoolVar(&prefix, "prefix", false, "watch every key starting with KEY")
	return cmd
}

func newInfo(stdout io.Writer) *cobra.Command {
	var o clientOptions
	cmd := &cobra.Command{
		Use:   "info",
		Short: "show the server's version and what its backend promises (shared, durable, fair, TTL range)",
		Long: `Info shows the server's version and its backend's promises: whether the
backend is shared (several servers see the same locks; a memory backend is
not), durable (locks survive a backend restart), fair across servers, its
TTL granularity and range, the kinds of key it keeps (mutex, semaphore,
rwlock, election), and the server's maximum client clock offset.

Exit status: 0, 69 server unreachable, 1 any other error.`,
		Example: `  holdfast info
  holdfast info --server http://lockd.internal:7410 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.resolve(cmd); err != nil {
				return err
			}
			c, err := o.dial("")
			if err != nil {
				return err
			}
			defer o.close() // after c.Close, which may still release
			defer c.Close()
			info, err := c.ServerInfo(cmd.Context())
			if err != nil {
				return o.callError(err)
			}
			b := info.Backend
			kinds := make([]string, len(b.Kinds))
			for i, k := range b.Kinds {
				kinds[i] = k.String()
			}
			if o.output == "json" {
				return printJSON(stdout, map[string]any{
					"server":         o.server,
					"version":        info.Version,
					"maxClockOffset": info.MaxClockOffset.String(),
					"backend": map[string]any{
						"name": b.Name, "version": b.Version, "shared": b.Shared, "durable": b.Durable,
						"fair": b.Fair, "ttlGranularity": b.TTLGranularity.String(),
						"minTtl": b.MinTTL.String(), "maxTtl": b.MaxTTL.String(),
						"kinds": kinds, "maxLimit": b.MaxLimit,
					},
				})
			}
			return kv(stdout,
				"server", o.server,
				"version", info.Version,
				"backend", b.Name+" "+b.Version,
				"shared", b.Shared,
				"durable", b.Durable,
				"fair", b.Fair,
				"ttl granularity", b.TTLGranularity,
				"ttl range", fmt.Sprintf("%s .. %s", b.MinTTL, b.MaxTTL),
				"kinds", strings.Join(kinds, ", "),
				"max clock offset", info.MaxClockOffset,
			)
		},
	}
	addClientFlags(cmd, &o)
	return cmd
}
