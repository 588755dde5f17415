package holdfast

import (
	"context"
	"errors"
	"iter"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/holdfast/holdfast/proto/hlc"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// Leader election is a fourth kind of key (docs/primitives.md): one lease
// at a time, like a mutex, whose holder is the leader. The lease carries a
// value (what the leader is known by: its address, its identity) that the
// leader may replace (Proclaim) and everyone may read (Leader, Observe);
// its fencing token is the leader's term, strictly increasing per key.
// Campaigning is acquiring (waiting campaigners are served in arrival
// order), resigning is releasing, and the leadership is renewed by the
// client's one watchdog and poisoned when lost, exactly as a lock's Guard.

// MaxValueBytes is the longest value an election's leader may carry, in
// bytes of UTF-8 (without NUL).
const MaxValueBytes = 4096

// checkValue refuses, before anything is sent, a value the server would
// refuse, with the server's words: longer than MaxValueBytes, not UTF-8,
// or holding a NUL (which PostgreSQL's text cannot keep).
func checkValue(v string) error {
	if len(v) > MaxValueBytes {
		return invalidArgument("value: %d bytes exceeds the maximum %d bytes", len(v), MaxValueBytes)
	}
	if !utf8.ValidString(v) {
		return invalidArgument("value: must be valid UTF-8")
	}
	if i := strings.IndexByte(v, 0); i >= 0 {
		return invalidArgument("value: must not contain NUL (found at byte %d)", i)
	}
	return nil
}

// Election describes campaigns for the leadership of one key: TTL, how
// long to wait, holder label. Like Lock it is a small value whose setters
// return modified copies. Make one with Client.Election.
type Election struct {
	l Lock
}

// Election starts describing campaigns for the leadership of key, with
// the client's default TTL and holder label and no wait of its own
// (Campaign then queues until it leads or its context ends). A key used
// as a lock, a semaphore or a read-write lock is refused with
// failed_precondition, and a backend that keeps no elections
// (BackendInfo.Kinds) answers unimplemented.
//
//	lead, err := client.Election("svc/primary").TTL(10 * time.Second).Campaign(ctx, "10.0.0.7:8080")
//	...
//	defer lead.Resign(context.Background())
//	term, err := lead.Term()
//	... act as leader under lead.Context(), every write carrying term ...
func (c *Client) Election(key string) Election {
	l := c.Lock(key)
	l.kind = KindElection
	return Election{l: l}
}

// TTL sets the leadership's lease length (Lock.TTL): a leader that stops
// renewing (crash, pause, partition) keeps others from leading for at
// most this long.
func (e Election) TTL(ttl time.Duration) Election { e.l = e.l.TTL(ttl); return e }

// Wait bounds how long Campaign queues (Lock.Wait); Wait(0) is one
// attempt. Without it, Campaign queues until it leads or its context ends.
func (e Election) Wait(wait time.Duration) Election { e.l = e.l.Wait(wait); return e }

// Holder sets the label others see for the leadership (Lock.Holder).
func (e Election) Holder(holder string) Election { e.l = e.l.Holder(holder); return e }

// Key is the election's key.
func (e Election) Key() string { return e.l.key }

// Campaign becomes the leader with value (0 to MaxValueBytes of UTF-8),
// queueing behind earlier campaigners on the server, bounded by Wait and
// by ctx as Lock.Lock is. When the wait runs out it returns a
// *NotAcquiredError (errors.Is(err, ErrNotAcquired)) carrying the
// current leader's state. The *Leadership it returns is renewed by the
// client's watchdog and poisoned when lost, like a Guard.
func (e Election) Campaign(ctx context.Context, value string) (*Leadership, error) {
	l := e.l
	l.value = value
	g, err := l.Lock(ctx)
	if err != nil {
		return nil, err
	}
	return &Leadership{Guard: g}, nil
}

// Leader reports the current leader of the election; ok is false when
// nobody leads it now. It reads the key once (Client.Inspect).
func (e Election) Leader(ctx context.Context) (leader Leader, ok bool, err error) {
	if e.l.c == nil {
		return Leader{}, false, invalidArgument("election %q: no client (make elections with Client.Election)", e.l.key)
	}
	st, held, err := e.l.c.Inspect(ctx, e.l.key)
	if err != nil || !held {
		return Leader{}, false, err
	}
	return leaderFromState(st), true, nil
}

// Observe streams the election's leader: first, once the server has
// established the stream, the current leader (or none), then one
// Observation per change (a new leader, a new value, no leader). Two in a
// row never say the same thing and terms never go back. The iteration
// ends without an error when ctx ends or the loop breaks; otherwise its
// last element is an error: the stream failed, the server ended it
// (ErrUnavailable: observe again), or the client was closed (ErrClosed).
func (e Election) Observe(ctx context.Context) iter.Seq2[Observation, error] {
	c := e.l.c
	return func(yield func(Observation, error) bool) {
		if c == nil {
			yield(Observation{}, invalidArgument("election %q: no client (make elections with Client.Election)", e.l.key))
			return
		}
		if c.isClosed() {
			yield(Observation{}, ErrClosed)
			return
		}
		parent := ctx
		ctx, cancel := c.callContext(ctx)
		defer cancel()
		stream, err := c.rpc.Observe(ctx, &lockv1.ObserveRequest{Key: e.l.key})
		if err != nil {
			if parent.Err() == nil {
				yield(Observation{}, mapError(ctx, "Observe", err))
			}
			return
		}
		defer func() {
			cancel()
			_ = stream.Close()
		}()
		for stream.Receive() {
			msg := stream.Msg()
			c.merge(msg.GetServerStamp(), msg.GetLeader().GetStamp())
			o := Observation{Stamp: hlc.FromProto(msg.GetServerStamp())}
			if p := msg.GetLeader(); p != nil {
				ld := leaderFromProto(p)
				o.Leader = &ld
			}
			if !yield(o, nil) {
				return
			}
		}
		if err := stream.Err(); err != nil && parent.Err() == nil {
			yield(Observation{}, mapError(ctx, "Observe", err))
		} else if err == nil && parent.Err() == nil {
			yield(Observation{}, &rpcError{op: "Observe", code: CodeUnavailable, message: "the server ended the observation", kind: ErrUnavailable})
		}
	}
}

// Leader is an election's leadership as anyone may see it (never with its
// owner token).
type Leader struct {
	Key string
	// Term is the leadership's fencing token: strictly increasing per key
	// over every leadership. Have what the leader acts on refuse smaller
	// terms (ValidateWrite).
	Term uint64
	// Holder is the label the leader campaigned with.
	Holder string
	// Value is what the leader campaigned with, or its last Proclaim.
	Value string
	// ExpiresAt is the server's view of the leadership's expiry unless
	// renewed; informational.
	ExpiresAt time.Time
	// Stamp is the HLC stamp of the leadership's acquisition.
	Stamp hlc.Timestamp
}

// Observation is one message of Observe: the leader at that moment, or
// nil when nobody leads.
type Observation struct {
	Leader *Leader
	// Stamp is the server's HLC reading when it sent the message.
	Stamp hlc.Timestamp
}

func leaderFromProto(p *lockv1.Leader) Leader {
	l := Leader{Key: p.GetKey(), Term: p.GetTerm(), Holder: p.GetHolder(), Value: p.GetValue(), Stamp: hlc.FromProto(p.GetStamp())}
	if p.GetExpiresAt() != nil {
		l.ExpiresAt = p.GetExpiresAt().AsTime()
	}
	return l
}

// leaderFromState reads the leader from a held election key's state: its
// one holder.
func leaderFromState(st LockState) Leader {
	l := Leader{Key: st.Key, Term: st.FencingToken, Holder: st.Holder, ExpiresAt: st.ExpiresAt, Stamp: st.Stamp}
	if len(st.Holders) > 0 {
		l.Value = st.Holders[0].Value
	}
	return l
}

// Leadership is a won campaign: a Guard (the same watchdog, the same
// poisoning; Context(), Done(), Err(), Remaining() as for a lock) whose
// fencing token is the leader's term and whose lease carries a value.
type Leadership struct {
	*Guard
}

// Term is the leadership's term (its fencing token), or the loss (or
// ErrReleased after Resign) once it no longer leads.
func (l *Leadership) Term() (uint64, error) { return l.FencingToken() }

// Value is the leadership's value: the campaign's, or the last one
// Proclaim set.
func (l *Leadership) Value() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.value
}

// Proclaim replaces the leadership's value, if it still leads: the term,
// the TTL and the stamp stay as they are, and observers see the new value.
// When the server answers that the leadership is gone (expired, taken
// over), the guard is poisoned (reason LossRejected) and Proclaim returns
// the *LeaseLostError (errors.Is(err, ErrLeaseLost)); after Resign it
// returns ErrReleased without sending anything. `unavailable` answers and
// transport failures are retried within the retry budget and the
// leadership's local expiry: replacing a value twice is harmless.
func (l *Leadership) Proclaim(ctx context.Context, value string) error {
	if err := checkValue(value); err != nil {
		return err
	}
	return l.proclaim(ctx, value)
}

// Resign gives the leadership up (Guard.Unlock): the next campaigner in
// line becomes leader. It returns nil only when the server confirmed it,
// and the *LeaseLostError when the leadership was already lost.
func (l *Leadership) Resign(ctx context.Context) error { return l.Unlock(ctx) }

// String describes the leadership for logs; it never shows the owner
// token.
func (l *Leadership) String() string { return l.Guard.String() }

// proclaim sends Proclaim, serialised with the lease's other RPCs so that
// the local expiry follows the server's order of events.
func (g *Guard) proclaim(ctx context.Context, value string) error {
	if g.grant.kind != KindElection {
		return invalidArgument("value: only an election's leadership takes a value (Client.Election); this is a %s", g.grant.kind)
	}
	if err := g.Err(); err != nil {
		return err
	}
	if err := g.acquireSem(ctx); err != nil {
		return err
	}
	defer g.releaseSem()
	g.mu.Lock()
	err := g.checkLocked()
	expiry := g.expiry
	g.mu.Unlock()
	if err != nil {
		return err
	}
	var answer error
	err = g.c.retrying(ctx, "Proclaim", expiry, func(actx context.Context) error {
		resp, err := g.c.rpc.Proclaim(actx, &lockv1.ProclaimRequest{Key: g.key, OwnerToken: g.owner, Value: value, ClientStamp: g.c.stamp()})
		if err != nil {
			return err
		}
		g.c.merge(resp.GetServerStamp(), resp.GetLease().GetStamp())
		g.mu.Lock()
		defer g.mu.Unlock()
		switch {
		case !resp.GetProclaimed():
			g.poisonLocked(LossRejected)
			answer = g.err
		case g.checkLocked() != nil:
			// Proclaimed, but the answer came after the local expiry: the
			// leadership was already lost on the safe clock, and the loss
			// stands.
			answer = g.err
		default:
			g.value = value
		}
		return nil
	})
	if err != nil {
		if lost := g.Err(); lost != nil && !errors.Is(lost, ErrReleased) {
			return lost // the local expiry passed meanwhile
		}
		return err
	}
	return answer
}
