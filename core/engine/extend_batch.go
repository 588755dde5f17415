package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/holdfast/holdfast/core/backend"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// MaxExtendBatchItems bounds the leases of one ExtendBatch.
const MaxExtendBatchItems = 1000

// ExtendBatch renews each item's lease for its ttl from now if its owner
// token holds it, each on its own, as Extend would: one call's cost for a
// client's every lease. A batch that could not be carried to the backend at
// all is an error; an item the backend could not decide carries its own
// error and the others' answers stand.
func (e *Engine) ExtendBatch(ctx context.Context, req *lockv1.ExtendBatchRequest) (*lockv1.ExtendBatchResponse, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	items := req.GetItems()
	switch {
	case len(items) == 0:
		return nil, invalidf("items: at least one lease to extend (1 to %d)", MaxExtendBatchItems)
	case len(items) > MaxExtendBatchItems:
		return nil, invalidf("items: %d leases exceeds the maximum %d per call", len(items), MaxExtendBatchItems)
	}
	lo, hi := e.ttlRange()
	reqs := make([]backend.ExtendRequest, len(items))
	rids := make([]requestID, len(items))
	for i, it := range items {
		field := fmt.Sprintf("items[%d]", i)
		if err := checkKey(field+".key", it.GetKey()); err != nil {
			return nil, err
		}
		if err := checkToken(it.GetOwnerToken()); err != nil {
			return nil, prefixed(field, err)
		}
		ttl, err := checkTTL(it.GetTtl(), lo, hi)
		if err != nil {
			return nil, prefixed(field, err)
		}
		if rids[i], err = checkRequestID(it.GetRequestId()); err != nil {
			return nil, prefixed(field, err)
		}
		reqs[i] = backend.ExtendRequest{Key: it.GetKey(), OwnerToken: it.GetOwnerToken(), TTL: ttl}
		// The fingerprint of a single-key Extend's: a renewal retried as an
		// Extend, or an Extend retried in a batch, is the same request.
		reqs[i].Request = e.ident(rids[i], newFingerprint("extend").strs([]string{it.GetKey()}).flag(false).str(it.GetOwnerToken()).dur(ttl))
	}
	if err := e.merge(req.GetClientStamp()); err != nil {
		return nil, err
	}
	stamp := e.clock.Now()
	for i := range reqs {
		reqs[i].Stamp = stamp
	}

	results := make([]*lockv1.ExtendBatchResult, len(reqs))
	for _, round := range batchRounds(reqs, e.batchItems()) {
		sub := make([]backend.ExtendRequest, len(round))
		for j, i := range round {
			sub[j] = reqs[i]
		}
		outs, err := e.calls.ExtendBatch(ctx, sub)
		if err != nil {
			return nil, backendErr(ctx, "extend", err)
		}
		for j, i := range round {
			results[i] = e.extendResult(reqs[i], outs[j])
		}
	}
	return &lockv1.ExtendBatchResponse{Results: results, ServerStamp: e.stamp()}, nil
}

// extendResult is one item's answer.
func (e *Engine) extendResult(req backend.ExtendRequest, out backend.Outcome[backend.ExtendResult]) *lockv1.ExtendBatchResult {
	if out.Err != nil {
		code, msg := "unavailable", out.Err.Error()
		switch {
		case errors.Is(out.Err, backend.ErrRequestConflict):
			// As Extend answers it: the caller's mistake, not the store's.
			code, msg = "invalid_argument", conflictErr("extend", "key", "owner_token", "ttl").Error()
		case errors.Is(out.Err, backend.ErrInvalidArgument):
			code = "invalid_argument"
		case errors.Is(out.Err, backend.ErrFailedPrecondition):
			code = "failed_precondition"
		}
		return &lockv1.ExtendBatchResult{Error: &lockv1.ItemError{Code: code, Message: msg}}
	}
	e.cfg.Observer.ExtendDone(out.Value.Extended)
	if !out.Value.Extended {
		return &lockv1.ExtendBatchResult{}
	}
	e.clock.Observe(out.Value.Record.Stamp)
	return &lockv1.ExtendBatchResult{Extended: true, Lease: lease(singleKey(req.Key), []backend.Record{out.Value.Record}, req.OwnerToken, req.TTL)}
}

// batchItems is the most requests one backend batch call carries.
func (e *Engine) batchItems() int {
	if e.cfg.Batch.MaxItems > 0 {
		return e.cfg.Batch.MaxItems
	}
	return DefaultBatchMaxItems
}

// batchRounds splits the indexes of reqs into batches in request order,
// each of at most size requests with distinct keys: a key that repeats goes
// to a later batch, so its requests are decided in the order they came.
func batchRounds(reqs []backend.ExtendRequest, size int) [][]int {
	var rounds [][]int
	placed := make([]bool, len(reqs))
	for left := len(reqs); left > 0; {
		var round []int
		keys := map[string]bool{}
		for i, r := range reqs {
			if placed[i] || keys[r.Key] {
				continue
			}
			if len(round) == size {
				break
			}
			keys[r.Key] = true
			placed[i] = true
			round = append(round, i)
		}
		left -= len(round)
		rounds = append(rounds, round)
	}
	return rounds
}

// prefixed puts an item's field path before an invalid-argument message
// ("ttl: ..." becomes "items[3].ttl: ...").
func prefixed(field string, err error) error {
	var ee *Error
	if errors.As(err, &ee) {
		return &Error{Kind: ee.Kind, Msg: field + "." + ee.Msg}
	}
	return err
}
