package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/holdfast/holdfast/core/backend"
)

// Elections (schema v5). An election key is a grant key (see grants.go) of
// kind "election", limit 1, whose one grant is the leader; its fencing token
// is the term. v5 gives every grant a value (the grants table's value
// column: text, NULL for the other kinds), taken by grant_acquire with the
// grant and returned in every state row, and adds grant_proclaim, which
// replaces the value of the owner digest's live grant on an election key:
//
//   - grant_proclaim locks the meta row (FOR UPDATE, the order every grant
//     function takes), updates the grant row only if the owner digest holds a
//     live grant there and the key is an election, and raises the meta row's
//     stamp to the call's (as grant_release does: the next leader is stamped
//     after the proclaim). The grant's fencing token, expiry and stamp stay.
//   - The grants table's trigger announces the update (UPDATE OF value: only
//     grant_proclaim sets it) as a "proclaimed" event. An election's grants
//     (value not NULL) are announced in every notify mode, acquired and
//     proclaimed included: Observe is built on Watch, elections are few,
//     and under notify=contended an observer would otherwise never see a
//     new leader. Other grants' inserts keep notify=contended's rule (not
//     announced). Every event of a grant carries
//     its value ("v", when not empty) unless the payload would pass NOTIFY's
//     8000 bytes (a value of control characters, which JSON spells in six
//     bytes each): then "vx" says it was left out, and Watch reads it from
//     the grant's row (see payload.event).
//
// v4's grant_acquire and grant_extend are dropped and made again with the
// value: a plugin of schema v4 refuses a v5 schema at start-up (see migrate),
// so no caller of the old signatures is left.
func migrationV5(n names) string {
	head := func(code string) string {
		return `SELECT ` + code + `, coalesce(m.kind, ''), coalesce(m.lim, 0), about, rep, rp,
			NULL::bigint, NULL::text, NULL::timestamptz, NULL::bigint, NULL::bigint, NULL::bigint, NULL::integer, NULL::text`
	}
	grantRows := func(code string) string {
		return `SELECT ` + code + `, coalesce(m.kind, ''), coalesce(m.lim, 0), about, rep, rp, gr.fencing, gr.holder, gr.expires_at,
			gr.stamp_wall, gr.stamp_logical, (extract(epoch FROM gr.expires_at - clock_timestamp()) * 1000000)::bigint, gr.permits, coalesce(gr.value, '')
		FROM ` + n.grants + ` gr WHERE gr.key = p_key AND gr.expires_at > clock_timestamp() ORDER BY gr.fencing`
	}
	state := `(r_code integer, r_kind text, r_lim integer, r_about bigint, r_replayed boolean, r_replay text,
	r_fencing bigint, r_holder text, r_expires timestamptz, r_wall bigint, r_logical bigint, r_remaining bigint, r_permits integer,
	r_value text)`
	return `ALTER TABLE ` + n.grants + ` ADD COLUMN IF NOT EXISTS value text;
` + grantsNotifyFunction(n, false) + `
DROP TRIGGER IF EXISTS grants_notify_insert ON ` + n.grants + `;
CREATE TRIGGER grants_notify_insert AFTER INSERT ON ` + n.grants + `
	FOR EACH ROW WHEN (` + everyChange + ` OR NEW.value IS NOT NULL) EXECUTE FUNCTION ` + n.grantsFn + `();
DROP TRIGGER IF EXISTS grants_notify_proclaim ON ` + n.grants + `;
CREATE TRIGGER grants_notify_proclaim AFTER UPDATE OF value ON ` + n.grants + `
	FOR EACH ROW EXECUTE FUNCTION ` + n.grantsFn + `();

DROP FUNCTION IF EXISTS ` + n.acquireG + `(text, bytea, text, bigint, bigint, bigint, text, integer, integer, text, text, text, boolean);
CREATE FUNCTION ` + n.acquireG + `(p_key text, p_owner bytea, p_holder text, p_ttl_us bigint,
	p_wall bigint, p_logical bigint, p_kind text, p_limit integer, p_permits integer,
	p_rid text, p_rfp text, p_replay text, p_replay_only boolean, p_value text)
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
				request_id, request_fp, replay, value)
			VALUES (p_key, p_owner, p_permits, nextval('` + n.fencing + `'), p_holder,
				clock_timestamp() + p_ttl_us * interval '1 microsecond', w, lg,
				nullif(p_rid, ''), nullif(p_rfp, ''), nullif(p_replay, ''),
				CASE WHEN p_kind = 'election' THEN p_value END)
			RETURNING fencing INTO about;
			UPDATE ` + n.locks + ` l SET stamp_wall = w, stamp_logical = lg, changed_at = clock_timestamp() WHERE l.key = p_key;
		END IF;
	END IF;
	RETURN QUERY ` + head("code") + `;
	RETURN QUERY ` + grantRows("code") + `;
END
$fn$;

DROP FUNCTION IF EXISTS ` + n.extendG + `(text, bytea, bigint, text, text);
CREATE FUNCTION ` + n.extendG + `(p_key text, p_owner bytea, p_ttl_us bigint, p_rid text, p_rfp text)
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
$fn$;

CREATE OR REPLACE FUNCTION ` + n.proclaimG + `(p_key text, p_owner bytea, p_value text, p_wall bigint, p_logical bigint, p_kind text)
RETURNS TABLE ` + state + ` LANGUAGE plpgsql AS $fn$
DECLARE
	m record;
	about bigint;
	rep boolean := false;
	rp text := '';
BEGIN
	SELECT l.kind, l.lim INTO m FROM ` + n.locks + ` l WHERE l.key = p_key FOR UPDATE;
	IF NOT FOUND OR m.kind <> p_kind THEN
		about := 0;
		RETURN QUERY ` + head("0") + `;
		RETURN;
	END IF;
	UPDATE ` + n.grants + ` gr SET value = p_value
	WHERE gr.key = p_key AND gr.owner = p_owner AND gr.expires_at > clock_timestamp()
	RETURNING gr.fencing INTO about;
	IF about IS NULL THEN
		about := 0;
		RETURN QUERY ` + head("0") + `;
		RETURN;
	END IF;
	UPDATE ` + n.locks + ` l SET
		(stamp_wall, stamp_logical) = (
			SELECT CASE WHEN (p_wall, p_logical) > (l.stamp_wall, l.stamp_logical) THEN p_wall ELSE l.stamp_wall END,
			       CASE WHEN (p_wall, p_logical) > (l.stamp_wall, l.stamp_logical) THEN p_logical ELSE l.stamp_logical END)
	WHERE l.key = p_key;
	RETURN QUERY ` + head("7") + `;
	RETURN QUERY ` + grantRows("7") + `;
END
$fn$;`
}

// Proclaim implements backend.ElectionBackend: one call of grant_proclaim,
// one atomic step in the database. A token that holds no live grant of an
// election key, the empty one included, answers false and changes nothing.
func (b *Backend) Proclaim(ctx context.Context, req backend.ProclaimRequest) (backend.ProclaimResult, error) {
	if len(req.Value) > backend.MaxValueBytes {
		return backend.ProclaimResult{}, fmt.Errorf("%w: value of %d bytes exceeds the maximum %d", backend.ErrInvalidArgument, len(req.Value), backend.MaxValueBytes)
	}
	if req.OwnerToken == "" {
		return backend.ProclaimResult{}, nil
	}
	ctx, done, err := b.call(ctx)
	if err != nil {
		return backend.ProclaimResult{}, err
	}
	defer done()
	rows, err := collectState(b.pool.Query(ctx, b.grants.proclaim, req.Key, digest(req.OwnerToken), req.Value,
		req.Stamp.WallTime, int64(req.Stamp.Logical), backend.KindElection.String()))
	if err == nil && len(rows) == 0 {
		err = errors.New("grant_proclaim answered no rows")
	}
	if err != nil {
		return backend.ProclaimResult{}, b.wrap(ctx, "proclaim "+strconv.Quote(req.Key), err)
	}
	switch rows[0].code {
	case 0:
		return backend.ProclaimResult{}, nil
	case 7:
	default:
		return backend.ProclaimResult{}, b.wrap(ctx, "proclaim "+strconv.Quote(req.Key), fmt.Errorf("grant_proclaim answered code %d", rows[0].code))
	}
	rec, err := stateRecord(req.Key, rows)
	if err != nil {
		return backend.ProclaimResult{}, b.wrap(ctx, "proclaim "+strconv.Quote(req.Key), err)
	}
	return backend.ProclaimResult{Proclaimed: true, Record: rec}, nil
}

// grantValue reads the value of key's grant of fencing token fence, for an
// event whose payload left it out; found is false once the grant is gone.
func (b *Backend) grantValue(ctx context.Context, key string, fence int64) (value string, found bool, err error) {
	ctx, done, err := b.call(ctx)
	if err != nil {
		return "", false, err
	}
	defer done()
	rows, err := b.pool.Query(ctx, b.grants.value, key, fence)
	var values []string
	if err == nil {
		values, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		return "", false, b.wrap(ctx, "read the value of "+strconv.Quote(key), err)
	}
	if len(values) == 0 {
		return "", false, nil
	}
	return values[0], true, nil
}

// grantsNotifyFunction is the grants table's trigger function, with each
// grant's value in its payload: v5's, and with filterInserts v8's, which
// tests the condition of v5's insert trigger's WHEN clause itself (v8's
// trigger has none; migrationV8 says why). Both announce the same events
// with the same payloads.
func grantsNotifyFunction(n names, filterInserts bool) string {
	// The payload of grant r's event ev, with its value or, past NOTIFY's
	// limit, without it.
	grantJSON := func(value string) string {
		return `((` + eventJSON("r") + `)::jsonb ||
		jsonb_build_object('p', r.permits, 'kd', coalesce(k, ''), 'n', coalesce(lm, 0)) || ` + value + `)::text`
	}
	insertTest := ""
	if filterInserts {
		// v5's WHEN clause: under notify=contended, only an election's
		// grant (value not NULL) is announced when it is taken.
		insertTest = `
		IF NOT (` + everyChange + ` OR NEW.value IS NOT NULL) THEN
			RETURN NULL;
		END IF;`
	}
	return `CREATE OR REPLACE FUNCTION ` + n.grantsFn + `() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
	ev text;
	r record;
	k text;
	lm integer;
	p text;
BEGIN
	IF TG_OP = 'INSERT' THEN` + insertTest + `
		ev := 'acquired';
		r := NEW;
	ELSIF TG_OP = 'UPDATE' THEN
		ev := 'proclaimed';
		r := NEW;
	ELSE
		ev := CASE WHEN OLD.expires_at <= clock_timestamp() THEN 'expired' ELSE 'released' END;
		r := OLD;
	END IF;
	SELECT l.kind, l.lim INTO k, lm FROM ` + n.locks + ` l WHERE l.key = r.key;
	p := ` + grantJSON(`CASE WHEN coalesce(r.value, '') = '' THEN '{}'::jsonb ELSE jsonb_build_object('v', r.value) END`) + `;
	IF octet_length(p) > 7999 THEN
		p := ` + grantJSON(`jsonb_build_object('vx', true)`) + `;
	END IF;
	PERFORM pg_notify(` + sqlLiteral(n.channel) + `, p);
	RETURN NULL;
END
$fn$;`
}
