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

// watchItem is one message or the error that ended one subscription.
type watchItem struct {
	msg *goredis.Message
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

	var subs []*goredis.PubSub
	var wg sync.WaitGroup
	defer func() {
		cancel()
		for _, ps := range subs {
			_ = ps.Close()
		}
		wg.Wait()
	}()

	setupCtx, setupCancel := context.WithTimeout(ctx, b.opts.DialTimeout+b.opts.OpTimeout)
	defer setupCancel()
	subscribe := func(ps *goredis.PubSub) error {
		subs = append(subs, ps)
		m, err := ps.Receive(setupCtx)
		if err != nil {
			return err
		}
		if _, ok := m.(*goredis.Subscription); !ok {
			return fmt.Errorf("unexpected reply %T to a subscription", m)
		}
		return nil
	}
	eventPrefix := b.opts.KeyPrefix + "events:"
	if err := subscribe(b.client.PSubscribe(setupCtx, globEscape(eventPrefix+prefix)+"*")); err != nil {
		return b.watchErr(ctx, err)
	}
	// Turn expiry notifications on again: after a Sentinel failover or a
	// restart of Redis the master answering now may not have them.
	if b.ensureKeyspaceEvents(setupCtx) {
		channel := fmt.Sprintf("__keyevent@%d__:expired", b.opts.DB)
		err := b.forEachNode(setupCtx, func(ctx context.Context, c goredis.UniversalClient) error {
			return subscribe(c.Subscribe(ctx, channel))
		})
		if err != nil {
			return b.watchErr(ctx, err)
		}
	}
	setupCancel()

	items := make(chan watchItem)
	for _, ps := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.receive(ctx, ps, items)
		}()
	}
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
		ev, ok := b.event(ctx, it.msg, eventPrefix, prefix)
		if !ok {
			continue
		}
		if err := send(ev); err != nil {
			return err
		}
	}
}

func (b *Backend) watchErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil //nolint:nilerr // the caller ended the watch: that is no failure of Redis
	}
	return fmt.Errorf("%w: redis watch: %w", backend.ErrUnavailable, err)
}

// receive forwards messages from ps until ctx is done or the connection
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
		if msg, ok := m.(*goredis.Message); ok {
			if !deliver(watchItem{msg: msg}) {
				return
			}
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
