package etcd

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/holdfast/holdfast/proto/hlc"
)

// BatchRefused is how many batch transactions etcd refused as too large
// (their items then went their single paths).
func (b *Backend) BatchRefused() int64 { return b.batchRefused.Load() }

// EncodeStamp is a stamp as its key's stamp key stores it.
func EncodeStamp(t hlc.Timestamp) string { return encodeStamp(t) }

// NewWithDialOptions is New with extra gRPC dial options, such as an
// interceptor that counts round trips.
func NewWithDialOptions(ctx context.Context, opts map[string]string, dial ...grpc.DialOption) (*Backend, error) {
	return newBackend(ctx, opts, dial)
}

// RenewOnce renews a lease once on the backend's reused keep-alive streams
// (what an Acquire does beside its transaction), answering its TTL.
func (b *Backend) RenewOnce(ctx context.Context, id int64) (int64, error) {
	return b.renew.once(ctx, clientv3.LeaseID(id))
}

// AfterPredecessor sets a function WaitTurn runs between its read of the
// entry before the waiter's and its watch of that entry. Set it before any
// WaitTurn.
func (b *Backend) AfterPredecessor(h func(key, pred string)) { b.q.afterPredecessor = h }

// Pooled reports whether lease id waits in the backend's pool of secs-second
// leases.
func (b *Backend) Pooled(secs int64, id int64) bool {
	b.pool.mu.Lock()
	defer b.pool.mu.Unlock()
	if tp := b.pool.ttls[secs]; tp != nil {
		for _, l := range tp.free {
			if l.id == clientv3.LeaseID(id) {
				return true
			}
		}
	}
	return false
}
