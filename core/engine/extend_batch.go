package engine

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/proto/hlc"
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
	var rids []requestID // nil: no item has one
	for i, it := range items {
		r, rid, err := e.extendItem(it, lo, hi)
		if err != nil {
			return nil, prefixed(fieldIndex("items", i), err)
		}
		reqs[i] = r
		if rid.set() {
			if rids == nil {
				rids = make([]requestID, len(items))
			}
			rids[i] = rid
		}
	}
	e.extendIdentities(reqs, rids)
	if err := e.merge(req.GetClientStamp()); err != nil {
		return nil, err
	}
	stamp := e.clock.Now()
	for i := range reqs {
		reqs[i].Stamp = stamp
	}

	outs := make([]backend.Outcome[backend.ExtendResult], len(reqs))
	for _, wave := range extendWaves(reqs, e.batchItems()) {
		if err := e.extendWave(ctx, reqs, wave, outs); err != nil {
			return nil, backendErr(ctx, "extend", err)
		}
	}
	results := newExtendResults(len(reqs))
	for i := range reqs {
		if i == 0 || reqs[i].TTL != reqs[i-1].TTL {
			results.ttl = durationpb.New(reqs[i].TTL) // shared by the items after with the same ttl
		}
		e.extendResult(results, i, reqs[i], outs[i])
	}
	if !results.latest.IsZero() {
		e.clock.Observe(results.latest) // once, not once per lease under the clock's mutex
	}
	return &lockv1.ExtendBatchResponse{Results: results.ptrs, ServerStamp: e.stamp()}, nil
}

// extendItem validates one item (its messages name the item's fields
// alone; the caller puts items[i] before them).
func (e *Engine) extendItem(it *lockv1.ExtendBatchItem, lo, hi time.Duration) (backend.ExtendRequest, requestID, error) {
	if err := checkKey("key", it.GetKey()); err != nil {
		return backend.ExtendRequest{}, requestID{}, err
	}
	if err := checkToken(it.GetOwnerToken()); err != nil {
		return backend.ExtendRequest{}, requestID{}, err
	}
	ttl, err := checkTTL(it.GetTtl(), lo, hi)
	if err != nil {
		return backend.ExtendRequest{}, requestID{}, err
	}
	rid, err := checkRequestID(it.GetRequestId())
	if err != nil {
		return backend.ExtendRequest{}, requestID{}, err
	}
	return backend.ExtendRequest{Key: it.GetKey(), OwnerToken: it.GetOwnerToken(), TTL: ttl}, rid, nil
}

// extendIdentities sets the identity of each request reqs[i] whose item
// carried the request id rids[i] (rids nil: none did), when the backend
// keeps identities. They
// are derived into one string (identityText): a watchdog's batch carries
// an id per lease, and an identity's own allocations per item were a fifth
// of the engine's garbage per renewal. A backend in this process that
// keeps an identity keeps that string until each of its identities is
// replaced (the next renewal of each lease), a batch's few tens of KB.
func (e *Engine) extendIdentities(reqs []backend.ExtendRequest, rids []requestID) {
	n := 0
	for _, rid := range rids {
		if rid.set() {
			n++
		}
	}
	if n == 0 || !e.Info().RequestIDs {
		return
	}
	t := identityText{text: make([]byte, 0, n*2*digestTextLen)}
	var fp fingerprint
	at := make([]int, len(reqs))
	for i, r := range reqs {
		at[i] = -1
		if !rids[i].set() {
			continue
		}
		// The fingerprint of a single-key Extend's: a renewal retried as
		// an Extend, or an Extend retried in a batch, is the same request.
		fp.b = fp.b[:0]
		fp.str("extend").strs([]string{r.Key}).flag(false).str(r.OwnerToken).dur(r.TTL)
		at[i] = t.add(rids[i], fp)
	}
	text := string(t.text)
	for i, a := range at {
		if a >= 0 {
			reqs[i].Request = t.request(text, a)
		}
	}
}

// extendWave sends the chunks of one wave to the backend at once, each
// chunk's outcomes into outs at its items' indexes. The chunks of a wave
// share no key, so they may be decided in any order; sent one after the
// other, a watchdog's batch of 500 waited for two plugin round trips in
// turn, with one process idle during each.
func (e *Engine) extendWave(ctx context.Context, reqs []backend.ExtendRequest, wave [][]int, outs []backend.Outcome[backend.ExtendResult]) error {
	send := func(chunk []int) error {
		sub := make([]backend.ExtendRequest, len(chunk))
		for j, i := range chunk {
			sub[j] = reqs[i]
		}
		res, err := e.calls.ExtendBatch(ctx, sub)
		if err != nil {
			return err
		}
		for j, i := range chunk {
			outs[i] = res[j]
		}
		return nil
	}
	if len(wave) == 1 {
		return send(wave[0])
	}
	errs := make([]error, len(wave))
	var wg sync.WaitGroup
	for c, chunk := range wave {
		wg.Go(func() { errs[c] = send(chunk) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err // the batch's outcome is unknown, whichever chunk failed
		}
	}
	return nil
}

// extendResults are an ExtendBatch's answers, allocated together: a
// watchdog's batch answers hundreds of leases, and five allocations per
// lease were a good part of the server's garbage.
type extendResults struct {
	ptrs    []*lockv1.ExtendBatchResult
	results []lockv1.ExtendBatchResult
	leases  []lockv1.Lease
	ttl     *durationpb.Duration // the current item's
	latest  hlc.Timestamp        // the latest stamp of a renewed lease
	expires []timestamppb.Timestamp
	stamps  []lockv1.HlcTimestamp
}

func newExtendResults(n int) *extendResults {
	return &extendResults{
		ptrs:    make([]*lockv1.ExtendBatchResult, n),
		results: make([]lockv1.ExtendBatchResult, n),
		leases:  make([]lockv1.Lease, n),
		expires: make([]timestamppb.Timestamp, n),
		stamps:  make([]lockv1.HlcTimestamp, n),
	}
}

// extendResult sets item i's answer.
func (e *Engine) extendResult(rs *extendResults, i int, req backend.ExtendRequest, out backend.Outcome[backend.ExtendResult]) {
	res := &rs.results[i]
	rs.ptrs[i] = res
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
		res.Error = &lockv1.ItemError{Code: code, Message: msg}
		return
	}
	e.cfg.Observer.ExtendDone(out.Value.Extended)
	if !out.Value.Extended {
		return
	}
	rec := out.Value.Record
	rs.latest = hlc.Max(rs.latest, rec.Stamp)
	// lease's answer for one key, built in the batch's slabs.
	l := &rs.leases[i]
	l.Key, l.OwnerToken, l.FencingToken = rec.Key, req.OwnerToken, rec.FencingToken
	l.Ttl = rs.ttl
	if !rec.Stamp.IsZero() {
		rs.stamps[i].WallTimeNs, rs.stamps[i].Logical = rec.Stamp.WallTime, rec.Stamp.Logical
		l.Stamp = &rs.stamps[i]
	}
	if !rec.ExpiresAt.IsZero() {
		rs.expires[i].Seconds, rs.expires[i].Nanos = rec.ExpiresAt.Unix(), int32(rec.ExpiresAt.Nanosecond())
		l.ExpiresAt = &rs.expires[i]
	}
	if rec.LockDelay > 0 {
		l.LockDelay = durationpb.New(rec.LockDelay)
	}
	setShape(l, rec)
	res.Extended, res.Lease = true, l
}

// batchItems is the most requests one backend batch call carries.
func (e *Engine) batchItems() int {
	if e.cfg.Batch.MaxItems > 0 {
		return e.cfg.Batch.MaxItems
	}
	return DefaultBatchMaxItems
}

// extendParallel bounds the chunks of one wave sent at once.
const extendParallel = 4

// extendWaves orders the backend calls of an ExtendBatch: wave w holds
// the items that are the (w+1)th of their key, so every wave's keys are
// distinct (as a backend batch's must be) and a key that repeats is
// decided in the order its items came, each after the wave before has been
// answered. A wave of more than size items is split into chunks of nearly
// equal size, sent at once, at most extendParallel chunks to a wave (a
// wave beyond that many chunks becomes several waves).
func extendWaves(reqs []backend.ExtendRequest, size int) [][][]int {
	seen := make(map[string]int, len(reqs))
	var byWave [][]int
	for i, r := range reqs {
		w := seen[r.Key]
		seen[r.Key] = w + 1
		if w == len(byWave) {
			byWave = append(byWave, nil)
		}
		byWave[w] = append(byWave[w], i)
	}
	var waves [][][]int
	for _, items := range byWave {
		for len(items) > 0 {
			n := min(len(items), size*extendParallel)
			chunks := (n + size - 1) / size
			wave := make([][]int, 0, chunks)
			for c := range chunks {
				// Chunk c of n items in chunks pieces: sizes differ by at most one.
				wave = append(wave, items[c*n/chunks:(c+1)*n/chunks])
			}
			waves = append(waves, wave)
			items = items[n:]
		}
	}
	return waves
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
