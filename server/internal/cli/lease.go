package cli

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"

	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// The lease commands (acquire, release, extend) speak the API one call at a
// time: the lease outlives the command, nobody renews it, and the caller
// keeps its owner token. `holdfast lock` is the one that holds a lease for
// as long as a command runs.

func defaultHolder() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return fmt.Sprintf("%s:%d", host, os.Getpid())
}

// keysAndToken splits release's and extend's arguments: KEY... OWNER_TOKEN.
func keysAndToken(args []string) ([]string, string) { return args[:len(args)-1], args[len(args)-1] }

// keyField is how a request names keys: key for one, keys for several.
func keyField(keys []string) (key string, many []string) {
	if len(keys) == 1 {
		return keys[0], nil
	}
	return "", keys
}

func newAcquire(stdout io.Writer) *cobra.Command {
	var (
		o         clientOptions
		ttl       time.Duration
		wait      time.Duration
		holder    string
		lockDelay time.Duration
	)
	cmd := &cobra.Command{
		Use:   "acquire KEY...",
		Short: "take a lease on KEY (or on several keys together) once and print it (owner token included); nobody renews it",
		Long: `Acquire takes a lease on KEY and prints it, including the owner token that
release and extend need. Nobody renews the lease: it ends after --ttl unless
you extend it. To run a command under a lock that is renewed while it runs,
use "holdfast lock".

Several keys are taken together, all or none, under one owner token, each
with its own fencing token (the backend needs CAPABILITY_MULTI_KEY).

With --wait the server queues the request (first come, first served) for at
most that long; without it, acquire tries once.

Exit status: 0 acquired, 3 held by someone else, 69 server unreachable,
1 any other error.`,
		Example: `  # take a 5-minute lease and keep the owner token
  tok=$(holdfast acquire jobs/nightly --ttl 5m -o json | jq -r .lease.ownerToken)
  holdfast extend jobs/nightly "$tok" --ttl 5m
  holdfast release jobs/nightly "$tok"

  # queue for up to a minute
  holdfast acquire jobs/nightly --wait 1m

  # two keys together; release them together
  tok=$(holdfast acquire accounts/1 accounts/2 -o json | jq -r .lease.ownerToken)
  holdfast release accounts/1 accounts/2 "$tok"`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.resolve(cmd); err != nil {
				return err
			}
			rpc, closeIdle := o.rawClient()
			defer closeIdle()
			if holder == "" {
				holder = defaultHolder()
			}
			req := &lockv1.AcquireRequest{Ttl: durationpb.New(ttl), Holder: holder}
			if len(args) == 1 {
				req.Key = args[0]
			} else {
				for _, k := range args {
					req.Claims = append(req.Claims, &lockv1.Claim{Key: k})
				}
			}
			if wait > 0 {
				req.Wait = durationpb.New(wait)
			}
			if lockDelay > 0 {
				req.LockDelay = durationpb.New(lockDelay)
			}
			resp, err := rpc.Acquire(cmd.Context(), req)
			if err != nil {
				return o.callError(err)
			}
			out := struct {
				Acquired bool       `json:"acquired"`
				Lease    *leaseJSON `json:"lease,omitempty"`
				Current  *stateJSON `json:"current,omitempty"`
				Delayed  *delayJSON `json:"delayed,omitempty"`
			}{resp.GetAcquired(), leaseOf(resp.GetLease()), stateOfProto(resp.GetCurrent()), delayOfProto(resp.GetDelayed())}
			if o.output == "json" {
				if err := printJSON(stdout, out); err != nil {
					return err
				}
			} else if out.Acquired {
				l := out.Lease
				pairs := []any{"acquired", "true"}
				if len(l.Keys) == 0 {
					pairs = append(pairs, "key", l.Key, "fencing token", l.FencingToken)
				}
				for _, k := range l.Keys {
					pairs = append(pairs, "key", k.Key+" (fencing token "+strconv.FormatUint(k.FencingToken, 10)+")")
				}
				pairs = append(pairs, "ttl", l.TTL, "expires at", fmtTime(l.ExpiresAt), "owner token", l.OwnerToken)
				if err := kv(stdout, pairs...); err != nil {
					return err
				}
			} else {
				pairs := []any{"acquired", "false", "key", strings.Join(args, " ")}
				if c := out.Current; c != nil {
					pairs = append(pairs, "held", c.Key, "held by", orDash(c.Holder), "fencing token", c.FencingToken, "expires in", orDash(c.ExpiresIn))
				}
				if d := out.Delayed; d != nil {
					pairs = append(pairs, "lock-delay", d.Key+": "+d.Remaining+" left (its last lease expired)")
				}
				if err := kv(stdout, pairs...); err != nil {
					return err
				}
			}
			if !out.Acquired {
				return &exitError{code: ExitNotAcquired}
			}
			return nil
		},
	}
	addClientFlags(cmd, &o)
	cmd.Flags().DurationVar(&ttl, "ttl", 30*time.Second, "lease length")
	cmd.Flags().DurationVar(&wait, "wait", 0, "queue on the server for at most this long (0: try once)")
	cmd.Flags().StringVar(&holder, "holder", "", "label others see for this lease (default HOSTNAME:PID)")
	cmd.Flags().DurationVar(&lockDelay, "lock-delay", 0, "if the lease expires (not when released), its keys refuse new holders for this long")
	return cmd
}

func fmtTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format(time.RFC3339Nano)
}

func newRelease(stdout io.Writer) *cobra.Command {
	var o clientOptions
	cmd := &cobra.Command{
		Use:   "release KEY... OWNER_TOKEN",
		Short: "give up a lease taken with acquire",
		Long: `Release gives up the lease on KEY held by OWNER_TOKEN (as printed by
acquire). A token that no longer holds the lock (it expired, or was released)
changes nothing: it can never release someone else's lock. Name every key of
a multi-key lease: they are released together, or none is.

Exit status: 0 released, 3 the token no longer held the lock, 69 server
unreachable, 1 any other error.`,
		Example: `  holdfast release jobs/nightly "$tok"
  holdfast release accounts/1 accounts/2 "$tok"`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.resolve(cmd); err != nil {
				return err
			}
			rpc, closeIdle := o.rawClient()
			defer closeIdle()
			keys, token := keysAndToken(args)
			key, many := keyField(keys)
			resp, err := rpc.Release(cmd.Context(), &lockv1.ReleaseRequest{Key: key, Keys: many, OwnerToken: token})
			if err != nil {
				return o.callError(err)
			}
			out := struct {
				Released bool   `json:"released"`
				Key      string `json:"key"`
			}{resp.GetReleased(), strings.Join(keys, " ")}
			if o.output == "json" {
				err = printJSON(stdout, out)
			} else {
				err = kv(stdout, "released", out.Released, "key", out.Key)
			}
			if err != nil {
				return err
			}
			if !out.Released {
				return &exitError{code: ExitNotAcquired, err: fmt.Errorf("%s: the owner token does not hold the lock (expired or released)", out.Key)}
			}
			return nil
		},
	}
	addClientFlags(cmd, &o)
	return cmd
}

func newExtend(stdout io.Writer) *cobra.Command {
	var (
		o   clientOptions
		ttl time.Duration
	)
	cmd := &cobra.Command{
		Use:   "extend KEY... OWNER_TOKEN",
		Short: "renew a lease taken with acquire for --ttl from now",
		Long: `Extend renews the lease on KEY held by OWNER_TOKEN for --ttl from now. A
token that no longer holds the lock is refused (extended=false): the lease
is lost, and someone else may hold the lock. Name every key of a multi-key
lease: they are renewed together, or none is.

Exit status: 0 extended, 3 the lease was lost, 69 server unreachable, 1 any
other error.`,
		Example: `  holdfast extend jobs/nightly "$tok" --ttl 5m`,
		Args:    cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.resolve(cmd); err != nil {
				return err
			}
			rpc, closeIdle := o.rawClient()
			defer closeIdle()
			keys, token := keysAndToken(args)
			key, many := keyField(keys)
			resp, err := rpc.Extend(cmd.Context(), &lockv1.ExtendRequest{Key: key, Keys: many, OwnerToken: token, Ttl: durationpb.New(ttl)})
			if err != nil {
				return o.callError(err)
			}
			out := struct {
				Extended bool       `json:"extended"`
				Key      string     `json:"key"`
				Lease    *leaseJSON `json:"lease,omitempty"`
			}{resp.GetExtended(), strings.Join(keys, " "), leaseOf(resp.GetLease())}
			if o.output == "json" {
				err = printJSON(stdout, out)
			} else if out.Extended && len(out.Lease.Keys) > 0 {
				err = kv(stdout, "extended", true, "key", out.Key, "ttl", out.Lease.TTL, "expires at", fmtTime(out.Lease.ExpiresAt))
			} else if out.Extended {
				err = kv(stdout, "extended", true, "key", out.Key, "fencing token", out.Lease.FencingToken,
					"ttl", out.Lease.TTL, "expires at", fmtTime(out.Lease.ExpiresAt))
			} else {
				err = kv(stdout, "extended", false, "key", out.Key)
			}
			if err != nil {
				return err
			}
			if !out.Extended {
				return &exitError{code: ExitNotAcquired, err: fmt.Errorf("%s: lease lost: the owner token no longer holds the lock", out.Key)}
			}
			return nil
		},
	}
	addClientFlags(cmd, &o)
	cmd.Flags().DurationVar(&ttl, "ttl", 30*time.Second, "new lease length, from now")
	return cmd
}
