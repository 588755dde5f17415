package etcd

import (
	"context"
	"encoding/json"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast/holdfast/core/backend"
)

// Elections. An election key is a grant key (grants.go) of kind
// "election", limit 1: its one grant is the leader and the grant key's
// CreateRevision, its fencing token, is the term. The grant's value is a
// field of its record (recordValue.Value), put with the grant in its
// transaction.
//
// Proclaim reads the meta key and the token's grant key, and runs one
// transaction that compares the grant key's ModRevision with the one read
// (so the grant is the same lease, not renewed, released or expired since)
// and puts the record with the new value on the key's own lease
// (WithIgnoreLease: the lease, the expiry and the stamp stay; a put keeps
// the key's CreateRevision, so the term stays), raising the stamp key to the
// call's stamp when later, as a release does. A ModRevision that moved (an
// Extend, a replay's mark) makes it read again, a bounded number of times.
// The record counts its proclaims (Proclaims), so Watch tells a proclaim's
// put from an Extend's or a replay's, which keep the count.

// maxProclaimAttempts bounds the reads and transactions of one Proclaim:
// only the token's own Extend or Acquire retry changes the grant between
// them, so more than a few attempts means something else is wrong.
const maxProclaimAttempts = 16

// Proclaim implements backend.ElectionBackend (see above). A token that
// holds no grant of an election key, the empty one included, answers false
// and changes nothing.
func (b *Backend) Proclaim(ctx context.Context, req backend.ProclaimRequest) (backend.ProclaimResult, error) {
	if len(req.Value) > backend.MaxValueBytes {
		return backend.ProclaimResult{}, fmt.Errorf("%w: value of %d bytes exceeds the maximum %d", backend.ErrInvalidArgument, len(req.Value), backend.MaxValueBytes)
	}
	if req.OwnerToken == "" {
		return backend.ProclaimResult{}, nil
	}
	cctx, cancel := b.call(ctx)
	defer cancel()
	gk, metaKey, stampKey := b.grantKey(req.Key, req.OwnerToken), b.metaKey(req.Key), b.stampKey(req.Key)
	stamp := encodeStamp(req.Stamp)
	for attempt := 1; attempt <= maxProclaimAttempts; attempt++ {
		cur, err := b.cli.Txn(cctx).Then(clientv3.OpGet(metaKey), clientv3.OpGet(gk)).Commit()
		if err != nil {
			return backend.ProclaimResult{}, wrap(ctx, "proclaim: read", err)
		}
		meta, grant := cur.Responses[0].GetResponseRange().Kvs, cur.Responses[1].GetResponseRange().Kvs
		if len(meta) == 0 || len(grant) == 0 {
			return backend.ProclaimResult{}, nil
		}
		kind, limit, err := readMeta(meta[0])
		if err != nil {
			return backend.ProclaimResult{}, err
		}
		if kind != backend.KindElection {
			return backend.ProclaimResult{}, nil
		}
		v, err := decodeValue(grant[0])
		if err != nil {
			return backend.ProclaimResult{}, err
		}
		v.Value = req.Value
		v.Proclaims++
		val, _ := json.Marshal(v) // the lease's expiry and TTL as they were
		resp, err := b.cli.Txn(cctx).If(clientv3.Compare(clientv3.ModRevision(gk), "=", grant[0].ModRevision)).Then(
			clientv3.OpPut(gk, string(val), clientv3.WithIgnoreLease()),
			clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value(stampKey), "<", stamp)},
				[]clientv3.Op{clientv3.OpPut(stampKey, stamp)}, nil),
			clientv3.OpGet(b.grantPrefix(req.Key), clientv3.WithPrefix()),
		).Commit()
		if err != nil {
			return backend.ProclaimResult{}, wrap(ctx, "proclaim", err)
		}
		if !resp.Succeeded {
			continue // the grant changed meanwhile (or is gone): read again
		}
		rec, err := grantsRecord(req.Key, kind, limit, resp.Responses[2].GetResponseRange().Kvs, grant[0].CreateRevision)
		return backend.ProclaimResult{Proclaimed: true, Record: rec}, err
	}
	return backend.ProclaimResult{}, fmt.Errorf("etcd proclaim %q: the grant kept changing over %d attempts: %w",
		req.Key, maxProclaimAttempts, backend.ErrUnavailable)
}

// proclaimed reports whether a grant's put (not its creation) is a
// Proclaim's: one that counted a proclaim more than the record it replaced.
// Without the previous record (compacted away) a put of a record that was
// ever proclaimed counts: the event then repeats the value the grant has.
func proclaimed(kv, prev *mvccpb.KeyValue) bool {
	v, err := decodeValue(kv)
	if err != nil || v.Proclaims == 0 {
		return false
	}
	if prev == nil {
		return true
	}
	p, err := decodeValue(prev)
	return err != nil || p.Proclaims != v.Proclaims
}
