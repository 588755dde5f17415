package holdfast

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// LeaseEventType says what happened to a guard's lease.
type LeaseEventType int

const (
	// LeaseRenewed: a renewal succeeded (watchdog or Extend).
	LeaseRenewed LeaseEventType = iota + 1
	// LeaseRenewalFailed: a renewal attempt failed and will be retried
	// until the lease's local expiry. Transient: the guard still holds.
	LeaseRenewalFailed
	// LeaseLost: the guard was poisoned; Reason says why.
	LeaseLost
	// LeaseReleased: Unlock (or Close) released the lease and the server
	// confirmed it.
	LeaseReleased
)

// String is the event's name, the same in every holdfast SDK: "renewed",
// "renewal_failed", "lost", "released".
func (t LeaseEventType) String() string {
	switch t {
	case LeaseRenewed:
		return "renewed"
	case LeaseRenewalFailed:
		return "renewal_failed"
	case LeaseLost:
		return "lost"
	case LeaseReleased:
		return "released"
	}
	return fmt.Sprintf("LeaseEventType(%d)", int(t))
}

// LeaseEvent is what WithLeaseEvents receives, and what the client logs.
type LeaseEvent struct {
	Type LeaseEventType
	// Key and FencingToken are the guard's (for a multi-key lease its first
	// key and that key's token; Keys lists every key).
	Key          string
	Keys         []string
	FencingToken uint64
	// TTL (LeaseRenewed) is the lease length renewed with.
	TTL time.Duration
	// Renewals (LeaseRenewed) is the guard's successful renewals so far.
	Renewals int
	// Latency (LeaseRenewed) is the renewal's round trip.
	Latency time.Duration
	// Remaining (LeaseRenewalFailed) is the time left to the local expiry.
	Remaining time.Duration
	// Reason (LeaseLost) says how the lease was lost.
	Reason LossReason
	// Err is the failed attempt's error (LeaseRenewalFailed) or the
	// *LeaseLostError (LeaseLost), whose LastErr is the cause when there
	// was one.
	Err error
}

// emitEnd reports how a guard ended, once its context is done: lost (with
// the reason) or released.
func (c *Client) emitEnd(g *Guard) {
	cause := context.Cause(g.ctx)
	var lost *LeaseLostError
	switch {
	case errors.As(cause, &lost):
		c.emit(LeaseEvent{Type: LeaseLost, Key: g.key, Keys: g.keys, FencingToken: g.fencing, Reason: lost.Reason, Err: lost})
	case errors.Is(cause, ErrReleased):
		c.emit(LeaseEvent{Type: LeaseReleased, Key: g.key, Keys: g.keys, FencingToken: g.fencing})
	}
}

// emit logs ev and hands it to the listener, which may not stop the
// caller (a watchdog, usually) by panicking.
func (c *Client) emit(ev LeaseEvent) {
	c.log(ev)
	fn := c.opts.onLeaseEvent
	if fn == nil {
		return
	}
	defer func() {
		if r := recover(); r != nil {
			c.opts.logger.Error("holdfast: the lease event listener panicked", "event", ev.Type.String(), "key", ev.Key, "panic", fmt.Sprint(r))
		}
	}()
	fn(ev)
}

func (c *Client) log(ev LeaseEvent) {
	l := c.opts.logger
	switch ev.Type {
	case LeaseRenewed:
		// One per guard per renewal, hundreds per watchdog batch: skip
		// building the line's attributes when debug lines are off.
		if !l.Enabled(context.Background(), slog.LevelDebug) {
			return
		}
		l.Debug("holdfast: lease renewed", "key", ev.Key, "fencing_token", ev.FencingToken, "ttl", ev.TTL, "renewals", ev.Renewals, "latency", ev.Latency)
	case LeaseRenewalFailed:
		l.Warn("holdfast: lease renewal failed; retrying", "key", ev.Key, "fencing_token", ev.FencingToken, "error", ev.Err, "left", ev.Remaining)
	case LeaseLost:
		l.Warn("holdfast: lease lost", "key", ev.Key, "fencing_token", ev.FencingToken, "reason", ev.Reason.String(), "error", ev.Err)
	case LeaseReleased:
		l.Debug("holdfast: lease released", "key", ev.Key, "fencing_token", ev.FencingToken)
	}
}
