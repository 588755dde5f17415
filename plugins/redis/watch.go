package redis

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/core/backend"
)

// watchItem is one reply (a *goredis.Message, *goredis.Subscription or
// *goredis.Pong) or the error that ended one subscription.
type watchItem struct {
	msg any
	err error
}

// Watch subscribes to the acquire/release events under prefix and, when
// Redis reports expiries, to expired-key notifications (on every master of a
// Cluster: keyspace notifications are node-local). It sends EventSynced once
// Redis has confirmed every subscription. A lost connection ends the watch
// with ErrUnavailable, because events may have been missed; the engine then
// watches again and re-reads what it waits on.
func (b *Backend) Watch(ctx context.Context, prefix string, send func(backend.Event) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var subs subscriptions
	defer subs.close(cancel)

	setupCtx, setupCancel := context.WithTimeout(ctx, b.opts.DialTimeout+b.opts.OpTimeout)
	defer setupCancel()
	eventPrefix := b.opts.KeyPrefix + "events:"
	if err := subs.add(setupCtx, b.client.PSubscribe(setupCtx, globEscape(eventPrefix+prefix)+"*")); err != nil {
		return b.watchErr(ctx, err)
	}
	if err := b.subscribeExpiries(setupCtx, &subs); err != nil {
		return b.watchErr(ctx, err)
	}
	setupCancel()

	items := b.receiveAll(ctx, &subs)
	if err := send(backend.Event{Type: backend.EventSynced}); err != nil {
		return err
	}
	for {
		var it watchItem
		select {
		case <-ctx.Done():
			return nil
		case it = <-items:
		}
		if it.err != nil {
			return b.watchErr(ctx, it.err)
		}
		msg, ok := it.msg.(*goredis.Message)
		if !ok {
			continue
		}
		ev, ok := b.event(ctx, msg, eventPrefix, prefix)
		if !ok {
			continue
		}
		if err := send(ev); err != nil {
			return err
		}
	}
}

// subscriptions are the pubsub connections of one Watch or Follow.
type subscriptions struct {
	subs []*goredis.PubSub
	wg   sync.WaitGroup
}

// add keeps ps and waits for Redis to confirm its first subscription.
func (s *subscriptions) add(ctx context.Context, ps *goredis.PubSub) error {
	s.keep(ps)
	return confirm(ctx, ps)
}

// keep adds ps to the connections that close closes.
func (s *subscriptions) keep(ps *goredis.PubSub) { s.subs = append(s.subs, ps) }

// confirm waits for ps's first reply: the confirmation of its first
// subscription, or the answer to its first PING.
func confirm(ctx context.Context, ps *goredis.PubSub) error {
	m, err := ps.Receive(ctx)
	if err != nil {
		return err
	}
	switch m.(type) {
	case *goredis.Subscription, *goredis.Pong:
		return nil
	}
	return fmt.Errorf("unexpected reply %T to a subscription", m)
}

// close cancels the receivers (cancel is their context's), closes the
// connections and waits for the receivers to end.
func (s *subscriptions) close(cancel context.CancelFunc) {
	cancel()
	for _, ps := range s.subs {
		_ = ps.Close()
	}
	s.wg.Wait()
}

// subscribeExpiries turns expiry notifications on again (after a Sentinel
// failover or a restart of Redis the master answering now may not have
// them) and, when they are on, subscribes to them on every master.
func (b *Backend) subscribeExpiries(ctx context.Context, subs *subscriptions) error {
	if !b.ensureKeyspaceEvents(ctx) {
		return nil
	}
	channel := fmt.Sprintf("__keyevent@%d__:expired", b.opts.DB)
	return b.forEachNode(ctx, func(ctx context.Context, c goredis.UniversalClient) error {
		return subs.add(ctx, c.Subscribe(ctx, channel))
	})
}

// receiveAll runs receive on every subscription until ctx is done, and
// returns the one channel they all deliver on.
func (b *Backend) receiveAll(ctx context.Context, subs *subscriptions) <-chan watchItem {
	items := make(chan watchItem)
	for _, ps := range subs.subs {
		subs.wg.Add(1)
		go func() {
			defer subs.wg.Done()
			b.receive(ctx, ps, items)
		}()
	}
	return items
}

func (b *Backend) watchErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil //nolint:nilerr // the caller ended the watch: that is no failure of Redis
	}
	return fmt.Errorf("%w: redis watch: %w", backend.ErrUnavailable, err)
}

// receive forwards replies from ps until ctx is done or the connection
// fails. A quiet connection is probed with PING once per op timeout; a probe
// left unanswered for another op timeout counts as a failure, so a Redis
// that vanished without closing the connection is noticed.
func (b *Backend) receive(ctx context.Context, ps *goredis.PubSub, items chan<- watchItem) {
	interval := max(b.opts.OpTimeout, time.Second)
	probing := false
	deliver := func(it watchItem) bool {
		select {
		case items <- it:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		m, err := ps.ReceiveTimeout(ctx, interval)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if isTimeout(err) && !probing {
				if perr := ps.Ping(ctx); perr == nil {
					probing = true
					continue
				}
			}
			deliver(watchItem{err: err})
			return
		}
		probing = false
		if !deliver(watchItem{msg: m}) {
			return
		}
	}
}

// event turns a message into an Event under prefix.
func (b *Backend) event(ctx context.Context, m *goredis.Message, eventPrefix, prefix string) (backend.Event, bool) {
	if key, ok := strings.CutPrefix(m.Channel, eventPrefix); ok {
		if !strings.HasPrefix(key, prefix) {
			return backend.Event{}, false
		}
		switch typ, _, _ := strings.Cut(m.Payload, "\n"); typ {
		case "granted":
			return grantEvent(key, backend.EventAcquired, m.Payload)
		case "ungranted":
			return grantEvent(key, backend.EventReleased, m.Payload)
		case "proclaimed":
			return grantEvent(key, backend.EventProclaimed, m.Payload)
		}
		f := strings.SplitN(m.Payload, "\n", 9)
		if len(f) != 9 {
			return backend.Event{}, false
		}
		var typ backend.EventType
		switch f[0] {
		case "acquired":
			typ = backend.EventAcquired
		case "released":
			typ = backend.EventReleased
		default:
			return backend.Event{}, false
		}
		rec, err := parseRecord(key, []any{f[1], f[8], f[2], f[3], f[4], f[5], f[6], f[7]})
		if err != nil {
			return backend.Event{}, false
		}
		return backend.Event{Type: typ, Record: rec}, true
	}
	// An expired-key notification: the payload is the Redis key, a lock or
	// a grant's expiry key.
	if key, fence, permits, ok := b.decodeGrantKey(m.Payload); ok {
		if !strings.HasPrefix(key, prefix) {
			return backend.Event{}, false
		}
		rec := backend.Record{Key: key, FencingToken: fence, Permits: permits}
		keys := b.keys(key)
		if v, err := b.client.HMGet(ctx, keys[1], "k", "n").Result(); err == nil && len(v) == 2 {
			if kind, ok := kindByName(asString(v[0])); ok {
				rec.Kind, rec.Limit = kind, int(asInt(v[1]))
			}
		}
		return backend.Event{Type: backend.EventExpired, Record: rec}, true
	}
	key, ok := b.decodeLockKey(m.Payload)
	if !ok || !strings.HasPrefix(key, prefix) {
		return backend.Event{}, false
	}
	rec := backend.Record{Key: key}
	// The lock's fields are gone with it; the meta hash remembers the last
	// holder's fencing token, label and stamp (informational: a new holder
	// may already have replaced them).
	keys := b.keys(key)
	if v, err := b.client.HMGet(ctx, keys[1], "f", "h", "ss", "sn", "sl").Result(); err == nil && len(v) == 5 && v[0] != nil {
		if r, err := parseRecord(key, []any{v[0], v[1], v[2], v[3], v[4], int64(0), int64(0), int64(0)}); err == nil {
			rec = r
		}
	}
	return backend.Event{Type: backend.EventExpired, Record: rec}, true
}
