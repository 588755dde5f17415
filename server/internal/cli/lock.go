package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	holdfast "github.com/holdfast/holdfast/sdk-go"
)

// releaseTimeout bounds the release after the command ends; an unreachable
// server lets the lease lapse at its TTL instead.
const releaseTimeout = 5 * time.Second

func newLock(stdout, stderr io.Writer) *cobra.Command {
	var (
		r         lockRun
		lockDelay time.Duration
	)
	cmd := &cobra.Command{
		Use:   "lock KEY... -- CMD [ARGS...]",
		Short: "run a command while holding the lock on KEY, or on several keys together (renewed while it runs)",
		Long: `Lock takes the lock on KEY (queueing behind earlier callers), runs CMD while
holding it, and releases it when CMD exits. A watchdog renews the lease at
about a third of --ttl while CMD runs.

Several keys are taken together, all or none, as one lease (the backend
needs CAPABILITY_MULTI_KEY). Waiters for overlapping sets of keys are served
in arrival order and never deadlock, whatever order the keys are named in.

CMD gets the lease's fencing token in HOLDFAST_FENCING_TOKEN and the key in
HOLDFAST_LOCK_KEY. With several keys it gets HOLDFAST_LOCK_KEYS, the number
of keys, and for each key i (from 0, in the order given) HOLDFAST_LOCK_KEY_i
and its fencing token HOLDFAST_FENCING_TOKEN_i. Pass the token to whatever
CMD writes to, and have it refuse tokens older than the last one it saw: a
lease can be lost (a pause or partition longer than --ttl) and then someone
else holds the lock. --lock-delay keeps the keys from the next holder for a
while after such a loss, so that CMD's writes in flight drain first.

If the lease is lost while CMD runs, CMD's process group gets SIGTERM, then
SIGKILL after --grace, and lock exits with 75. SIGINT, SIGTERM and SIGHUP
sent to holdfast are passed on to CMD (which runs in its own process
group, so it should not read from the terminal).

Exit status: CMD's exit status when it ran to the end (128+N when signal N
ended it), 3 not acquired within --wait (or at once with --no-wait), 75 the
lease was lost and CMD was stopped, 69 server unreachable, 127 CMD could
not be started, 1 any other error.`,
		Example: `  # run a nightly job on one machine at a time; others queue behind it
  holdfast lock jobs/nightly -- ./nightly.sh

  # give up after a minute of waiting; renew a 10s lease while it runs
  holdfast lock jobs/nightly --wait 1m --ttl 10s -- ./nightly.sh

  # skip the run when someone else holds the lock
  holdfast lock jobs/nightly --no-wait -- ./nightly.sh || [ $? -eq 3 ]

  # pass the fencing token on to the protected resource
  holdfast lock db/migrate -- sh -c 'migrate --fencing-token "$HOLDFAST_FENCING_TOKEN"'

  # move money between two accounts, holding both
  holdfast lock accounts/1 accounts/2 -- ./transfer.sh`,
		Args: func(cmd *cobra.Command, args []string) error {
			if n := cmd.ArgsLenAtDash(); n < 1 || len(args) <= n {
				return errors.New(`usage: holdfast lock KEY... -- CMD [ARGS...] (put "--" between the keys and the command)`)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if lockDelay < 0 {
				return fmt.Errorf("--lock-delay %s: must not be negative", lockDelay)
			}
			r.lockDelay = lockDelay
			return r.start(cmd, args)
		},
	}
	r.addFlags(cmd, stdout, stderr)
	cmd.Flags().DurationVar(&lockDelay, "lock-delay", 0, "if the lease is lost (it expires; not when released), its keys refuse new holders for this long")
	return cmd
}

// addFlags gives cmd the flags every command that runs CMD under a lease
// takes (lock, semaphore, rwlock, elect), bound to r.
func (r *lockRun) addFlags(cmd *cobra.Command, stdout, stderr io.Writer) {
	r.o, r.stdout, r.stderr = &clientOptions{}, stdout, stderr
	addClientFlags(cmd, r.o)
	f := cmd.Flags()
	f.DurationVar(&r.ttl, "ttl", 30*time.Second, "lease length; renewed at about a third of it while CMD runs")
	f.DurationVar(&r.wait, "wait", 0, "give up (exit 3) after queueing this long (0: wait until acquired or interrupted)")
	f.BoolVarP(&r.noWait, "no-wait", "n", false, "try once; exit 3 at once when the lease cannot be granted now")
	f.DurationVar(&r.grace, "grace", 10*time.Second, "after a lost lease, time between SIGTERM and SIGKILL")
	f.StringVar(&r.holder, "holder", "", "label others see for this lease in inspect, list, watch (default HOSTNAME:PID)")
	_ = f.MarkHidden("output") // these commands print nothing of their own
	f.BoolVarP(&r.quiet, "quiet", "q", false, "say nothing on stderr about acquiring and releasing")
}

// start checks the flags and runs CMD: args are the keys, "--", then CMD.
func (r *lockRun) start(cmd *cobra.Command, args []string) error {
	if err := r.o.resolve(cmd); err != nil {
		return err
	}
	if r.wait < 0 {
		return fmt.Errorf("--wait %s: must not be negative", r.wait)
	}
	if r.holder == "" {
		r.holder = defaultHolder()
	}
	n := cmd.ArgsLenAtDash()
	r.keys, r.argv = args[:n], args[n:]
	return r.run(cmd.Context())
}

type lockRun struct {
	o *clientOptions
	// builder makes the lock to take (nil: the lock on keys, with
	// lockDelay); TTL and wait are set on it.
	builder func(c *holdfast.Client) holdfast.Lock
	// campaign, when set, takes the lease instead of a Lock: `holdfast
	// elect` campaigns and holds the leadership's guard (once: one attempt,
	// --no-wait). TTL and wait are set on the election by campaign itself.
	campaign       func(ctx context.Context, c *holdfast.Client, once bool) (*holdfast.Guard, error)
	keys           []string
	argv           []string
	ttl, wait      time.Duration
	noWait         bool
	grace          time.Duration
	holder         string
	quiet          bool
	lockDelay      time.Duration
	stdout, stderr io.Writer
}

// what names the keys in messages.
func (r *lockRun) what() string {
	if len(r.keys) == 1 {
		return strconv.Quote(r.keys[0])
	}
	q := make([]string, len(r.keys))
	for i, k := range r.keys {
		q[i] = strconv.Quote(k)
	}
	return strings.Join(q, ", ")
}

// env is what CMD learns of its lease: the key and fencing token, or for
// several keys their number and each key and token by index.
func (r *lockRun) env(g *holdfast.Guard) ([]string, string, error) {
	if len(r.keys) == 1 {
		token, err := g.FencingToken()
		if err != nil {
			return nil, "", err
		}
		if r.campaign != nil {
			t := strconv.FormatUint(token, 10)
			return []string{"HOLDFAST_TERM=" + t, "HOLDFAST_FENCING_TOKEN=" + t, "HOLDFAST_ELECTION_KEY=" + r.keys[0]},
				"term " + t, nil
		}
		return []string{"HOLDFAST_FENCING_TOKEN=" + strconv.FormatUint(token, 10), "HOLDFAST_LOCK_KEY=" + r.keys[0]},
			fmt.Sprintf("fencing token %d", token), nil
	}
	env := []string{"HOLDFAST_LOCK_KEYS=" + strconv.Itoa(len(r.keys))}
	tokens := make([]string, len(r.keys))
	for i, k := range r.keys {
		token, err := g.FencingTokenFor(k)
		if err != nil {
			return nil, "", err
		}
		tokens[i] = strconv.FormatUint(token, 10)
		env = append(env, fmt.Sprintf("HOLDFAST_LOCK_KEY_%d=%s", i, k), fmt.Sprintf("HOLDFAST_FENCING_TOKEN_%d=%s", i, tokens[i]))
	}
	return env, "fencing tokens " + strings.Join(tokens, ", "), nil
}

func (r *lockRun) say(format string, args ...any) {
	if !r.quiet {
		fmt.Fprintf(r.stderr, "holdfast: "+format+"\n", args...)
	}
}

// forwarded are the signals passed on to the command.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

func (r *lockRun) run(ctx context.Context) error {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	c, err := r.o.dial(r.holder)
	if err != nil {
		return err
	}
	defer r.o.close() // after c.Close, which may still release
	defer c.Close()

	g, err := r.acquire(ctx, c, sigs)
	if err != nil {
		return err
	}
	env, tokens, err := r.env(g)
	if err != nil { // lost already
		return &exitError{code: ExitLeaseLost, err: err}
	}
	r.say("acquired %s (%s); running %s", r.what(), tokens, r.argv[0])

	child := exec.Command(r.argv[0], r.argv[1:]...)
	child.Env = append(os.Environ(), env...)
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, r.stdout, r.stderr
	// Its own process group, so that a lost lease stops its children too.
	child.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := child.Start(); err != nil {
		_ = r.release(g) // release reports its own failure
		return &exitError{code: 127, err: fmt.Errorf("cannot run %s: %w", r.argv[0], err)}
	}
	pgid := child.Process.Pid
	// The exit status is in child.ProcessState once Wait returns; its error
	// only restates a non-zero status.
	done := make(chan struct{})
	go func() { _ = child.Wait(); close(done) }()

	var (
		lost      error
		killTimer *time.Timer
		leaseDone = g.Done()
	)
wait:
	for {
		select {
		case <-done:
			break wait
		case <-leaseDone:
			leaseDone = nil
			lost = context.Cause(g.Context())
			// Said even with --quiet: it explains the exit status.
			fmt.Fprintf(r.stderr, "holdfast: %s; stopping %s (SIGTERM, SIGKILL after %s)\n", unprefixed(lost), r.argv[0], r.grace)
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			killTimer = time.AfterFunc(r.grace, func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
		case s := <-sigs:
			_ = syscall.Kill(-pgid, s.(syscall.Signal))
		}
	}
	if killTimer != nil {
		killTimer.Stop()
	}
	code := exitStatus(child.ProcessState)
	if lost != nil {
		return &exitError{code: ExitLeaseLost, err: fmt.Errorf("%s stopped (status %d): the lease on %s was lost", r.argv[0], code, r.what())}
	}
	if err := r.release(g); errors.Is(err, holdfast.ErrLeaseLost) {
		// The command finished, but the lease ran out first: its work may
		// have overlapped with the next holder's.
		return &exitError{code: ExitLeaseLost, err: fmt.Errorf("%s finished (status %d) but the lease was lost before it did: %s", r.argv[0], code, unprefixed(err))}
	}
	if code == 0 {
		return nil
	}
	return &exitError{code: code}
}

// acquire takes the lock, ending the wait on SIGINT/SIGTERM/SIGHUP.
func (r *lockRun) acquire(ctx context.Context, c *holdfast.Client, sigs <-chan os.Signal) (*holdfast.Guard, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		g   *holdfast.Guard
		err error
	}
	res := make(chan result, 1)
	// Fail fast when the server cannot be reached at all; once it has
	// answered, Lock rides out a restart within the wait.
	if _, err := c.ServerInfo(ctx); err != nil {
		return nil, r.o.callError(err)
	}
	l := c.Lock(r.keys[0], r.keys[1:]...).LockDelay(r.lockDelay)
	if r.builder != nil {
		l = r.builder(c)
	}
	l = l.TTL(r.ttl)
	if r.wait > 0 {
		l = l.Wait(r.wait) // without a Wait, Lock queues until acquired or interrupted
	}
	go func() {
		var out result
		switch {
		case r.campaign != nil && r.noWait:
			out.g, out.err = r.campaign(ctx, c, true)
		case r.noWait:
			out.g, out.err = l.TryLock(ctx)
		default:
			if !r.quiet {
				// Say so only when the wait is noticeable.
				t := time.AfterFunc(time.Second, func() { r.say("waiting for %s ...", r.what()) })
				defer t.Stop()
			}
			if r.campaign != nil {
				out.g, out.err = r.campaign(ctx, c, false)
			} else {
				out.g, out.err = l.Lock(ctx)
			}
		}
		res <- out
	}()
	var interrupted os.Signal
	var out result
	select {
	case out = <-res:
	case interrupted = <-sigs:
		cancel()
		out = <-res
	}
	if interrupted != nil {
		if out.g != nil {
			_ = r.release(out.g) // release reports its own failure
		}
		return nil, &exitError{code: 128 + int(interrupted.(syscall.Signal)), err: fmt.Errorf("interrupted while waiting for %s", r.what())}
	}
	if out.err != nil {
		var na *holdfast.NotAcquiredError
		if errors.As(out.err, &na) && !errors.Is(out.err, context.Canceled) {
			msg := fmt.Sprintf("%s not acquired", r.what())
			if r.wait > 0 {
				msg += " within " + r.wait.String()
			}
			switch {
			case na.Current != nil && na.Current.Kind == holdfast.KindElection:
				msg += fmt.Sprintf(": led by %q (term %d)", na.Current.Holder, na.Current.FencingToken)
			case na.Current != nil && na.Current.Kind != holdfast.KindMutex:
				msg += fmt.Sprintf(": %d of its %d permits held by %d holder(s)", na.Current.PermitsInUse, na.Current.Limit, len(na.Current.Holders))
			case na.Current != nil && len(r.keys) > 1:
				msg += fmt.Sprintf(": %q held by %q (fencing token %d)", na.Current.Key, na.Current.Holder, na.Current.FencingToken)
			case na.Current != nil:
				msg += fmt.Sprintf(": held by %q (fencing token %d)", na.Current.Holder, na.Current.FencingToken)
			case na.Delay != nil:
				msg += fmt.Sprintf(": %q is in its lock-delay (%s left)", na.Delay.Key, na.Delay.Remaining.Round(time.Millisecond))
			}
			return nil, &exitError{code: ExitNotAcquired, err: errors.New(msg)}
		}
		return nil, r.o.callError(out.err)
	}
	return out.g, nil
}

// release gives the lock back; a failure is reported, not fatal: the lease
// frees itself after its TTL.
func (r *lockRun) release(g *holdfast.Guard) error {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	err := g.Unlock(ctx)
	switch {
	case err == nil:
		r.say("released %s", r.what())
	case errors.Is(err, holdfast.ErrLeaseLost):
	default:
		fmt.Fprintf(r.stderr, "holdfast: could not release %s (it frees itself within its TTL, %s): %s\n", r.what(), r.ttl, unprefixed(err))
	}
	return err
}

// unprefixed is err's message without the SDK's "holdfast: " prefix (ours
// comes first).
func unprefixed(err error) string { return strings.TrimPrefix(err.Error(), "holdfast: ") }

// exitStatus is a shell's view of how the process ended.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
