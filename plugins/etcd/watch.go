package etcd

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast/holdfast/core/backend"
)

// Watch sends the changes to locks under prefix: one EventSynced once etcd
// has created the watch, then acquisitions, releases and expiries in etcd's
// revision order. It returns when ctx is done, when send fails, or when the
// etcd watch ends (compaction, lost leader), wrapping ErrUnavailable.
func (b *Backend) Watch(ctx context.Context, prefix string, send func(backend.Event) error) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// WithRequireLeader: a member cut off from its cluster ends the watch
	// instead of going silent, so the engine re-watches (and wakes its
	// waiters) rather than waiting for events that cannot come.
	ch := b.cli.Watch(clientv3.WithRequireLeader(wctx), b.lockKey(prefix),
		clientv3.WithPrefix(), clientv3.WithPrevKV(), clientv3.WithCreatedNotify())
	synced := false
	for resp := range ch {
		if err := resp.Err(); err != nil {
			return wrap(ctx, "watch", err)
		}
		if resp.Canceled {
			return wrap(ctx, "watch", errors.New("canceled by etcd"))
		}
		if resp.Created {
			// Every change after the watch's start revision will be
			// delivered: from here on nothing is missed.
			if !synced {
				synced = true
				if err := send(backend.Event{Type: backend.EventSynced}); err != nil {
					return err
				}
			}
			continue
		}
		events, err := b.translate(resp.Events)
		if err != nil {
			return err
		}
		for _, ev := range events {
			if err := send(ev); err != nil {
				return err
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return fmt.Errorf("etcd watch ended: %w", backend.ErrUnavailable)
}

// translate turns one watch response's etcd events into lock events. etcd
// never splits one revision's events across watch responses, so a release
// (record deleted and stamp key written in one transaction) is told from an
// expiry (record deleted alone, by etcd's lease expiry) within a response.
func (b *Backend) translate(evs []*clientv3.Event) ([]backend.Event, error) {
	type revKey struct {
		rev int64
		key string
	}
	stampWrites := map[revKey]bool{}
	for _, ev := range evs {
		k := string(ev.Kv.Key)
		if ev.Type == mvccpb.PUT && strings.HasSuffix(k, stampSuffix) {
			stampWrites[revKey{ev.Kv.ModRevision, strings.TrimSuffix(k, stampSuffix)}] = true
		}
	}
	var out []backend.Event
	for _, ev := range evs {
		k := string(ev.Kv.Key)
		key, suffix := splitName(strings.TrimPrefix(k, b.locks))
		if isGrantSuffix(suffix) {
			// A grant (grants.go): created is acquired; deleted with a
			// write of the key's stamp key is released, alone expired;
			// put by Proclaim is proclaimed.
			switch {
			case ev.Type == mvccpb.PUT && ev.IsCreate():
				e, err := grantEvent(backend.EventAcquired, key, ev.Kv)
				if err != nil {
					return nil, err
				}
				out = append(out, e)
			case ev.Type == mvccpb.PUT && proclaimed(ev.Kv, ev.PrevKv):
				// An election's value replaced (elections.go); an
				// Extend's or a replay's put is no change of holder.
				e, err := grantEvent(backend.EventProclaimed, key, ev.Kv)
				if err != nil {
					return nil, err
				}
				out = append(out, e)
			case ev.Type == mvccpb.DELETE:
				typ := backend.EventExpired
				if stampWrites[revKey{ev.Kv.ModRevision, b.locks + key}] {
					typ = backend.EventReleased
				}
				e := backend.Event{Type: typ, Record: backend.Record{Key: key}}
				if ev.PrevKv != nil {
					var err error
					if e, err = grantEvent(typ, key, ev.PrevKv); err != nil {
						return nil, err
					}
				}
				out = append(out, e)
			}
			continue
		}
		if suffix != "" {
			continue // a stamp or meta key
		}
		switch {
		case ev.Type == mvccpb.PUT && ev.IsCreate():
			rec, err := decodeRecord(key, ev.Kv)
			if err != nil {
				return nil, err
			}
			out = append(out, backend.Event{Type: backend.EventAcquired, Record: rec})
		case ev.Type == mvccpb.PUT:
			// Extend rewrote the record onto a new lease: not a change of
			// holder.
		case ev.Type == mvccpb.DELETE:
			// Without the previous record (compacted away) the key alone
			// still wakes the waiters.
			rec := backend.Record{Key: key}
			if ev.PrevKv != nil {
				var err error
				if rec, err = decodeRecord(key, ev.PrevKv); err != nil {
					return nil, err
				}
			}
			typ := backend.EventExpired
			if stampWrites[revKey{ev.Kv.ModRevision, k}] {
				typ = backend.EventReleased
			}
			out = append(out, backend.Event{Type: typ, Record: rec})
		}
	}
	return out, nil
}
