package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/proto/hlc"
)

// MaxKeys is the most keys one AcquireSet takes: one transaction locks
// every row of the set, so the bound keeps a set's transaction short.
const MaxKeys = 64

var _ backend.SetBackend = (*Backend)(nil)

// setStatements are the SQL texts of the set calls. Each call is one
// transaction: it first locks the rows of every key in byte order (FOR
// UPDATE, after inserting free rows for keys that have none), so two sets
// that share keys wait for each other instead of deadlocking, and a
// single-key statement, which locks one row, cannot close a cycle either.
type setStatements struct {
	ensure, lock, mark, take, claim, release, extend string
}

func newSetStatements(n names) setStatements {
	return setStatements{
		// $1 keys (sorted). A free row (owner NULL) for every key without
		// one, so that every key of the set has a row to lock; free rows
		// announce nothing and the cleaner deletes them after
		// idle_retention as it does any other.
		ensure: `INSERT INTO ` + n.locks + ` (key, owner, holder, fencing, expires_at, stamp_wall, stamp_logical, changed_at)
SELECT k, NULL, '', 0, NULL, 0, 0, clock_timestamp() FROM unnest($1::text[]) AS k ORDER BY k
ON CONFLICT (key) DO NOTHING`,

		// $1 keys. Locks every row in key order; held says whether the row
		// holds a live lease, owned whether it is under the digest $2.
		lock: `SELECT owner IS NOT NULL AND expires_at > clock_timestamp(), owner IS NOT DISTINCT FROM $2::bytea, kind, lim,
	coalesce(request_id, ''), coalesce(request_fp, ''), coalesce(replay, ''), claimed,
	coalesce(released_id, ''), coalesce(released_fp, ''), coalesce(released_until > clock_timestamp(), false),
	stamp_wall, stamp_logical,
	key, fencing, holder, coalesce(expires_at, 'epoch'), stamp_wall, stamp_logical,
	coalesce((extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint, 0)
FROM ` + n.locks + ` WHERE key = ANY($1::text[]) ORDER BY key FOR UPDATE`,

		// $1 key: a failed AcquireSet marks the lease that blocked it
		// (notify=contended), as a failed Acquire does.
		mark: `UPDATE ` + n.locks + ` SET contended = true WHERE key = $1 AND NOT contended`,

		// $1 keys, $2 owner digest, $3 holder, $4 ttl µs, $5/$6 the set's
		// stamp, $7 acquired_by, $8/$9 request identity ('' for none), $10
		// replay. nextval() after the rows are locked, as in Acquire.
		take: `UPDATE ` + n.locks + ` SET owner = $2, holder = $3, fencing = nextval('` + n.fencing + `'),
	expires_at = clock_timestamp() + $4::bigint * interval '1 microsecond',
	stamp_wall = $5, stamp_logical = $6, changed_at = clock_timestamp(), contended = false, acquired_by = $7,
	request_id = nullif($8, ''), request_fp = nullif($9, ''), replay = nullif($10, ''), claimed = false
WHERE key = ANY($1::text[])
RETURNING ` + recordCols,

		// $1 keys: a replay of the request that took them was answered.
		claim: `UPDATE ` + n.locks + ` SET claimed = true WHERE key = ANY($1::text[])`,

		// $1 keys, $3/$4 stamp (the later of it and the row's is kept),
		// $5/$6 the release's identity, kept until the lease would have
		// expired ('' for none: the last one is forgotten).
		release: `UPDATE ` + n.locks + ` AS l SET
	owner = NULL, holder = '', expires_at = NULL, changed_at = clock_timestamp(),
	request_id = NULL, request_fp = NULL, replay = NULL, claimed = false,
	released_id = nullif($5, ''), released_fp = nullif($6, ''),
	released_until = CASE WHEN $5 = '' THEN NULL ELSE l.expires_at END,
	(stamp_wall, stamp_logical) = (
		SELECT CASE WHEN ($3::bigint, $4::bigint) > (l.stamp_wall, l.stamp_logical) THEN $3::bigint ELSE l.stamp_wall END,
		       CASE WHEN ($3::bigint, $4::bigint) > (l.stamp_wall, l.stamp_logical) THEN $4::bigint ELSE l.stamp_logical END)
WHERE key = ANY($1::text[]) AND owner = $2`,

		// $1 keys, $3 ttl µs, $4/$5 the extend's identity, kept in place of
		// the lease's ('' keeps the lease's own).
		extend: `UPDATE ` + n.locks + ` SET
	expires_at = clock_timestamp() + $3::bigint * interval '1 microsecond', changed_at = clock_timestamp(),
	request_id = coalesce(nullif($4, ''), request_id), request_fp = CASE WHEN $4 = '' THEN request_fp ELSE $5 END
WHERE key = ANY($1::text[]) AND owner = $2
RETURNING ` + recordCols,
	}
}

// lockedRow is one row of a set, locked by its transaction.
type lockedRow struct {
	held, owned bool
	// request is the identity kept with the lease, replay its Acquire's
	// replay, claimed whether a replay was answered; released is the
	// identity of the key's last Release, live while that lease would
	// still have run.
	request      backend.Request
	replay       string
	claimed      bool
	released     backend.Request
	releasedLive bool
	stamp        hlc.Timestamp
	rec          backend.Record
	// kind and limit: a key of another kind than a mutex ('') holds
	// grants (grants.go) and blocks every set.
	kind  string
	limit int
}

// lockRows locks the row of every key in key order and reads them; with
// ensure, it first makes a free row for every key that has none.
func (b *Backend) lockRows(ctx context.Context, tx pgx.Tx, keys []string, owner []byte, ensure bool) ([]lockedRow, error) {
	if ensure {
		if _, err := tx.Exec(ctx, b.sets.ensure, keys); err != nil {
			return nil, err
		}
	}
	rows, err := tx.Query(ctx, b.sets.lock, keys, owner)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (lockedRow, error) {
		var r lockedRow
		var wall, lg int64
		rec, err := scanRecord(row, &r.held, &r.owned, &r.kind, &r.limit, &r.request.ID, &r.request.Fingerprint, &r.replay, &r.claimed,
			&r.released.ID, &r.released.Fingerprint, &r.releasedLive, &wall, &lg)
		r.rec, r.stamp = rec, hlc.Timestamp{WallTime: wall, Logical: uint32(lg)}
		return r, err
	})
}

// setKeys checks a set's keys and returns them sorted: the order every
// set transaction locks rows in.
func setKeys(keys []string) ([]string, error) {
	if len(keys) < 1 || len(keys) > MaxKeys {
		return nil, fmt.Errorf("%w: a set names %d keys; the postgres backend takes 1 to %d",
			backend.ErrInvalidArgument, len(keys), MaxKeys)
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	for i, k := range sorted {
		if err := checkKey(k); err != nil {
			return nil, err
		}
		if i > 0 && sorted[i-1] == k {
			return nil, fmt.Errorf("%w: key %q is named twice in one set", backend.ErrInvalidArgument, k)
		}
	}
	return sorted, nil
}

// checkNoDelay refuses a lock-delay: the backend keeps none (Info says
// MaxLockDelay 0, so the engine never sends one).
func checkNoDelay(d time.Duration) error {
	if d != 0 {
		return fmt.Errorf("%w: lock_delay %s: the postgres backend keeps no lock-delay", backend.ErrInvalidArgument, d)
	}
	return nil
}

// collectRecords reads the rows of a statement returning recordCols.
func collectRecords(rows pgx.Rows, err error) ([]backend.Record, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (backend.Record, error) { return scanRecord(row) })
}

// inOrder returns recs ordered as keys.
func inOrder(keys []string, recs []backend.Record) []backend.Record {
	out := make([]backend.Record, 0, len(keys))
	for _, k := range keys {
		i := slices.IndexFunc(recs, func(r backend.Record) bool { return r.Key == k })
		if i >= 0 {
			out = append(out, recs[i])
		}
	}
	return out
}

func quoteKeys(keys []string) string {
	q := make([]string, len(keys))
	for i, k := range keys {
		q[i] = strconv.Quote(k)
	}
	return strings.Join(q, " ")
}

// inTx runs f in one transaction of the pool, bounded by call_timeout.
func (b *Backend) inTx(ctx context.Context, op string, keys []string, f func(context.Context, pgx.Tx) error) error {
	ctx, done, err := b.call(ctx)
	if err != nil {
		return err
	}
	defer done()
	if err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { return f(ctx, tx) }); err != nil {
		if errors.Is(err, backend.ErrInvalidArgument) || errors.Is(err, backend.ErrRequestConflict) {
			return err
		}
		return b.wrap(ctx, op+" "+quoteKeys(keys), err)
	}
	return nil
}

// AcquireSet implements backend.SetBackend: one transaction locks every
// key's row, and takes them all only if none holds a live lease.
func (b *Backend) AcquireSet(ctx context.Context, req backend.AcquireSetRequest) (backend.AcquireSetResult, error) {
	claimed := make([]string, len(req.Claims))
	for i, c := range req.Claims {
		claimed[i] = c.Key
	}
	keys, err := setKeys(claimed)
	if err != nil {
		return backend.AcquireSetResult{}, err
	}
	if req.OwnerToken == "" {
		return backend.AcquireSetResult{}, fmt.Errorf("%w: owner_token must not be empty", backend.ErrInvalidArgument)
	}
	if err := checkTTL(req.TTL); err != nil {
		return backend.AcquireSetResult{}, err
	}
	if err := checkNoDelay(req.LockDelay); err != nil {
		return backend.AcquireSetResult{}, err
	}
	owner := digest(req.OwnerToken)
	var res backend.AcquireSetResult
	err = b.inTx(ctx, "acquire set", keys, func(ctx context.Context, tx pgx.Tx) error {
		rows, err := b.lockRows(ctx, tx, keys, owner, true)
		if err != nil {
			return err
		}
		if replayed, ok, err := replaySet(rows, req.Request); err != nil || ok {
			if ok {
				if _, err := tx.Exec(ctx, b.sets.claim, keys); err != nil {
					return err
				}
				res = backend.AcquireSetResult{Acquired: true, Replayed: true, Replay: replayed, Records: inOrder(claimed, recordsOf(rows))}
			}
			return err
		}
		stamp := req.Stamp
		for _, r := range rows {
			if r.kind != "" {
				kind, _ := kindByName(r.kind)
				res = backend.AcquireSetResult{Blocker: backend.Record{Key: r.rec.Key, Kind: kind, Limit: r.limit}}
				return nil
			}
			if r.held {
				res = backend.AcquireSetResult{Blocker: r.rec}
				if b.mark {
					_, err := tx.Exec(ctx, b.sets.mark, r.rec.Key)
					return err
				}
				return nil
			}
			stamp = backend.NextStamp(r.stamp, stamp)
		}
		if req.ReplayOnly {
			return nil
		}
		recs, err := collectRecords(tx.Query(ctx, b.sets.take, keys, owner, req.Holder, micros(req.TTL),
			stamp.WallTime, int64(stamp.Logical), b.instance, req.Request.ID, req.Request.Fingerprint, req.Replay))
		if err != nil {
			return err
		}
		if len(recs) != len(keys) {
			return fmt.Errorf("took %d of the set's %d rows", len(recs), len(keys))
		}
		res = backend.AcquireSetResult{Acquired: true, Records: inOrder(claimed, recs)}
		return nil
	})
	if err != nil {
		return backend.AcquireSetResult{}, err
	}
	if res.Acquired {
		b.scheduled(res.Records[0].Remaining)
	}
	return res, nil
}

// ReleaseSet implements backend.SetBackend: one transaction locks every
// key's row and frees them all only if the owner token holds every one.
func (b *Backend) ReleaseSet(ctx context.Context, req backend.ReleaseSetRequest) (bool, error) {
	keys, err := setKeys(req.Keys)
	if err != nil {
		return false, err
	}
	if req.OwnerToken == "" {
		return false, nil
	}
	owner := digest(req.OwnerToken)
	released := false
	err = b.inTx(ctx, "release set", keys, func(ctx context.Context, tx pgx.Tx) error {
		rows, ok, err := b.ownsAll(ctx, tx, keys, owner)
		if err != nil {
			return err
		}
		if !ok {
			// A repeat of the Release that freed every key is answered
			// true, as that one was.
			released, err = releasedBy(rows, len(keys), req.Request)
			return err
		}
		for _, r := range rows {
			if req.Abandon && r.claimed {
				return nil // a replay of its Acquire was answered: not abandoned
			}
		}
		tag, err := tx.Exec(ctx, b.sets.release, keys, owner, req.Stamp.WallTime, int64(req.Stamp.Logical),
			req.Request.ID, req.Request.Fingerprint)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != int64(len(keys)) {
			return fmt.Errorf("released %d of the set's %d rows", tag.RowsAffected(), len(keys))
		}
		released = true
		return nil
	})
	return released, err
}

// ExtendSet implements backend.SetBackend, as ReleaseSet; every key keeps
// its acquisition stamp.
func (b *Backend) ExtendSet(ctx context.Context, req backend.ExtendSetRequest) (backend.ExtendSetResult, error) {
	keys, err := setKeys(req.Keys)
	if err != nil {
		return backend.ExtendSetResult{}, err
	}
	if err := checkTTL(req.TTL); err != nil {
		return backend.ExtendSetResult{}, err
	}
	if req.OwnerToken == "" {
		return backend.ExtendSetResult{}, nil
	}
	owner := digest(req.OwnerToken)
	var res backend.ExtendSetResult
	err = b.inTx(ctx, "extend set", keys, func(ctx context.Context, tx pgx.Tx) error {
		rows, ok, err := b.ownsAll(ctx, tx, keys, owner)
		if err != nil || !ok {
			return err
		}
		for _, r := range rows {
			if _, err := backend.Repeat(r.request, req.Request); err != nil {
				return err
			}
		}
		recs, err := collectRecords(tx.Query(ctx, b.sets.extend, keys, owner, micros(req.TTL),
			req.Request.ID, req.Request.Fingerprint))
		if err != nil {
			return err
		}
		if len(recs) != len(keys) {
			return fmt.Errorf("extended %d of the set's %d rows", len(recs), len(keys))
		}
		res = backend.ExtendSetResult{Extended: true, Records: inOrder(req.Keys, recs)}
		return nil
	})
	if err != nil {
		return backend.ExtendSetResult{}, err
	}
	if res.Extended {
		b.scheduled(res.Records[0].Remaining)
	}
	return res, nil
}

// ownsAll locks the rows of keys and reports whether the digest holds a
// live lease on every one.
func (b *Backend) ownsAll(ctx context.Context, tx pgx.Tx, keys []string, owner []byte) ([]lockedRow, bool, error) {
	rows, err := b.lockRows(ctx, tx, keys, owner, false)
	if err != nil {
		return nil, false, err
	}
	if len(rows) != len(keys) {
		return rows, false, nil
	}
	for _, r := range rows {
		if !r.held || !r.owned {
			return rows, false, nil
		}
	}
	return rows, true, nil
}

// replaySet says whether an Acquire with req is a repeat of the one that
// took every row (ok, with that Acquire's replay): every row held under
// req's id by one owner. A repeat of a kept id with another fingerprint is
// a conflict.
func replaySet(rows []lockedRow, req backend.Request) (string, bool, error) {
	if req.ID == "" {
		return "", false, nil
	}
	rep := true
	for _, r := range rows {
		if !r.held {
			rep = false
			continue
		}
		ok, err := backend.Repeat(r.request, req)
		if err != nil {
			return "", false, err
		}
		rep = rep && ok // one id names one Acquire, so one lease
	}
	if !rep || len(rows) == 0 {
		return "", false, nil
	}
	return rows[0].replay, true, nil
}

// releasedBy says whether req is the identity of the Release that freed
// every one of the n keys of rows, within that lease's life.
func releasedBy(rows []lockedRow, n int, req backend.Request) (bool, error) {
	if req.ID == "" || len(rows) != n {
		return false, nil
	}
	for _, r := range rows {
		ok, err := backend.Repeat(r.released, req)
		if err != nil || !ok || !r.releasedLive {
			return false, err
		}
	}
	return true, nil
}

// recordsOf is the lock of every row.
func recordsOf(rows []lockedRow) []backend.Record {
	out := make([]backend.Record, len(rows))
	for i, r := range rows {
		out[i] = r.rec
	}
	return out
}
