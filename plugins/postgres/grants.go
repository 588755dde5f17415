package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/proto/hlc"
)

// Kinds are the kinds of key the backend keeps beside a mutex.
var Kinds = []backend.Kind{backend.KindSemaphore, backend.KindRWLock, backend.KindElection}

// errConflict is a repeat of a kept request id with another fingerprint.
var errConflict = fmt.Errorf("%w: the request id was used with other arguments", backend.ErrRequestConflict)

// Semaphores and rwlocks (schema v4). A key of another kind than a mutex
// keeps its row in the locks table as its meta row (owner NULL: no mutex
// holder; kind and lim: its kind, by name, and its limit; stamp: the last
// stamp of its grants), and one row per grant in the grants table, keyed
// (key, owner digest). Three functions, one round trip each, do the
// mutating calls, and each takes its row locks in one order (the meta row,
// then grant rows), so they never deadlock one another:
//
//   - grant_acquire locks the meta row (FOR UPDATE; inserting it first when
//     the key has none), refuses a key kept with another kind or limit (a
//     mutex key's row has the empty kind), deletes the key's expired grants (by
//     clock_timestamp(), as every statement decides expiry), answers a
//     repeat (the request id or the owner digest of a live grant), sums the
//     permits of the live grants and inserts the grant only if the
//     request's fit, with nextval() of the one fencing sequence (so tokens
//     increase over every grant of every kind) and NextStamp of the meta
//     row's stamp, which it then raises.
//   - grant_release locks the meta row, deletes the owner's live grant,
//     raises the row's stamp and keeps the release's request identity there
//     (the key's last release, as for a mutex).
//   - grant_extend renews the owner's live grant; it locks that grant row
//     only (the meta row does not change).
//
// The trigger on the grants table announces every deleted grant (released,
// or expired: by the cleaner, which deletes expired grants as it frees
// expired mutex rows, or by grant_acquire) in every notify mode, since
// waiters wake from it, and every inserted grant under notify=all. A meta
// row with grants is never deleted by the cleaner's idle sweep, so a key's
// kind is kept while it has holders.
func migrationV4(n names) string {
	head := func(code string) string {
		return `SELECT ` + code + `, coalesce(m.kind, ''), coalesce(m.lim, 0), about, rep, rp,
			NULL::bigint, NULL::text, NULL::timestamptz, NULL::bigint, NULL::bigint, NULL::bigint, NULL::integer`
	}
	grantRows := func(code string) string {
		return `SELECT ` + code + `, coalesce(m.kind, ''), coalesce(m.lim, 0), about, rep, rp, gr.fencing, gr.holder, gr.expires_at,
			gr.stamp_wall, gr.stamp_logical, (extract(epoch FROM gr.expires_at - clock_timestamp()) * 1000000)::bigint, gr.permits
		FROM ` + n.grants + ` gr WHERE gr.key = p_key AND gr.expires_at > clock_timestamp() ORDER BY gr.fencing`
	}
	state := `(r_code integer, r_kind text, r_lim integer, r_about bigint, r_replayed boolean, r_replay text,
	r_fencing bigint, r_holder text, r_expires timestamptz, r_wall bigint, r_logical bigint, r_remaining bigint, r_permits integer)`
	return `ALTER TABLE ` + n.locks + ` ADD COLUMN IF NOT EXISTS kind text NOT NULL DEFAULT '';
ALTER TABLE ` + n.locks + ` ADD COLUMN IF NOT EXISTS lim integer NOT NULL DEFAULT 1;
CREATE TABLE IF NOT EXISTS ` + n.grants + ` (
	key           text COLLATE "C" NOT NULL,
	owner         bytea NOT NULL,
	permits       integer NOT NULL,
	fencing       bigint NOT NULL,
	holder        text NOT NULL,
	expires_at    timestamptz NOT NULL,
	stamp_wall    bigint NOT NULL,
	stamp_logical bigint NOT NULL,
	request_id    text,
	request_fp    text,
	replay        text,
	claimed       boolean NOT NULL DEFAULT false,
	PRIMARY KEY (key, owner)
);
CREATE INDEX IF NOT EXISTS grants_expiry ON ` + n.grants + ` (expires_at);
CREATE OR REPLACE FUNCTION ` + n.grantsFn + `() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
	ev text;
	r record;
	k text;
	lm integer;
BEGIN
	IF TG_OP = 'INSERT' THEN
		ev := 'acquired';
		r := NEW;
	ELSE
		ev := CASE WHEN OLD.expires_at <= clock_timestamp() THEN 'expired' ELSE 'released' END;
		r := OLD;
	END IF;
	SELECT l.kind, l.lim INTO k, lm FROM ` + n.locks + ` l WHERE l.key = r.key;
	PERFORM pg_notify(` + sqlLiteral(n.channel) + `, ((` + eventJSON("r") + `)::jsonb ||
		jsonb_build_object('p', r.permits, 'kd', coalesce(k, ''), 'n', coalesce(lm, 0)))::text);
	RETURN NULL;
END
$fn$;
DROP TRIGGER IF EXISTS grants_notify_insert ON ` + n.grants + `;
CREATE TRIGGER grants_notify_insert AFTER INSERT ON ` + n.grants + `
	FOR EACH ROW WHEN (` + everyChange + `) EXECUTE FUNCTION ` + n.grantsFn + `();
DROP TRIGGER IF EXISTS grants_notify_delete ON ` + n.grants + `;
CREATE TRIGGER grants_notify_delete AFTER DELETE ON ` + n.grants + `
	FOR EACH ROW EXECUTE FUNCTION ` + n.grantsFn + `();

CREATE OR REPLACE FUNCTION ` + n.acquireG + `(p_key text, p_owner bytea, p_holder text, p_ttl_us bigint,
	p_wall bigint, p_logical bigint, p_kind text, p_limit integer, p_permits integer,
	p_rid text, p_rfp text, p_replay text, p_replay_only boolean)
RETURNS TABLE ` + state + ` LANGUAGE plpgsql AS $fn$
DECLARE
	m record;
	g record;
	code integer := 1;
	about bigint := 0;
	rep boolean := false;
	rp text := '';
	used bigint;
	w bigint;
	lg bigint;
BEGIN
	SELECT l.kind, l.lim, l.stamp_wall, l.stamp_logical INTO m FROM ` + n.locks + ` l WHERE l.key = p_key FOR UPDATE;
	IF NOT FOUND THEN
		INSERT INTO ` + n.locks + ` (key, owner, holder, fencing, expires_at, stamp_wall, stamp_logical, changed_at, kind, lim)
		VALUES (p_key, NULL, '', 0, NULL, 0, 0, clock_timestamp(), p_kind, p_limit)
		ON CONFLICT (key) DO NOTHING;
		SELECT l.kind, l.lim, l.stamp_wall, l.stamp_logical INTO m FROM ` + n.locks + ` l WHERE l.key = p_key FOR UPDATE;
	END IF;
	IF m.kind <> p_kind OR m.lim <> p_limit THEN
		RETURN QUERY ` + head("5") + `;
		RETURN;
	END IF;
	DELETE FROM ` + n.grants + ` gr WHERE gr.key = p_key AND gr.expires_at <= clock_timestamp();
	IF p_rid <> '' THEN
		SELECT gr.owner, gr.fencing, gr.request_fp, gr.replay INTO g FROM ` + n.grants + ` gr
		WHERE gr.key = p_key AND gr.request_id = p_rid;
		IF FOUND THEN
			IF g.request_fp IS DISTINCT FROM p_rfp THEN
				RETURN QUERY ` + head("-1") + `;
				RETURN;
			END IF;
			UPDATE ` + n.grants + ` gr SET claimed = true WHERE gr.key = p_key AND gr.owner = g.owner;
			about := g.fencing;
			rep := true;
			rp := coalesce(g.replay, '');
		END IF;
	END IF;
	IF about = 0 THEN
		SELECT gr.fencing INTO about FROM ` + n.grants + ` gr WHERE gr.key = p_key AND gr.owner = p_owner;
		about := coalesce(about, 0);
	END IF;
	IF about = 0 THEN
		SELECT coalesce(sum(gr.permits), 0) INTO used FROM ` + n.grants + ` gr WHERE gr.key = p_key;
		IF p_replay_only OR used + p_permits > p_limit THEN
			code := 0;
		ELSE
			IF m.stamp_logical >= 4294967295 THEN
				w := m.stamp_wall + 1;
				lg := 0;
			ELSE
				w := m.stamp_wall;
				lg := m.stamp_logical + 1;
			END IF;
			IF (p_wall, p_logical) >= (w, lg) THEN
				w := p_wall;
				lg := p_logical;
			END IF;
			INSERT INTO ` + n.grants + ` (key, owner, permits, fencing, holder, expires_at, stamp_wall, stamp_logical,
				request_id, request_fp, replay)
			VALUES (p_key, p_owner, p_permits, nextval('` + n.fencing + `'), p_holder,
				clock_timestamp() + p_ttl_us * interval '1 microsecond', w, lg,
				nullif(p_rid, ''), nullif(p_rfp, ''), nullif(p_replay, ''))
			RETURNING fencing INTO about;
			UPDATE ` + n.locks + ` l SET stamp_wall = w, stamp_logical = lg, changed_at = clock_timestamp() WHERE l.key = p_key;
		END IF;
	END IF;
	RETURN QUERY ` + head("code") + `;
	RETURN QUERY ` + grantRows("code") + `;
END
$fn$;

CREATE OR REPLACE FUNCTION ` + n.releaseG + `(p_key text, p_owner bytea, p_wall bigint, p_logical bigint,
	p_rid text, p_rfp text, p_abandon boolean)
RETURNS integer LANGUAGE plpgsql AS $fn$
DECLARE
	m record;
	g record;
BEGIN
	SELECT l.released_id, l.released_fp, coalesce(l.released_until > clock_timestamp(), false) AS live
	INTO m FROM ` + n.locks + ` l WHERE l.key = p_key FOR UPDATE;
	IF NOT FOUND THEN
		RETURN 0;
	END IF;
	SELECT gr.expires_at, gr.claimed INTO g FROM ` + n.grants + ` gr
	WHERE gr.key = p_key AND gr.owner = p_owner AND gr.expires_at > clock_timestamp();
	IF NOT FOUND THEN
		IF p_rid <> '' AND m.released_id = p_rid THEN
			IF m.released_fp IS DISTINCT FROM p_rfp THEN
				RETURN -1;
			END IF;
			IF m.live THEN
				RETURN 1;
			END IF;
		END IF;
		RETURN 0;
	END IF;
	IF p_abandon AND g.claimed THEN
		RETURN 0;
	END IF;
	DELETE FROM ` + n.grants + ` gr WHERE gr.key = p_key AND gr.owner = p_owner;
	UPDATE ` + n.locks + ` l SET changed_at = clock_timestamp(),
		released_id = nullif(p_rid, ''), released_fp = nullif(p_rfp, ''),
		released_until = CASE WHEN p_rid = '' THEN NULL ELSE g.expires_at END,
		(stamp_wall, stamp_logical) = (
			SELECT CASE WHEN (p_wall, p_logical) > (l.stamp_wall, l.stamp_logical) THEN p_wall ELSE l.stamp_wall END,
			       CASE WHEN (p_wall, p_logical) > (l.stamp_wall, l.stamp_logical) THEN p_logical ELSE l.stamp_logical END)
	WHERE l.key = p_key;
	RETURN 1;
END
$fn$;

CREATE OR REPLACE FUNCTION ` + n.extendG + `(p_key text, p_owner bytea, p_ttl_us bigint, p_rid text, p_rfp text)
RETURNS TABLE ` + state + ` LANGUAGE plpgsql AS $fn$
DECLARE
	m record;
	g record;
	about bigint := 0;
	rep boolean := false;
	rp text := '';
BEGIN
	SELECT gr.fencing, gr.request_id, gr.request_fp INTO g FROM ` + n.grants + ` gr
	WHERE gr.key = p_key AND gr.owner = p_owner AND gr.expires_at > clock_timestamp() FOR UPDATE;
	SELECT l.kind, l.lim INTO m FROM ` + n.locks + ` l WHERE l.key = p_key;
	IF g.fencing IS NULL THEN
		RETURN QUERY ` + head("0") + `;
		RETURN;
	END IF;
	IF p_rid <> '' AND g.request_id = p_rid AND g.request_fp IS DISTINCT FROM p_rfp THEN
		RETURN QUERY ` + head("-1") + `;
		RETURN;
	END IF;
	UPDATE ` + n.grants + ` gr SET expires_at = clock_timestamp() + p_ttl_us * interval '1 microsecond',
		request_id = coalesce(nullif(p_rid, ''), gr.request_id),
		request_fp = CASE WHEN p_rid = '' THEN gr.request_fp ELSE p_rfp END
	WHERE gr.key = p_key AND gr.owner = p_owner;
	about := g.fencing;
	RETURN QUERY ` + head("6") + `;
	RETURN QUERY ` + grantRows("6") + `;
END
$fn$;`
}

// grantStatements are the SQL texts of the grant calls.
type grantStatements struct {
	acquire, release, extend, proclaim, get, list, expire, value string
}

// stateCols are the columns of a grant function's rows (see migrationV4
// and migrationV5).
const stateCols = `r_code, r_kind, r_lim, r_about, r_replayed, r_replay, r_fencing, r_holder, r_expires, r_wall, r_logical, r_remaining, r_permits, r_value`

func newGrantStatements(n names) grantStatements {
	return grantStatements{
		acquire:  `SELECT ` + stateCols + ` FROM ` + n.acquireG + `($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`,
		release:  `SELECT ` + n.releaseG + `($1, $2, $3, $4, $5, $6, $7)`,
		extend:   `SELECT ` + stateCols + ` FROM ` + n.extendG + `($1, $2, $3, $4, $5)`,
		proclaim: `SELECT ` + stateCols + ` FROM ` + n.proclaimG + `($1, $2, $3, $4, $5, $6)`,
		// $1 key, $2 fencing token: the grant's value (elections.go).
		value: `SELECT value FROM ` + n.grants + ` WHERE key = $1 AND fencing = $2`,
		// $1 key: the live grants, as state rows of code 2.
		get: `SELECT 2, l.kind, l.lim, 0::bigint, false, '', gr.fencing, gr.holder, gr.expires_at, gr.stamp_wall, gr.stamp_logical,
	(extract(epoch FROM gr.expires_at - clock_timestamp()) * 1000000)::bigint, gr.permits, gr.value
FROM ` + n.grants + ` gr JOIN ` + n.locks + ` l ON l.key = gr.key
WHERE gr.key = $1 AND gr.expires_at > clock_timestamp() ORDER BY gr.fencing`,
		// $1 prefix, $2 last key of the previous page, $3 limit: live grants
		// in key and fencing order, as state rows of code 2.
		list: `SELECT gr.key, 2, l.kind, l.lim, 0::bigint, false, '', gr.fencing, gr.holder, gr.expires_at, gr.stamp_wall, gr.stamp_logical,
	(extract(epoch FROM gr.expires_at - clock_timestamp()) * 1000000)::bigint, gr.permits, gr.value
FROM ` + n.grants + ` gr JOIN ` + n.locks + ` l ON l.key = gr.key
WHERE gr.key >= $1 AND starts_with(gr.key, $1) AND gr.key > $2 AND gr.expires_at > clock_timestamp()
ORDER BY gr.key, gr.fencing LIMIT $3`,
		// The cleaner's: the trigger emits EventExpired for each grant
		// deleted here.
		expire: `DELETE FROM ` + n.grants + ` WHERE (key, owner) IN (
	SELECT key, owner FROM ` + n.grants + ` WHERE expires_at <= clock_timestamp()
	ORDER BY expires_at LIMIT ` + strconv.Itoa(expireBatch) + ` FOR UPDATE SKIP LOCKED)
AND expires_at <= clock_timestamp()`,
	}
}

// kindByName reads a kind as the table keeps it (Kind.String; a mutex
// key's row keeps the empty string).
func kindByName(name string) (backend.Kind, bool) {
	if name == "" {
		return backend.KindMutex, true
	}
	for _, k := range Kinds {
		if k.String() == name {
			return k, true
		}
	}
	return 0, false
}

// stateRow is one row of a grant function: the call's answer (code, the
// key's kind and limit, the fencing token of the grant the call is about,
// a replay) and, unless fencing is NULL, one live grant.
type stateRow struct {
	code     int
	kind     string
	limit    int
	about    int64
	replayed bool
	replay   string
	fencing  *int64
	holder   *string
	expires  *time.Time
	wall, lg *int64
	remain   *int64
	permits  *int
	value    *string
}

func (r *stateRow) dest() []any {
	return []any{&r.code, &r.kind, &r.limit, &r.about, &r.replayed, &r.replay, &r.fencing, &r.holder, &r.expires, &r.wall, &r.lg, &r.remain, &r.permits, &r.value}
}

// collectState reads a grant function's rows.
func collectState(rows pgx.Rows, err error) ([]stateRow, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (stateRow, error) {
		var r stateRow
		err := row.Scan(r.dest()...)
		return r, err
	})
}

// stateRecord is the key's record from its state rows: every live grant in
// fencing-token order and, in the record's own fields, the grant the call
// is about, or else the one that ends first.
func stateRecord(key string, rows []stateRow) (backend.Record, error) {
	if len(rows) == 0 {
		return backend.Record{}, errors.New("no state rows")
	}
	kind, ok := kindByName(rows[0].kind)
	if !ok {
		return backend.Record{}, fmt.Errorf("key %q keeps an unknown kind %q", key, rows[0].kind)
	}
	rec := backend.Record{Key: key, Kind: kind, Limit: rows[0].limit}
	var about *backend.Grant
	for _, r := range rows {
		if r.fencing == nil {
			continue
		}
		rec.Holders = append(rec.Holders, backend.Grant{
			FencingToken: uint64(*r.fencing),
			Holder:       *r.holder,
			ExpiresAt:    *r.expires,
			Remaining:    max(time.Duration(*r.remain)*time.Microsecond, 0),
			Stamp:        hlc.Timestamp{WallTime: *r.wall, Logical: uint32(*r.lg)},
			Permits:      *r.permits,
			Value:        *r.value,
		})
		rec.InUse += *r.permits
	}
	for i := range rec.Holders {
		g := &rec.Holders[i]
		if int64(g.FencingToken) == rows[0].about || rows[0].about == 0 && (about == nil || g.Remaining < about.Remaining) {
			about = g
		}
	}
	if about != nil {
		rec.FencingToken, rec.Holder, rec.ExpiresAt, rec.Remaining = about.FencingToken, about.Holder, about.ExpiresAt, about.Remaining
		rec.Stamp, rec.Permits, rec.Value = about.Stamp, about.Permits, about.Value
	}
	return rec, nil
}

// acquireGrant is Acquire of a semaphore or rwlock grant: one call of
// grant_acquire, one atomic step in the database.
func (b *Backend) acquireGrant(ctx context.Context, req backend.AcquireRequest) (backend.AcquireResult, error) {
	if err := req.CheckGrant(Kinds); err != nil {
		return backend.AcquireResult{}, err
	}
	ctx, done, err := b.call(ctx)
	if err != nil {
		return backend.AcquireResult{}, err
	}
	defer done()
	st := backend.NextStamp(hlc.Timestamp{}, req.Stamp)
	rows, err := collectState(b.pool.Query(ctx, b.grants.acquire, req.Key, digest(req.OwnerToken), req.Holder, micros(req.TTL),
		st.WallTime, int64(st.Logical), req.Kind.String(), req.Limit, req.Permits,
		req.Request.ID, req.Request.Fingerprint, req.Replay, req.ReplayOnly, req.Value))
	if err == nil && len(rows) == 0 {
		err = errors.New("grant_acquire answered no rows")
	}
	if err != nil {
		return backend.AcquireResult{}, b.wrap(ctx, "acquire "+strconv.Quote(req.Key), err)
	}
	switch rows[0].code {
	case -1:
		return backend.AcquireResult{}, errConflict
	case 5: // kept with another kind or limit
		return b.keptOther(ctx, req.Key, rows[0].kind, rows[0].limit)
	}
	rec, err := stateRecord(req.Key, rows)
	if err != nil {
		return backend.AcquireResult{}, b.wrap(ctx, "acquire "+strconv.Quote(req.Key), err)
	}
	acquired := rows[0].code == 1
	if acquired {
		b.scheduled(rec.Remaining)
		b.hints.add(req.Key)
	}
	return backend.AcquireResult{Acquired: acquired, Record: rec, Replayed: rows[0].replayed, Replay: rows[0].replay}, nil
}

// keptOther answers an Acquire refused because its key is kept with another
// kind or limit: not acquired, with the kept kind and limit and the key's
// holders when it has any (read after the refusal: informational, as every
// reported holder is).
func (b *Backend) keptOther(ctx context.Context, key, kindName string, limit int) (backend.AcquireResult, error) {
	kind, ok := kindByName(kindName)
	if !ok {
		return backend.AcquireResult{}, fmt.Errorf("%w: postgres: key %q keeps an unknown kind %q", backend.ErrUnavailable, key, kindName)
	}
	if kind == backend.KindMutex {
		limit = 1
	}
	rec, held, err := b.Get(ctx, key)
	if err != nil {
		return backend.AcquireResult{}, err
	}
	if !held {
		rec = backend.Record{Key: key}
	}
	rec.Kind, rec.Limit = kind, limit
	return backend.AcquireResult{Record: rec}, nil
}

// releaseGrant is Release of a grant: one call of grant_release.
func (b *Backend) releaseGrant(ctx context.Context, req backend.ReleaseRequest) (bool, error) {
	ctx, done, err := b.call(ctx)
	if err != nil {
		return false, err
	}
	defer done()
	var code int
	if err := b.pool.QueryRow(ctx, b.grants.release, req.Key, digest(req.OwnerToken), req.Stamp.WallTime, int64(req.Stamp.Logical),
		req.Request.ID, req.Request.Fingerprint, req.Abandon).Scan(&code); err != nil {
		return false, b.wrap(ctx, "release "+strconv.Quote(req.Key), err)
	}
	if code == -1 {
		return false, errConflict
	}
	return code == 1, nil
}

// extendGrant is Extend of a grant: one call of grant_extend.
func (b *Backend) extendGrant(ctx context.Context, req backend.ExtendRequest) (backend.ExtendResult, error) {
	ctx, done, err := b.call(ctx)
	if err != nil {
		return backend.ExtendResult{}, err
	}
	defer done()
	rows, err := collectState(b.pool.Query(ctx, b.grants.extend, req.Key, digest(req.OwnerToken), micros(req.TTL),
		req.Request.ID, req.Request.Fingerprint))
	if err == nil && len(rows) == 0 {
		err = errors.New("grant_extend answered no rows")
	}
	if err != nil {
		return backend.ExtendResult{}, b.wrap(ctx, "extend "+strconv.Quote(req.Key), err)
	}
	switch rows[0].code {
	case -1:
		return backend.ExtendResult{}, errConflict
	case 0:
		return backend.ExtendResult{}, nil
	}
	rec, err := stateRecord(req.Key, rows)
	if err != nil {
		return backend.ExtendResult{}, b.wrap(ctx, "extend "+strconv.Quote(req.Key), err)
	}
	b.scheduled(rec.Remaining)
	return backend.ExtendResult{Extended: true, Record: rec}, nil
}

// getGrants is Get of a key holding grants (held=false when it holds none).
func (b *Backend) getGrants(ctx context.Context, key string) (backend.Record, bool, error) {
	rows, err := collectState(b.pool.Query(ctx, b.grants.get, key))
	if err != nil {
		return backend.Record{}, false, b.wrap(ctx, "get "+strconv.Quote(key), err)
	}
	if len(rows) == 0 {
		return backend.Record{}, false, nil
	}
	rec, err := stateRecord(key, rows)
	if err != nil {
		return backend.Record{}, false, b.wrap(ctx, "get "+strconv.Quote(key), err)
	}
	return rec, true, nil
}

// listGrants reads the records of keys holding grants under prefix after
// the key after, in key order: enough grant rows (limit) that a page of
// size grants never ends inside a key's grants (see List).
func (b *Backend) listGrants(ctx context.Context, prefix, after string, limit int) (recs []backend.Record, more bool, err error) {
	rows, err := b.pool.Query(ctx, b.grants.list, prefix, after, limit)
	if err != nil {
		return nil, false, err
	}
	type keyed struct {
		key string
		row stateRow
	}
	all, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (keyed, error) {
		var k keyed
		err := row.Scan(append([]any{&k.key}, k.row.dest()...)...)
		return k, err
	})
	if err != nil {
		return nil, false, err
	}
	more = len(all) == limit
	for i := 0; i < len(all); {
		j := i
		var group []stateRow
		for ; j < len(all) && all[j].key == all[i].key; j++ {
			group = append(group, all[j].row)
		}
		if more && j == len(all) {
			break // this key's grants may go on past the limit
		}
		rec, err := stateRecord(all[i].key, group)
		if err != nil {
			return nil, false, err
		}
		recs = append(recs, rec)
		i = j
	}
	return recs, more, nil
}

// maxHints bounds the keys grantHints remembers.
const maxHints = 4096

// grantHints remembers keys this plugin granted on, so that their Release
// and Extend try the grant functions first. A hint only orders two
// attempts that give the same answer either way; a stale one (the key is a
// mutex again, after its row was swept) costs a round trip. At maxHints an
// arbitrary hint makes room.
type grantHints struct {
	mu   sync.Mutex
	keys map[string]struct{}
}

func (h *grantHints) add(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.keys == nil {
		h.keys = map[string]struct{}{}
	}
	if _, ok := h.keys[key]; ok {
		return
	}
	if len(h.keys) >= maxHints {
		for k := range h.keys {
			delete(h.keys, k)
			break
		}
	}
	h.keys[key] = struct{}{}
}

func (h *grantHints) has(key string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.keys[key]
	return ok
}
