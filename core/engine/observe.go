package engine

import (
	"context"
	"errors"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/holdfast/holdfast/core/backend"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// Observe streams the leader of the election req.Key to send: first, once
// the watch of the key is established, the current leader (or none), then
// one message per change. It ends as Watch does (unavailable: observe
// again), and with failed_precondition when the key is held as another
// kind.
//
// Every message is read from the store (a Get) when the watch says the key
// changed, never taken from the event itself: an event queued between the
// watch's SYNCED and the first Get can be older than what that Get saw (a
// proclaim of a value since replaced), and sending it would show a value
// going back. A fresh read is never older than the read before it, so the
// stream's terms never go back and no value reappears after a newer one; a
// message is sent only when the leader (present, term or value) differs
// from the last one sent, so two in a row never say the same thing. The
// price is that a change superseded before its event is read (a leader that
// resigned at once) may be coalesced into the next message; an observer
// learns who leads now, not every campaign.
func (e *Engine) Observe(ctx context.Context, req *lockv1.ObserveRequest, send func(*lockv1.ObserveResponse) error) error {
	if err := e.enter(); err != nil {
		return err
	}
	key := req.GetKey()
	if err := checkKey("key", key); err != nil {
		return err
	}
	if _, err := e.elections(); err != nil {
		return err
	}
	o := &observer{e: e, key: key, send: send}
	err := e.Watch(ctx, &lockv1.WatchRequest{Target: &lockv1.WatchRequest_Key{Key: key}}, func(*lockv1.WatchResponse) error {
		// SYNCED or any event of the key: read what holds now.
		return o.refresh(ctx)
	})
	if errors.Is(err, errObserveEnded) {
		return o.err
	}
	return err
}

// errObserveEnded stops the watch under Observe; observer.err says why.
var errObserveEnded = errors.New("observe ended")

// observer is one Observe stream's last message.
type observer struct {
	e    *Engine
	key  string
	send func(*lockv1.ObserveResponse) error
	// What the last message said (sent: there was one).
	sent   bool
	leader *lockv1.Leader // nil: no leader
	term   uint64         // the highest term sent
	err    error          // why the stream ends (errObserveEnded)
}

func (o *observer) refresh(ctx context.Context) error {
	rec, held, err := o.e.b.Get(ctx, o.key)
	if err != nil {
		return o.end(backendErr(ctx, "observe", err))
	}
	var leader *lockv1.Leader
	if held {
		if rec.Kind != backend.KindElection {
			return o.end(newErr(ErrFailedPrecondition, "key %q is %s; Observe follows elections only", o.key, describe(rec.Kind, max(rec.Limit, 1))))
		}
		leader = leaderOf(rec)
		if leader.GetTerm() < o.term {
			return nil // an older read than one already sent: never go back
		}
	}
	if o.sent && sameLeader(o.leader, leader) {
		return nil
	}
	o.sent, o.leader = true, leader
	o.term = max(o.term, leader.GetTerm())
	o.e.clock.Observe(rec.Stamp)
	if err := o.send(&lockv1.ObserveResponse{Leader: leader, ServerStamp: o.e.stamp()}); err != nil {
		return o.end(err)
	}
	return nil
}

func (o *observer) end(err error) error {
	o.err = err
	return errObserveEnded
}

// leaderOf is the leadership a Get record of an election key describes:
// its one grant (the record's own fields describe the grant that ends
// first, which for a limit of 1 is the only one).
func leaderOf(r backend.Record) *lockv1.Leader {
	l := &lockv1.Leader{Key: r.Key, Term: r.FencingToken, Holder: r.Holder, Value: r.Value, Stamp: r.Stamp.ToProto()}
	if !r.ExpiresAt.IsZero() {
		l.ExpiresAt = timestamppb.New(r.ExpiresAt)
	}
	return l
}

// sameLeader reports whether two messages would say the same thing: both no
// leader, or the same term with the same value (a renewal changes only the
// expiry, which is not news).
func sameLeader(a, b *lockv1.Leader) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.GetTerm() == b.GetTerm() && a.GetValue() == b.GetValue()
}
