package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/proto/hlc"
)

// Batches (backend.BatchBackend): the mutex items of a batch are sent as
// one pgx batch, so a batch costs one round trip to PostgreSQL instead of
// one per item. Each item is its single call's own statement, decided on
// its own row exactly as that call would be: the plain statement for an
// item without a request identity, the function call of requests.go for
// one with (all SDK traffic). The statements run in the batch's one
// implicit transaction, in key order, so batches and set transactions,
// which also lock rows in key order, never wait for each other in a cycle.
// An answer counts only once that transaction committed: a batch that
// failed anywhere answers every item unavailable (nothing of it was
// applied); a decision (a conflict of request ids included) is an answer,
// never a failure of the batch. An Acquire whose plain statement saw its
// row change hands is retried alone, as the single call retries it. The
// items that are not a mutex call (grants, replay-only Acquires, keys this
// plugin granted on) run as single calls beside the batch.

var _ backend.BatchBackend = (*Backend)(nil)

// batchParallel bounds the items of a batch sent as single calls at once
// (grants, replay-only Acquires): as many as the engine makes at once for a
// backend that does not batch.
const batchParallel = 16

// AcquireBatch implements backend.BatchBackend.
func (b *Backend) AcquireBatch(ctx context.Context, reqs []backend.AcquireRequest) ([]backend.Outcome[backend.AcquireResult], error) {
	out := make([]backend.Outcome[backend.AcquireResult], len(reqs))
	plain, wait := splitBatch(ctx, reqs, out,
		func(r backend.AcquireRequest) string { return r.Key },
		func(r backend.AcquireRequest) error {
			if err := checkKey(r.Key); err != nil {
				return err
			}
			if r.OwnerToken == "" {
				return fmt.Errorf("%w: owner_token must not be empty", backend.ErrInvalidArgument)
			}
			if err := checkTTL(r.TTL); err != nil {
				return err
			}
			return checkNoDelay(r.LockDelay)
		},
		// A grant (semaphore, rwlock) is its own function call (grants.go).
		func(r backend.AcquireRequest) bool {
			return !r.ReplayOnly && r.Kind == backend.KindMutex
		},
		b.Acquire)
	again := make([]int, 0)
	kept := make(map[int]identAnswer) // lock_acquire's codeKind: completed once committed
	runBatch(ctx, b, "acquire", plain, out, func(batch *pgx.Batch, i int) {
		r := reqs[i]
		if r.Request.ID != "" {
			batch.Queue(b.ident.acquire, b.acquireArgs(r)...).QueryRow(func(row pgx.Row) error {
				a, err := scanIdent(row)
				switch {
				case err != nil:
					out[i].Err = err
				case a.code == codeKind:
					kept[i] = a
				default:
					out[i].Value, out[i].Err = b.acquired(a)
				}
				return nil
			})
			return
		}
		st := backend.NextStamp(hlc.Timestamp{}, r.Stamp)
		batch.Queue(b.sql.acquire, r.Key, digest(r.OwnerToken), r.Holder, micros(r.TTL), st.WallTime, int64(st.Logical), b.mark, b.instance).
			QueryRow(func(row pgx.Row) error {
				var acquired bool
				rec, err := scanRecord(row, &acquired)
				if errors.Is(err, pgx.ErrNoRows) {
					again = append(again, i) // changed hands meanwhile: retried alone
					return nil
				}
				out[i] = backend.Outcome[backend.AcquireResult]{Value: backend.AcquireResult{Acquired: acquired, Record: rec}, Err: err}
				return nil
			})
	}, func(i int) {
		if out[i].Err == nil && out[i].Value.Acquired {
			b.scheduled(out[i].Value.Record.Remaining)
		}
	})
	wait()
	for _, i := range again {
		if out[i].Err == nil { // the batch committed
			out[i].Value, out[i].Err = b.Acquire(ctx, reqs[i])
		}
	}
	for i, a := range kept {
		if out[i].Err == nil {
			out[i].Value, out[i].Err = b.keptOther(ctx, reqs[i].Key, a.kind, a.limit)
		}
	}
	return out, nil
}

// ReleaseBatch implements backend.BatchBackend.
func (b *Backend) ReleaseBatch(ctx context.Context, reqs []backend.ReleaseRequest) ([]backend.Outcome[bool], error) {
	out := make([]backend.Outcome[bool], len(reqs))
	plain, wait := splitBatch(ctx, reqs, out,
		func(r backend.ReleaseRequest) string { return r.Key },
		func(r backend.ReleaseRequest) error { return checkKey(r.Key) },
		// A key this plugin granted on goes alone, its grant first (grants.go).
		func(r backend.ReleaseRequest) bool {
			return r.OwnerToken != "" && !b.hints.has(r.Key)
		},
		b.Release)
	runBatch(ctx, b, "release", plain, out, func(batch *pgx.Batch, i int) {
		r := reqs[i]
		if r.Request.ID != "" {
			batch.Queue(b.ident.release, releaseArgs(r)...).QueryRow(func(row pgx.Row) error {
				var code int
				if out[i].Err = row.Scan(&code); out[i].Err == nil {
					out[i].Value, out[i].Err = released(code)
				}
				return nil
			})
			return
		}
		batch.Queue(b.sql.release, r.Key, digest(r.OwnerToken), r.Stamp.WallTime, int64(r.Stamp.Logical), r.Abandon).
			Exec(func(tag pgconn.CommandTag) error {
				out[i].Value = tag.RowsAffected() == 1
				return nil
			})
	}, nil)
	wait()
	// A token that held no mutex lock may hold a grant of the key (taken
	// through another plugin): asked once the batch committed, as a single
	// Release asks.
	for _, i := range plain {
		if out[i].Err == nil && !out[i].Value {
			out[i].Value, out[i].Err = b.releaseGrant(ctx, reqs[i])
		}
	}
	return out, nil
}

// ExtendBatch implements backend.BatchBackend.
func (b *Backend) ExtendBatch(ctx context.Context, reqs []backend.ExtendRequest) ([]backend.Outcome[backend.ExtendResult], error) {
	out := make([]backend.Outcome[backend.ExtendResult], len(reqs))
	plain, wait := splitBatch(ctx, reqs, out,
		func(r backend.ExtendRequest) string { return r.Key },
		func(r backend.ExtendRequest) error {
			if err := checkKey(r.Key); err != nil {
				return err
			}
			return checkTTL(r.TTL)
		},
		func(r backend.ExtendRequest) bool {
			return r.OwnerToken != "" && !b.hints.has(r.Key) // as in ReleaseBatch
		},
		b.Extend)
	runBatch(ctx, b, "extend", plain, out, func(batch *pgx.Batch, i int) {
		r := reqs[i]
		if r.Request.ID != "" {
			batch.Queue(b.ident.extend, extendArgs(r)...).QueryRow(func(row pgx.Row) error {
				a, err := scanIdent(row)
				if out[i].Err = err; err == nil {
					out[i].Value, out[i].Err = b.extended(a)
				}
				return nil
			})
			return
		}
		batch.Queue(b.sql.extend, r.Key, digest(r.OwnerToken), micros(r.TTL)).QueryRow(func(row pgx.Row) error {
			rec, err := scanRecord(row)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				out[i].Value = backend.ExtendResult{}
			case err == nil:
				out[i].Value = backend.ExtendResult{Extended: true, Record: rec}
			default:
				out[i].Err = err
			}
			return nil
		})
	}, func(i int) {
		if out[i].Err == nil && out[i].Value.Extended {
			b.scheduled(out[i].Value.Record.Remaining)
		}
	})
	wait()
	for _, i := range plain { // as in ReleaseBatch
		if out[i].Err == nil && !out[i].Value.Extended {
			out[i].Value, out[i].Err = b.extendGrant(ctx, reqs[i])
		}
	}
	return out, nil
}

// splitBatch checks every item (a refused one gets its error), starts the
// items that are not plain as single calls, a few at a time (wait waits
// for them), and returns the plain ones' indexes in key order.
func splitBatch[Req, Res any](ctx context.Context, reqs []Req, out []backend.Outcome[Res],
	key func(Req) string, check func(Req) error, plain func(Req) bool, single func(context.Context, Req) (Res, error),
) (batched []int, wait func()) {
	var alone []int
	for i, r := range reqs {
		if out[i].Err = check(r); out[i].Err != nil {
			continue
		}
		if plain(r) {
			batched = append(batched, i)
		} else {
			alone = append(alone, i)
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		sem := make(chan struct{}, batchParallel)
		var each sync.WaitGroup
		for _, i := range alone {
			sem <- struct{}{}
			each.Go(func() {
				defer func() { <-sem }()
				out[i].Value, out[i].Err = single(ctx, reqs[i])
			})
		}
		each.Wait()
	})
	slices.SortFunc(batched, func(x, y int) int { return strings.Compare(key(reqs[x]), key(reqs[y])) })
	return batched, wg.Wait
}

// runBatch sends the statements queue adds for the items idx as one pgx
// batch and sets their outcomes: an item's own error, or every item's
// when the batch as a whole failed (then nothing of it was applied); after
// runs for each item of a committed batch.
func runBatch[Res any](ctx context.Context, b *Backend, op string, idx []int, out []backend.Outcome[Res],
	queue func(*pgx.Batch, int), after func(int),
) {
	if len(idx) == 0 {
		return
	}
	ctx, done, err := b.call(ctx)
	if err != nil {
		for _, i := range idx {
			out[i].Err = err
		}
		return
	}
	defer done()
	batch := &pgx.Batch{}
	for _, i := range idx {
		queue(batch, i)
	}
	err = b.pool.SendBatch(ctx, batch).Close()
	for _, i := range idx {
		switch {
		case err != nil:
			out[i] = backend.Outcome[Res]{Err: b.wrap(ctx, op+" (a batch of "+strconv.Itoa(len(idx))+")", err)}
		case errors.Is(out[i].Err, backend.ErrRequestConflict):
			// an answer, as the single call gives it
		case out[i].Err != nil:
			out[i].Err = b.wrap(ctx, op, out[i].Err)
		case after != nil:
			after(i)
		}
	}
}
