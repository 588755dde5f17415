package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/proto/hlc"
)

// Calls of one mutex key that carry a request identity (schema v6). All SDK
// traffic carries one, so these are the common calls, not the exception:
// each is one call of a function that locks the key's row (FOR UPDATE, or
// inserts it when the key has none), compares and keeps the identity and
// decides, in one round trip, where the set transaction they used before
// (sets.go) took four or five (BEGIN, the free row, the row lock, the
// change, COMMIT) and held a pooled connection across them. The functions
// decide exactly as AcquireSet, ReleaseSet and ExtendSet do for a set of
// one key; a batch queues them beside its plain statements (batch.go), so a
// batch of such items is one round trip too.
//
//   - lock_acquire answers a repeat of the Acquire that took the live lease
//     (the same request id and fingerprint: marks it claimed and answers it
//     replayed; another fingerprint: a conflict), refuses a key kept with
//     another kind, reports a live holder (marking it contended under
//     notify=contended, as a failed Acquire does), and otherwise takes the
//     row: nextval() after the row lock, NextStamp of the row's stamp, the
//     identity and replay kept with the lease. A key without a row gets the
//     lease in the INSERT itself.
//   - lock_release frees the row only when the owner digest holds its live
//     lease (and, when abandoning, no replay of its Acquire was answered),
//     keeping the release's identity until the lease would have expired; a
//     repeat of the key's last Release within that time answers true.
//   - lock_extend renews the owner's live lease and keeps the extend's
//     identity in place of the lease's.
//
// Codes answered (r_code): 1 taken or done, 0 not (a live holder, not the
// owner's), 2 a repeat answered as the first attempt was, 3 the key is kept
// with another kind (r_kind, r_lim), -1 the request id was used with other
// arguments. A function never raises on a decision, so one item's answer
// never fails the batch it runs in.
const (
	codeConflict = -1
	codeNo       = 0
	codeDone     = 1
	codeReplayed = 2
	codeKind     = 3
)

func migrationV6(n names) string {
	// rec fills the record columns (recordCols' order) from the locked row l.
	const rec = `SELECT l.key, l.fencing, l.holder, coalesce(l.expires_at, 'epoch'), l.stamp_wall, l.stamp_logical,
			coalesce((extract(epoch FROM l.expires_at - clock_timestamp()) * 1000000)::bigint, 0)
		INTO r_key, r_fencing, r_holder, r_expires, r_wall, r_logical, r_remaining;`
	const returning = `RETURNING t.key, t.fencing, t.holder, t.expires_at, t.stamp_wall, t.stamp_logical,
			(extract(epoch FROM t.expires_at - clock_timestamp()) * 1000000)::bigint
		INTO r_key, r_fencing, r_holder, r_expires, r_wall, r_logical, r_remaining;`
	const out = `OUT r_code integer, OUT r_replay text, OUT r_kind text, OUT r_lim integer,
	OUT r_key text, OUT r_fencing bigint, OUT r_holder text, OUT r_expires timestamptz,
	OUT r_wall bigint, OUT r_logical bigint, OUT r_remaining bigint`
	// defaults: what a code without a record answers.
	const defaults = `r_code := 0; r_replay := ''; r_kind := ''; r_lim := 1;
	r_key := p_key; r_fencing := 0; r_holder := ''; r_expires := 'epoch'; r_wall := 0; r_logical := 0; r_remaining := 0;`
	ttl := `clock_timestamp() + p_ttl_us * interval '1 microsecond'`
	return `CREATE OR REPLACE FUNCTION ` + n.acquireL + `(p_key text, p_owner bytea, p_holder text, p_ttl_us bigint,
	p_wall bigint, p_logical bigint, p_mark boolean, p_instance bigint, p_rid text, p_rfp text, p_replay text,
	` + out + `)
LANGUAGE plpgsql AS $fn$
DECLARE
	l record;
	held boolean;
	w bigint;
	lg bigint;
BEGIN
	` + defaults + `
	-- The common case first: the key is free (or expired, or has no row)
	-- and this statement takes it. ON CONFLICT locks the row before its
	-- WHERE reads the latest version, and nextval() is drawn after that.
	INSERT INTO ` + n.locks + ` AS t (key, owner, holder, fencing, expires_at, stamp_wall, stamp_logical, changed_at,
		acquired_by, request_id, request_fp, replay)
	VALUES (p_key, p_owner, p_holder, nextval('` + n.fencing + `'), ` + ttl + `, p_wall, p_logical, clock_timestamp(),
		p_instance, nullif(p_rid, ''), nullif(p_rfp, ''), nullif(p_replay, ''))
	ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, holder = excluded.holder,
		fencing = nextval('` + n.fencing + `'), expires_at = ` + ttl + `,
		(stamp_wall, stamp_logical) = (
			SELECT CASE WHEN (excluded.stamp_wall, excluded.stamp_logical) >= (nx.w, nx.lg) THEN excluded.stamp_wall ELSE nx.w END,
			       CASE WHEN (excluded.stamp_wall, excluded.stamp_logical) >= (nx.w, nx.lg) THEN excluded.stamp_logical ELSE nx.lg END
			FROM (SELECT CASE WHEN t.stamp_logical >= 4294967295 THEN t.stamp_wall + 1 ELSE t.stamp_wall END AS w,
			             CASE WHEN t.stamp_logical >= 4294967295 THEN 0 ELSE t.stamp_logical + 1 END AS lg) AS nx),
		changed_at = clock_timestamp(), contended = false, acquired_by = excluded.acquired_by,
		request_id = excluded.request_id, request_fp = excluded.request_fp, replay = excluded.replay, claimed = false
	WHERE t.kind = '' AND (t.owner IS NULL OR t.expires_at <= clock_timestamp())
	` + returning + `
	IF FOUND THEN
		r_code := 1;
		RETURN;
	END IF;
	-- Not taken: the row exists and is locked by the statement above (or
	-- was deleted since, by the cleaner, and then is made again here).
	LOOP
		SELECT * INTO l FROM ` + n.locks + ` t WHERE t.key = p_key FOR UPDATE;
		EXIT WHEN FOUND;
		INSERT INTO ` + n.locks + ` (key, owner, holder, fencing, expires_at, stamp_wall, stamp_logical, changed_at)
		VALUES (p_key, NULL, '', 0, NULL, 0, 0, clock_timestamp()) ON CONFLICT (key) DO NOTHING;
	END LOOP;
	-- (the INSERT's INTO set the record columns to NULL)
	` + defaults + `
	held := l.owner IS NOT NULL AND l.expires_at > clock_timestamp();
	IF p_rid <> '' AND held AND coalesce(l.request_id, '') = p_rid THEN
		IF coalesce(l.request_fp, '') <> p_rfp THEN
			r_code := -1;
			RETURN;
		END IF;
		UPDATE ` + n.locks + ` t SET claimed = true WHERE t.key = p_key;
		` + rec + `
		r_code := 2;
		r_replay := coalesce(l.replay, '');
		RETURN;
	END IF;
	IF l.kind <> '' THEN
		r_code := 3;
		r_kind := l.kind;
		r_lim := l.lim;
		RETURN;
	END IF;
	IF held THEN
		IF p_mark AND NOT l.contended THEN
			UPDATE ` + n.locks + ` t SET contended = true WHERE t.key = p_key;
		END IF;
		` + rec + `
		RETURN;
	END IF;
	IF l.stamp_logical >= 4294967295 THEN
		w := l.stamp_wall + 1;
		lg := 0;
	ELSE
		w := l.stamp_wall;
		lg := l.stamp_logical + 1;
	END IF;
	IF (p_wall, p_logical) >= (w, lg) THEN
		w := p_wall;
		lg := p_logical;
	END IF;
	UPDATE ` + n.locks + ` t SET owner = p_owner, holder = p_holder, fencing = nextval('` + n.fencing + `'),
		expires_at = ` + ttl + `, stamp_wall = w, stamp_logical = lg, changed_at = clock_timestamp(),
		contended = false, acquired_by = p_instance,
		request_id = nullif(p_rid, ''), request_fp = nullif(p_rfp, ''), replay = nullif(p_replay, ''), claimed = false
	WHERE t.key = p_key
	` + returning + `
	r_code := 1;
END
$fn$;

CREATE OR REPLACE FUNCTION ` + n.releaseL + `(p_key text, p_owner bytea, p_wall bigint, p_logical bigint,
	p_rid text, p_rfp text, p_abandon boolean)
RETURNS integer LANGUAGE plpgsql AS $fn$
DECLARE
	l record;
BEGIN
	FOR attempt IN 1..2 LOOP
		-- The common case: the owner's live lease, given back.
		UPDATE ` + n.locks + ` t SET
			owner = NULL, holder = '', expires_at = NULL, changed_at = clock_timestamp(),
			request_id = NULL, request_fp = NULL, replay = NULL, claimed = false,
			released_id = nullif(p_rid, ''), released_fp = nullif(p_rfp, ''),
			released_until = CASE WHEN p_rid = '' THEN NULL ELSE t.expires_at END,
			(stamp_wall, stamp_logical) = (
				SELECT CASE WHEN (p_wall, p_logical) > (t.stamp_wall, t.stamp_logical) THEN p_wall ELSE t.stamp_wall END,
				       CASE WHEN (p_wall, p_logical) > (t.stamp_wall, t.stamp_logical) THEN p_logical ELSE t.stamp_logical END)
		WHERE t.key = p_key AND t.owner = p_owner AND t.expires_at > clock_timestamp() AND NOT (p_abandon AND t.claimed);
		IF FOUND THEN
			RETURN 1;
		END IF;
		EXIT WHEN attempt = 2;
		-- Not the owner's, or abandoned after a replay: decide on the
		-- locked row (a repeat of the key's last Release answers true).
		SELECT t.owner IS NOT NULL AND t.expires_at > clock_timestamp() AND t.owner = p_owner AS mine, t.claimed,
		coalesce(t.released_id, '') AS rid, coalesce(t.released_fp, '') AS rfp,
		coalesce(t.released_until > clock_timestamp(), false) AS live
		INTO l FROM ` + n.locks + ` t WHERE t.key = p_key FOR UPDATE;
		IF NOT FOUND THEN
			RETURN 0;
		END IF;
		IF NOT l.mine THEN
			IF p_rid <> '' AND l.rid = p_rid THEN
				IF l.rfp <> p_rfp THEN
					RETURN -1;
				END IF;
				IF l.live THEN
					RETURN 2;
				END IF;
			END IF;
			RETURN 0;
		END IF;
		IF p_abandon AND l.claimed THEN
			RETURN 0; -- a replay of its Acquire was answered: not abandoned
		END IF;
		-- The owner's after all (its Acquire committed meanwhile): the
		-- UPDATE again, on the row now locked.
	END LOOP;
	RETURN 0;
END
$fn$;

CREATE OR REPLACE FUNCTION ` + n.extendL + `(p_key text, p_owner bytea, p_ttl_us bigint, p_rid text, p_rfp text,
	` + out + `)
LANGUAGE plpgsql AS $fn$
BEGIN
	` + defaults + `
	-- The common case: the owner's live lease, renewed (unless the id was
	-- used with other arguments).
	UPDATE ` + n.locks + ` t SET expires_at = ` + ttl + `, changed_at = clock_timestamp(),
		request_id = coalesce(nullif(p_rid, ''), t.request_id),
		request_fp = CASE WHEN p_rid = '' THEN t.request_fp ELSE p_rfp END
	WHERE t.key = p_key AND t.owner = p_owner AND t.expires_at > clock_timestamp()
		AND NOT (p_rid <> '' AND coalesce(t.request_id, '') = p_rid AND coalesce(t.request_fp, '') <> p_rfp)
	` + returning + `
	IF NOT FOUND THEN
		` + defaults + `
		PERFORM FROM ` + n.locks + ` t WHERE t.key = p_key AND t.owner = p_owner AND t.expires_at > clock_timestamp()
			AND p_rid <> '' AND coalesce(t.request_id, '') = p_rid AND coalesce(t.request_fp, '') <> p_rfp;
		IF FOUND THEN
			r_code := -1;
		END IF;
		RETURN;
	END IF;
	r_code := 1;
END
$fn$;`
}

// identStatements call the functions above, and answer a replay-only
// Acquire (replayOnly).
type identStatements struct {
	acquire, release, extend string
	// peek reads a key's row without locking it; claim marks a replay of
	// the lease with fencing token $2 answered, mark marks that lease
	// contended: each writes only while that lease is still live ($1 key,
	// $3 the request id for claim).
	peek, claim, mark string
}

func newIdentStatements(n names) identStatements {
	const cols = `r_code, r_replay, r_kind, r_lim, r_key, r_fencing, r_holder, r_expires, r_wall, r_logical, r_remaining`
	return identStatements{
		acquire: `SELECT ` + cols + ` FROM ` + n.acquireL + `($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
		release: `SELECT ` + n.releaseL + `($1, $2, $3, $4, $5, $6, $7)`,
		extend:  `SELECT ` + cols + ` FROM ` + n.extendL + `($1, $2, $3, $4, $5)`,
		peek: `SELECT owner IS NOT NULL AND expires_at > clock_timestamp(), kind, lim,
	coalesce(request_id, ''), coalesce(request_fp, ''), contended,
	key, fencing, holder, coalesce(expires_at, 'epoch'), stamp_wall, stamp_logical,
	coalesce((extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint, 0)
FROM ` + n.locks + ` WHERE key = $1`,
		claim: `UPDATE ` + n.locks + ` SET claimed = true
WHERE key = $1 AND fencing = $2 AND owner IS NOT NULL AND expires_at > clock_timestamp() AND request_id = $3
RETURNING coalesce(replay, ''), ` + recordCols,
		mark: `UPDATE ` + n.locks + ` SET contended = true
WHERE key = $1 AND fencing = $2 AND owner IS NOT NULL AND expires_at > clock_timestamp()`,
	}
}

// identAnswer is one row of lock_acquire or lock_extend.
type identAnswer struct {
	code   int
	replay string
	kind   string
	limit  int
	rec    backend.Record
}

func scanIdent(row pgx.Row) (identAnswer, error) {
	var a identAnswer
	rec, err := scanRecord(row, &a.code, &a.replay, &a.kind, &a.limit)
	a.rec = rec
	return a, err
}

// acquireArgs are lock_acquire's arguments for req.
func (b *Backend) acquireArgs(req backend.AcquireRequest) []any {
	// NextStamp against the zero stamp, as in Acquire: the function raises
	// it past the row's stamp.
	st := backend.NextStamp(hlc.Timestamp{}, req.Stamp)
	return []any{req.Key, digest(req.OwnerToken), req.Holder, micros(req.TTL), st.WallTime, int64(st.Logical),
		b.mark, b.instance, req.Request.ID, req.Request.Fingerprint, req.Replay}
}

// acquired is the answer of lock_acquire as an Acquire's result, but for
// codeKind, which the caller completes with keptOther (a read of the key's
// grants, so after a batch has committed). The caller schedules the
// cleaner for a lease taken.
func (b *Backend) acquired(a identAnswer) (backend.AcquireResult, error) {
	switch a.code {
	case codeConflict:
		return backend.AcquireResult{}, errConflict
	case codeDone:
		return backend.AcquireResult{Acquired: true, Record: a.rec}, nil
	case codeReplayed:
		return backend.AcquireResult{Acquired: true, Record: a.rec, Replayed: true, Replay: a.replay}, nil
	}
	return backend.AcquireResult{Record: a.rec}, nil
}

// acquireIdent is Acquire of a mutex with a request identity: one call of
// lock_acquire.
func (b *Backend) acquireIdent(ctx context.Context, req backend.AcquireRequest) (backend.AcquireResult, error) {
	ctx, done, err := b.call(ctx)
	if err != nil {
		return backend.AcquireResult{}, err
	}
	defer done()
	a, err := scanIdent(b.pool.QueryRow(ctx, b.ident.acquire, b.acquireArgs(req)...))
	if err != nil {
		return backend.AcquireResult{}, b.wrap(ctx, "acquire "+strconv.Quote(req.Key), err)
	}
	if a.code == codeKind {
		return b.keptOther(ctx, req.Key, a.kind, a.limit)
	}
	res, err := b.acquired(a)
	if res.Acquired {
		b.scheduled(res.Record.Remaining)
	}
	return res, err
}

// releaseArgs are lock_release's arguments for req.
func releaseArgs(req backend.ReleaseRequest) []any {
	return []any{req.Key, digest(req.OwnerToken), req.Stamp.WallTime, int64(req.Stamp.Logical),
		req.Request.ID, req.Request.Fingerprint, req.Abandon}
}

// released is the answer of lock_release.
func released(code int) (bool, error) {
	if code == codeConflict {
		return false, errConflict
	}
	return code == codeDone || code == codeReplayed, nil
}

// releaseIdent is Release of a mutex lock with a request identity (and an
// owner token): one call of lock_release.
func (b *Backend) releaseIdent(ctx context.Context, req backend.ReleaseRequest) (bool, error) {
	ctx, done, err := b.call(ctx)
	if err != nil {
		return false, err
	}
	defer done()
	var code int
	if err := b.pool.QueryRow(ctx, b.ident.release, releaseArgs(req)...).Scan(&code); err != nil {
		return false, b.wrap(ctx, "release "+strconv.Quote(req.Key), err)
	}
	return released(code)
}

// extendArgs are lock_extend's arguments for req.
func extendArgs(req backend.ExtendRequest) []any {
	return []any{req.Key, digest(req.OwnerToken), micros(req.TTL), req.Request.ID, req.Request.Fingerprint}
}

// extended is the answer of lock_extend as an Extend's result.
func (b *Backend) extended(a identAnswer) (backend.ExtendResult, error) {
	switch a.code {
	case codeConflict:
		return backend.ExtendResult{}, errConflict
	case codeDone:
		return backend.ExtendResult{Extended: true, Record: a.rec}, nil
	}
	return backend.ExtendResult{}, nil
}

// extendIdent is Extend of a mutex lock with a request identity (and an
// owner token): one call of lock_extend.
func (b *Backend) extendIdent(ctx context.Context, req backend.ExtendRequest) (backend.ExtendResult, error) {
	ctx, done, err := b.call(ctx)
	if err != nil {
		return backend.ExtendResult{}, err
	}
	defer done()
	a, err := scanIdent(b.pool.QueryRow(ctx, b.ident.extend, extendArgs(req)...))
	if err != nil {
		return backend.ExtendResult{}, b.wrap(ctx, "extend "+strconv.Quote(req.Key), err)
	}
	res, err := b.extended(a)
	if res.Extended {
		b.scheduled(res.Record.Remaining)
	}
	return res, err
}

// replayOnly is a replay-only Acquire of one mutex key: it answers the
// lease the request took (a repeat: the same id and fingerprint), refuses
// the id used with other arguments, or reports the holder (none when the
// key is free), and never takes the key. The engine asks it for every
// Acquire with a request id that finds waiters queued on the key, so on a
// hot key it runs beside the holders' Releases and the waiters' Acquires:
// the common answer (another request's lease, or none) is one read that
// takes no row lock, where the set transaction it used before held the
// row's lock across four statements and queued them all behind it. It
// writes only to answer a repeat (claimed) and, under notify=contended,
// to mark the lease it failed against, as a failed Acquire does; each is
// one UPDATE that compares the lease it read (its fencing token, unique
// per lease) under the row lock, so the mark lands on that lease or, if
// the lease ended meanwhile, the key is read again.
func (b *Backend) replayOnly(ctx context.Context, req backend.AcquireRequest) (backend.AcquireResult, error) {
	ctx, done, err := b.call(ctx)
	if err != nil {
		return backend.AcquireResult{}, err
	}
	defer done()
	fail := func(err error) (backend.AcquireResult, error) {
		return backend.AcquireResult{}, b.wrap(ctx, "acquire "+strconv.Quote(req.Key), err)
	}
	for range acquireAttempts {
		var (
			held, contended bool
			kind            string
			limit           int
			kept            backend.Request
		)
		rec, err := scanRecord(b.pool.QueryRow(ctx, b.ident.peek, req.Key),
			&held, &kind, &limit, &kept.ID, &kept.Fingerprint, &contended)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return backend.AcquireResult{}, nil // free: no row
		case err != nil:
			return fail(err)
		case kind != "":
			return b.keptOther(ctx, req.Key, kind, limit)
		case !held:
			return backend.AcquireResult{}, nil
		}
		repeat, err := backend.Repeat(kept, req.Request)
		if err != nil {
			return backend.AcquireResult{}, errConflict
		}
		if repeat {
			var replay string
			rec, err := scanRecord(b.pool.QueryRow(ctx, b.ident.claim, req.Key, int64(rec.FencingToken), req.Request.ID), &replay)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				continue // the lease ended since the read
			case err != nil:
				return fail(err)
			}
			return backend.AcquireResult{Acquired: true, Record: rec, Replayed: true, Replay: replay}, nil
		}
		if b.mark && !contended {
			tag, err := b.pool.Exec(ctx, b.ident.mark, req.Key, int64(rec.FencingToken))
			if err != nil {
				return fail(err)
			}
			if tag.RowsAffected() == 0 {
				continue // the lease ended since the read
			}
		}
		return backend.AcquireResult{Record: rec}, nil
	}
	return backend.AcquireResult{}, fmt.Errorf("%w: postgres: acquire %q: the key changed hands %d times during the call; retry",
		backend.ErrUnavailable, req.Key, acquireAttempts)
}
