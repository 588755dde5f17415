package etcd

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast/holdfast/core/backend"
)

// MaxLockDelay is the longest lock-delay kept (Consul's bound).
const MaxLockDelay = time.Minute

// Lock-delays (Info.MaxLockDelay). A lock taken with a lock-delay d also
// puts P "delays/" K, in the same transaction, on a lease of its own whose
// TTL is the lock's TTL plus d (each rounded up to whole seconds), so etcd
// deletes it d after the lock's own lease ends. Every take compares that K
// has no delay key, so while the lock is gone and the delay key is not,
// the key refuses holders. Release deletes the delay key in its transaction
// (a released key has no delay) and Extend moves it onto a new lease of
// the new TTL plus d. A delay lease that no key uses any more is left to
// expire rather than revoked: the keys of a set share one, and a release of
// one key must not end the others' delays. The key's value is the plugin's estimate of when etcd
// deletes it, for DelayRemaining (informational: etcd decides).

func (b *Backend) delayKey(key string) string { return b.delays + key }

type delayValue struct {
	UntilNs int64 `json:"until_ns"`
}

func checkDelay(d time.Duration) error {
	if d < 0 || d > MaxLockDelay {
		return fmt.Errorf("etcd: lock_delay %s is outside [0, %s]: %w", d, MaxLockDelay, backend.ErrInvalidArgument)
	}
	return nil
}

// delayLease grants the lease of a lock's delay keys: the lock's TTL plus
// the delay. Zero when there is no delay.
func (b *Backend) delayLease(ctx context.Context, ttl, delay time.Duration) (clientv3.LeaseID, time.Time, error) {
	if delay <= 0 {
		return clientv3.NoLease, time.Time{}, nil
	}
	start := time.Now()
	resp, err := b.cli.Grant(ctx, ttlSeconds(ttl)+ttlSeconds(delay))
	if err != nil {
		return clientv3.NoLease, time.Time{}, err
	}
	return resp.ID, start.Add(time.Duration(resp.TTL) * time.Second), nil
}

// putDelay is the write of key's delay key on lease.
func (b *Backend) putDelay(key string, lease clientv3.LeaseID, until time.Time) clientv3.Op {
	v, _ := json.Marshal(delayValue{UntilNs: until.UnixNano()})
	return clientv3.OpPut(b.delayKey(key), string(v), clientv3.WithLease(lease))
}

// noDelay is the compare every take makes: key is not in a lock-delay.
func (b *Backend) noDelay(key string) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(b.delayKey(key)), "=", 0)
}

// delayed is the record of key in its lock-delay, from its delay key.
func delayed(key string, kv *mvccpb.KeyValue) backend.Record {
	var v delayValue
	_ = json.Unmarshal(kv.Value, &v)
	// The key exists, so the delay has not passed: at least a millisecond.
	return backend.Record{Key: key, DelayRemaining: max(time.Millisecond, time.Until(time.Unix(0, v.UntilNs)))}
}
