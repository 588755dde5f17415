package etcd

import (
	"context"
	"encoding/json"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/holdfast/holdfast/core/backend"
)

// Request identities (Info.RequestIDs). The identity of the last Acquire or
// Extend applied to a lock, its Acquire's replay and whether a replay was
// answered live in the lock record itself (recordValue), so they are
// written by the transaction that takes, moves or deletes the lock, are on
// its lease, and go with it. Every take writes a new record, so nothing of
// an earlier lease survives into the next one.
//
// The identity of a key's last Release is P "released/" K, without a lease:
// one small key per key released with an identity, overwritten by the next
// such release (bounded by the keys, as the stamp keys are). A repeat of
// that Release is answered true for as long as it is the last one.

func (b *Backend) releasedKey(key string) string { return b.released + key }

// releasedValue is a releasedKey's value.
type releasedValue struct {
	ID string `json:"id"`
	FP string `json:"fp"`
}

func encodeReleased(req backend.Request) string {
	v, _ := json.Marshal(releasedValue{ID: req.ID, FP: req.Fingerprint})
	return string(v)
}

// kept is the identity a record keeps.
func (v recordValue) kept() backend.Request {
	return backend.Request{ID: v.ReqID, Fingerprint: v.ReqFP}
}

// extended is v renewed by an Extend carrying req: a request id replaces
// the kept one, none keeps it; a repeat of the kept id with another
// fingerprint is a conflict.
func extended(v recordValue, req backend.Request) (recordValue, error) {
	if _, err := backend.Repeat(v.kept(), req); err != nil {
		return v, err
	}
	if req.ID != "" {
		v.ReqID, v.ReqFP = req.ID, req.Fingerprint
	}
	return v, nil
}

// replay answers an Acquire carrying req as a repeat of the one that took
// the locks kvs (of keys, every one held), when it is one: it marks them
// claimed in one transaction that compares that none changed since read.
// ok is false when it is no repeat, or when a lock changed meanwhile (the
// caller answers from what it read; the engine asks again).
func (b *Backend) replay(cctx, parent context.Context, keys []string, kvs []*mvccpb.KeyValue, req backend.Request) (
	recs []backend.Record, replay string, ok bool, err error) {
	if req.ID == "" {
		return nil, "", false, nil
	}
	var cmps []clientv3.Cmp
	var ops []clientv3.Op
	for i, kv := range kvs {
		v, err := decodeValue(kv)
		if err != nil {
			return nil, "", false, err
		}
		rep, err := backend.Repeat(v.kept(), req)
		if err != nil || !rep {
			return nil, "", false, err
		}
		if i == 0 {
			replay = v.Replay
		}
		if !v.Claimed {
			v.Claimed = true
			val, _ := json.Marshal(v)
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision))
			ops = append(ops, clientv3.OpPut(string(kv.Key), string(val), clientv3.WithIgnoreLease()))
		}
		rec, err := decodeRecord(keys[i], kv)
		if err != nil {
			return nil, "", false, err
		}
		recs = append(recs, rec)
	}
	if len(ops) > 0 {
		resp, err := b.cli.Txn(cctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return nil, "", false, wrap(parent, "acquire: replay", err)
		}
		if !resp.Succeeded {
			return nil, "", false, nil
		}
	}
	return recs, replay, true, nil
}

// replayOnly is an Acquire (of every key) that never takes a key: it
// answers a replay, or reports a holder.
func (b *Backend) replayOnly(ctx context.Context, keys []string, req backend.Request) (backend.AcquireSetResult, error) {
	cctx, cancel := b.call(ctx)
	defer cancel()
	ops := make([]clientv3.Op, len(keys))
	for i, k := range keys {
		ops[i] = clientv3.OpGet(b.lockKey(k))
	}
	resp, err := b.cli.Txn(cctx).Then(ops...).Commit()
	if err != nil {
		return backend.AcquireSetResult{}, wrap(ctx, "acquire", err)
	}
	var kvs []*mvccpb.KeyValue
	var blocker backend.Record
	for i, k := range keys {
		if got := resp.Responses[i].GetResponseRange().Kvs; len(got) > 0 {
			kvs = append(kvs, got[0])
			if blocker.Key == "" {
				if blocker, err = decodeRecord(k, got[0]); err != nil {
					return backend.AcquireSetResult{}, err
				}
			}
		}
	}
	if len(kvs) == len(keys) {
		recs, replay, ok, err := b.replay(cctx, ctx, keys, kvs, req)
		if err != nil || ok {
			return backend.AcquireSetResult{Acquired: ok, Records: recs, Replayed: ok, Replay: replay}, err
		}
	}
	return backend.AcquireSetResult{Blocker: blocker}, nil
}

// releaseGuards are what a Release (of every key) adds to its transaction
// for its request identity and Abandon: the compares that no lock was
// claimed since read (Abandon: a lock whose Acquire's replay was answered
// is left alone, abandoned=true), and the writes of the release's identity.
func (b *Backend) releaseGuards(cctx, parent context.Context, keys []string, req backend.Request, abandon bool) (
	cmps []clientv3.Cmp, ops []clientv3.Op, spared bool, err error) {
	if abandon {
		reads := make([]clientv3.Op, len(keys))
		for i, k := range keys {
			reads[i] = clientv3.OpGet(b.lockKey(k))
		}
		resp, err := b.cli.Txn(cctx).Then(reads...).Commit()
		if err != nil {
			return nil, nil, false, wrap(parent, "release", err)
		}
		for i, k := range keys {
			kvs := resp.Responses[i].GetResponseRange().Kvs
			if len(kvs) == 0 {
				return nil, nil, true, nil // gone: nothing to give back
			}
			v, err := decodeValue(kvs[0])
			if err != nil {
				return nil, nil, false, err
			}
			if v.Claimed {
				return nil, nil, true, nil
			}
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(b.lockKey(k)), "=", kvs[0].ModRevision))
		}
	}
	if req.ID != "" {
		for _, k := range keys {
			ops = append(ops, clientv3.OpPut(b.releasedKey(k), encodeReleased(req)))
		}
	}
	return cmps, ops, false, nil
}

// releasedBefore answers a Release carrying req that found the locks not
// held by its token: true when req is the identity of the last Release of
// every key (a repeat), a conflict when one kept it with another
// fingerprint.
func (b *Backend) releasedBefore(cctx, parent context.Context, keys []string, req backend.Request) (bool, error) {
	if req.ID == "" {
		return false, nil
	}
	ops := make([]clientv3.Op, len(keys))
	for i, k := range keys {
		ops[i] = clientv3.OpGet(b.releasedKey(k))
	}
	resp, err := b.cli.Txn(cctx).Then(ops...).Commit()
	if err != nil {
		return false, wrap(parent, "release", err)
	}
	for i := range keys {
		kvs := resp.Responses[i].GetResponseRange().Kvs
		if len(kvs) == 0 {
			return false, nil
		}
		var v releasedValue
		if err := json.Unmarshal(kvs[0].Value, &v); err != nil {
			return false, fmt.Errorf("etcd: released key %q is not holdfast's: %w: %w", kvs[0].Key, backend.ErrUnavailable, err)
		}
		rep, err := backend.Repeat(backend.Request{ID: v.ID, Fingerprint: v.FP}, req)
		if err != nil || !rep {
			return false, err
		}
	}
	return true, nil
}
