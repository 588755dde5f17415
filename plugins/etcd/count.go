package etcd

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast/holdfast/core/backend"
)

var _ backend.CountBackend = (*Backend)(nil)

// Count implements backend.CountBackend with two count-only ranges in one
// read transaction (one snapshot, no key leaves etcd): P "owners/", one
// key per mutex lock on the lock's lease, and P "grants/", one key per
// grant on the grant's lease. A grant key itself shares P "locks/" with the
// never-deleted stamp and meta keys, so no range holds the grants alone;
// the count keys exist for this call (see the package doc, "Counting").
// etcd deletes both with their lease, so a lease that ran out leaves the
// count when etcd revokes it (about 500ms after its TTL).
func (b *Backend) Count(ctx context.Context) (int64, error) {
	cctx, cancel := b.call(ctx)
	defer cancel()
	resp, err := b.cli.Txn(cctx).Then(
		clientv3.OpGet(b.owners, clientv3.WithPrefix(), clientv3.WithCountOnly()),
		clientv3.OpGet(b.grants, clientv3.WithPrefix(), clientv3.WithCountOnly()),
	).Commit()
	if err != nil {
		return 0, wrap(ctx, "count", err)
	}
	var n int64
	for _, r := range resp.Responses {
		n += r.GetResponseRange().GetCount()
	}
	return n, nil
}
