package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SchemaVersion is the version of the table layout this plugin writes. It is
// kept in the locks table's comment ("holdfast locks v8").
const SchemaVersion = 8

// notifyGUC is the session setting the trigger reads to decide what to
// announce: "contended" (set on every connection of a plugin with
// notify=contended) or anything else, unset included, for every change.
const notifyGUC = "holdfast.notify"

// instanceGUC is the session setting that names the plugin instance (a
// random int64 per plugin process, see acquired_by).
const instanceGUC = "holdfast.instance"

// migrationLockClass is the first half of the advisory lock key that
// serialises migrations of one schema ("HldF"); the second half is a hash of
// the schema name.
const migrationLockClass = 0x486c6446

// names are the quoted SQL names of one schema's objects.
type names struct {
	schema    string // the user's schema name, unquoted
	qschema   string // quoted
	locks     string // "schema"."locks"
	grants    string // "schema"."grants"
	grantsFn  string // "schema"."grants_notify" (trigger function)
	acquireG  string // "schema"."grant_acquire"
	releaseG  string // "schema"."grant_release"
	extendG   string // "schema"."grant_extend"
	proclaimG string // "schema"."grant_proclaim"
	acquireL  string // "schema"."lock_acquire" (requests.go)
	releaseL  string // "schema"."lock_release"
	extendL   string // "schema"."lock_extend"
	fencing   string // "schema"."fencing" (sequence)
	notifyFn  string // "schema"."locks_notify" (trigger function)
	channel   string // NOTIFY channel, unquoted
}

func newNames(schema string) names {
	q := func(parts ...string) string { return pgx.Identifier(parts).Sanitize() }
	channel := "holdfast:" + schema
	if len(channel) > 63 { // NAMEDATALEN-1: longer names are truncated and could collide
		sum := sha256.Sum256([]byte(schema))
		channel = "holdfast:" + hex.EncodeToString(sum[:16])
	}
	return names{
		schema:    schema,
		qschema:   q(schema),
		locks:     q(schema, "locks"),
		grants:    q(schema, "grants"),
		grantsFn:  q(schema, "grants_notify"),
		acquireG:  q(schema, "grant_acquire"),
		releaseG:  q(schema, "grant_release"),
		extendG:   q(schema, "grant_extend"),
		proclaimG: q(schema, "grant_proclaim"),
		acquireL:  q(schema, "lock_acquire"),
		releaseL:  q(schema, "lock_release"),
		extendL:   q(schema, "lock_extend"),
		fencing:   q(schema, "fencing"),
		notifyFn:  q(schema, "locks_notify"),
		channel:   channel,
	}
}

// sqlLiteral quotes s as an SQL string literal.
func sqlLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// migrations[v-1] moves the schema from version v-1 to v. Each runs in the
// migration transaction, under the advisory lock.
func migrations(n names) []string {
	return []string{
		// v1: the locks table, its two partial indexes, the fencing sequence
		// and the trigger that announces changes with pg_notify.
		//
		// owner is the SHA-256 of the owner token: whoever can read the table
		// still cannot release or extend someone else's lock through holdfast.
		// A row whose owner is NULL is a free key that keeps its last fencing
		// token and stamp; the cleaner deletes such rows after idle_retention.
		`CREATE SEQUENCE IF NOT EXISTS ` + n.fencing + ` AS bigint;
CREATE TABLE IF NOT EXISTS ` + n.locks + ` (
	key           text COLLATE "C" PRIMARY KEY,
	owner         bytea,
	holder        text NOT NULL DEFAULT '',
	fencing       bigint NOT NULL,
	expires_at    timestamptz,
	stamp_wall    bigint NOT NULL,
	stamp_logical bigint NOT NULL,
	changed_at    timestamptz NOT NULL,
	CHECK ((owner IS NULL) = (expires_at IS NULL))
);
CREATE INDEX IF NOT EXISTS locks_expiry ON ` + n.locks + ` (expires_at) WHERE owner IS NOT NULL;
CREATE INDEX IF NOT EXISTS locks_idle ON ` + n.locks + ` (changed_at) WHERE owner IS NULL;
CREATE OR REPLACE FUNCTION ` + n.notifyFn + `() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
	ev text;
BEGIN
	IF TG_OP = 'UPDATE' AND OLD.owner IS NOT NULL THEN
		-- The holder lost the row: by Release (still valid) or by expiry
		-- (the cleaner, or a takeover by the next acquirer).
		ev := CASE WHEN OLD.expires_at <= clock_timestamp() THEN 'expired' ELSE 'released' END;
		PERFORM pg_notify(` + sqlLiteral(n.channel) + `, ` + eventJSON("OLD") + `);
	END IF;
	IF NEW.owner IS NOT NULL THEN
		ev := 'acquired';
		PERFORM pg_notify(` + sqlLiteral(n.channel) + `, ` + eventJSON("NEW") + `);
	END IF;
	RETURN NULL;
END
$fn$;
DROP TRIGGER IF EXISTS locks_notify_insert ON ` + n.locks + `;
CREATE TRIGGER locks_notify_insert AFTER INSERT ON ` + n.locks + `
	FOR EACH ROW EXECUTE FUNCTION ` + n.notifyFn + `();
DROP TRIGGER IF EXISTS locks_notify_update ON ` + n.locks + `;
CREATE TRIGGER locks_notify_update AFTER UPDATE ON ` + n.locks + `
	FOR EACH ROW WHEN (OLD.owner IS DISTINCT FROM NEW.owner) EXECUTE FUNCTION ` + n.notifyFn + `();`,

		// v2: what notify=contended needs to announce only the changes a
		// waiter may be waiting for (see the package doc):
		//   - contended: an Acquire failed against the current lease. The
		//     failing statement sets it, under the row lock, in its own
		//     commit; a takeover clears it.
		//   - acquired_by: the plugin instance (a random number per plugin
		//     process) that took the current lease.
		// The trigger announces every change when the changing session is
		// not in contended mode, and otherwise only the end of a contended
		// lease, and a release through another plugin instance than the
		// one that acquired the lease.
		`ALTER TABLE ` + n.locks + ` ADD COLUMN IF NOT EXISTS contended boolean NOT NULL DEFAULT false;
ALTER TABLE ` + n.locks + ` ADD COLUMN IF NOT EXISTS acquired_by bigint NOT NULL DEFAULT 0;
CREATE OR REPLACE FUNCTION ` + n.notifyFn + `() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
	ev text;
	every boolean := ` + everyChange + `;
BEGIN
	IF TG_OP = 'UPDATE' AND OLD.owner IS NOT NULL THEN
		-- The holder lost the row: by Release (still valid) or by expiry
		-- (the cleaner, or a takeover by the next acquirer).
		ev := CASE WHEN OLD.expires_at <= clock_timestamp() THEN 'expired' ELSE 'released' END;
		IF every OR OLD.contended OR (ev = 'released' AND ` + otherInstance + `) THEN
			PERFORM pg_notify(` + sqlLiteral(n.channel) + `, ` + eventJSON("OLD") + `);
		END IF;
	END IF;
	IF NEW.owner IS NOT NULL AND every THEN
		ev := 'acquired';
		PERFORM pg_notify(` + sqlLiteral(n.channel) + `, ` + eventJSON("NEW") + `);
	END IF;
	RETURN NULL;
END
$fn$;
DROP TRIGGER IF EXISTS locks_notify_insert ON ` + n.locks + `;
CREATE TRIGGER locks_notify_insert AFTER INSERT ON ` + n.locks + `
	FOR EACH ROW WHEN (` + everyChange + `)
	EXECUTE FUNCTION ` + n.notifyFn + `();
DROP TRIGGER IF EXISTS locks_notify_update ON ` + n.locks + `;
CREATE TRIGGER locks_notify_update AFTER UPDATE ON ` + n.locks + `
	FOR EACH ROW WHEN (OLD.owner IS DISTINCT FROM NEW.owner AND
		(` + everyChange + ` OR OLD.contended OR (NEW.owner IS NULL AND ` + otherInstance + `)))
	EXECUTE FUNCTION ` + n.notifyFn + `();`,

		// v3: request identities (retry-safe requests, see the package doc).
		//   - request_id, request_fp: the identity of the last Acquire or
		//     Extend applied to the current lease; replay: what its Acquire
		//     stored for a replay; claimed: a replay of it was answered.
		//   - released_id, released_fp, released_until: the identity of the
		//     key's last Release, kept until the released lease would have
		//     expired.
		// A lease taken without an identity clears the first four.
		`ALTER TABLE ` + n.locks + ` ADD COLUMN IF NOT EXISTS request_id text;
ALTER TABLE ` + n.locks + ` ADD COLUMN IF NOT EXISTS request_fp text;
ALTER TABLE ` + n.locks + ` ADD COLUMN IF NOT EXISTS replay text;
ALTER TABLE ` + n.locks + ` ADD COLUMN IF NOT EXISTS claimed boolean NOT NULL DEFAULT false;
ALTER TABLE ` + n.locks + ` ADD COLUMN IF NOT EXISTS released_id text;
ALTER TABLE ` + n.locks + ` ADD COLUMN IF NOT EXISTS released_fp text;
ALTER TABLE ` + n.locks + ` ADD COLUMN IF NOT EXISTS released_until timestamptz;`,

		// v4: semaphores and rwlocks (grants.go).
		migrationV4(n),

		// v5: elections: a value per grant, grant_proclaim (elections.go).
		migrationV5(n),

		// v6: one function per single-key call with a request identity
		// (requests.go).
		migrationV6(n),

		// v7: the same announcements from triggers without a WHEN clause.
		migrationV7(n),

		// v8: the same for the grants table's insert trigger.
		migrationV8(n),
	}
}

// migrationV7 moves the conditions of the locks triggers' WHEN clauses into
// their function, which announces exactly what v2's triggers and function
// announced together, with the same payload. Why: PostgreSQL rebuilds a
// trigger's WHEN expression from its stored text (stringToNode) in every
// statement that changes a row of the table, fired or not, while a
// plpgsql trigger function keeps its plan for the session. Measured with
// BenchmarkServerCPU (the server process's CPU time for an acquire+release
// pair through lock_acquire and lock_release, a loop inside the server),
// medians of 6 interleaved runs on a loaded machine: under notify=all,
// where every change both tested a WHEN clause and called the function,
// 266 µs a pair with v6's triggers against 214 µs with these (219 against
// 192 µs in a second set); under notify=contended, where the function is
// now called for changes a WHEN clause used to skip, 230 against 220 µs
// (219 against 190 µs): about even. The function is now called for every
// inserted or updated row; one whose owner did not change returns after
// one comparison.
//
// Replacing the function and the triggers in the migration's transaction
// is atomic for every other session: a v6 plugin still running on the
// schema sees v6's triggers until the migration commits and these after,
// and either announces the same events (its payload included), so a
// rolling upgrade loses no wake-up.
func migrationV7(n names) string {
	return `CREATE OR REPLACE FUNCTION ` + n.notifyFn + `() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
	ev text;
	every boolean;
BEGIN
	-- v2's WHEN clauses: an update that keeps the owner (an extend, a
	-- mark) announces nothing.
	IF TG_OP = 'UPDATE' AND OLD.owner IS NOT DISTINCT FROM NEW.owner THEN
		RETURN NULL;
	END IF;
	every := ` + everyChange + `;
	IF TG_OP = 'UPDATE' AND OLD.owner IS NOT NULL THEN
		-- The holder lost the row: by Release (still valid) or by expiry
		-- (the cleaner, or a takeover by the next acquirer).
		ev := CASE WHEN OLD.expires_at <= clock_timestamp() THEN 'expired' ELSE 'released' END;
		IF every OR OLD.contended OR (ev = 'released' AND ` + otherInstance + `) THEN
			PERFORM pg_notify(` + sqlLiteral(n.channel) + `, ` + eventJSON("OLD") + `);
		END IF;
	END IF;
	IF NEW.owner IS NOT NULL AND every THEN
		ev := 'acquired';
		PERFORM pg_notify(` + sqlLiteral(n.channel) + `, ` + eventJSON("NEW") + `);
	END IF;
	RETURN NULL;
END
$fn$;
DROP TRIGGER IF EXISTS locks_notify_insert ON ` + n.locks + `;
CREATE TRIGGER locks_notify_insert AFTER INSERT ON ` + n.locks + `
	FOR EACH ROW EXECUTE FUNCTION ` + n.notifyFn + `();
DROP TRIGGER IF EXISTS locks_notify_update ON ` + n.locks + `;
CREATE TRIGGER locks_notify_update AFTER UPDATE ON ` + n.locks + `
	FOR EACH ROW EXECUTE FUNCTION ` + n.notifyFn + `();`
}

// migrationV8 does for the grants table what v7 did for the locks table:
// its insert trigger, v5's, loses its WHEN clause, and the trigger function
// tests the same condition (grantsNotifyFunction), so a semaphore, rwlock or
// election grant's INSERT no longer has PostgreSQL rebuild that clause. The
// delete and proclaim triggers never had one. Under notify=contended the
// function is now called for the inserts that clause skipped, and returns
// after the test. Measured with BenchmarkServerCPUSemaphore (the server's
// CPU time for a semaphore permit's grant_acquire+grant_release pair),
// medians of 6 interleaved runs of v7 (the benchmark on this commit's
// parent) and v8, on a loaded machine (load average 2 to 10): under
// notify=all 328 against 323 µs a pair, 362 against 347 µs in a second
// set and 342 against 306 µs in a third; under notify=contended 276
// against 290, 343 against 290 and 295 against 256 µs. A run's figure
// ranged from 200 to 400 µs, more than the difference, so a
// v7 schema (made by CreateSchemaAt) and a v8 one were also run in one
// server session, alternating blocks of 500 pairs, 6 runs of 10,000 pairs
// each, twice: v8 was lower in 20 of the 24 semaphore runs, by a median
// of 8.5 and 5 µs a pair (of about 300) under notify=all and 15.5 and 3 µs
// (of about 250) under notify=contended, while the mutex pair, which v8
// does not change, differed by -2.5 to 3.5 µs (the method's noise). A
// small gain at most, and no loss beyond the noise.
//
// As with v7, the function and the trigger are replaced in the migration's
// transaction, so a v7 plugin still running on the schema sees v5's trigger
// until the migration commits and v8's after, which announce the same events
// with the same payloads.
func migrationV8(n names) string {
	return grantsNotifyFunction(n, true) + `
DROP TRIGGER IF EXISTS grants_notify_insert ON ` + n.grants + `;
CREATE TRIGGER grants_notify_insert AFTER INSERT ON ` + n.grants + `
	FOR EACH ROW EXECUTE FUNCTION ` + n.grantsFn + `();`
}

// otherInstance is true when the lease in OLD was acquired through another
// plugin instance than the changing session's.
const otherInstance = `OLD.acquired_by::text IS DISTINCT FROM current_setting('` + instanceGUC + `', true)`

// everyChange is true in a session that announces every change. v2's
// triggers tested it in their WHEN clauses (with the row's contended), so
// that under notify=contended an uncontended change would not call the
// trigger function; v7's function tests it (migrationV7 says why), and so
// does v8's grants function for a grant's insert (migrationV8).
const everyChange = `coalesce(current_setting('` + notifyGUC + `', true), '') <> 'contended'`

// eventJSON builds the NOTIFY payload for row r (OLD or NEW) with event type
// ev. A payload must stay under 8000 bytes: keys are at most 512 bytes, and a
// long holder label is cut to 256 characters (the "x" flag says so).
func eventJSON(r string) string {
	obj := func(holder string) string {
		return `json_build_object('t', ev, 'k', ` + r + `.key, 'f', ` + r + `.fencing, 'h', ` + holder +
			`, 'e', (extract(epoch FROM ` + r + `.expires_at) * 1000000)::bigint` +
			`, 'r', (extract(epoch FROM ` + r + `.expires_at - clock_timestamp()) * 1000000)::bigint` +
			`, 'w', ` + r + `.stamp_wall, 'l', ` + r + `.stamp_logical, 'x', ` +
			map[bool]string{true: "true", false: "false"}[holder != r+".holder"] + `)::text`
	}
	return `CASE WHEN octet_length(` + r + `.holder) <= 1024 THEN ` + obj(r+".holder") +
		` ELSE ` + obj("left("+r+".holder, 256)") + ` END`
}

// tableComment is the comment that records the schema version.
func tableComment(v int) string { return "holdfast locks v" + strconv.Itoa(v) }

// parseVersion reads the version from the table comment.
func parseVersion(comment string) (int, error) {
	rest, ok := strings.CutPrefix(comment, "holdfast locks v")
	if !ok {
		return 0, fmt.Errorf("table comment %q is not a holdfast schema version", comment)
	}
	return strconv.Atoi(rest)
}

// migrate creates or upgrades the schema. It is idempotent and safe when
// several plugins start at once: the whole migration runs in one transaction
// holding a transaction-level advisory lock on the schema name, so the second
// plugin waits and then finds the current version.
func migrate(ctx context.Context, pool *pgxpool.Pool, n names) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// DDL is not what statement_timeout bounds (a short one, 100ms,
		// timed out creating functions on a loaded machine): the migration
		// is bounded by ctx, New's start-up deadline, instead.
		if _, err := tx.Exec(ctx, `SET LOCAL statement_timeout = 0`); err != nil {
			return fmt.Errorf("lift statement_timeout for the migration: %w", err)
		}
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`,
			int32(migrationLockClass), n.schema); err != nil {
			return fmt.Errorf("take the migration lock: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+n.qschema); err != nil {
			return fmt.Errorf("create schema %s: %w", n.qschema, err)
		}
		var comment *string
		var exists bool
		if err := tx.QueryRow(ctx,
			`SELECT to_regclass($1) IS NOT NULL, obj_description(to_regclass($1), 'pg_class')`,
			n.locks).Scan(&exists, &comment); err != nil {
			return fmt.Errorf("read schema version: %w", err)
		}
		have := 0
		if exists {
			if comment == nil {
				return fmt.Errorf("table %s exists but has no holdfast version comment: not created by holdfast?", n.locks)
			}
			v, err := parseVersion(*comment)
			if err != nil {
				return fmt.Errorf("table %s: %w", n.locks, err)
			}
			have = v
		}
		if have > SchemaVersion {
			return fmt.Errorf("table %s is at schema version %d, newer than this plugin's %d: upgrade the plugin",
				n.locks, have, SchemaVersion)
		}
		steps := migrations(n)
		for v := have + 1; v <= SchemaVersion; v++ {
			if _, err := tx.Exec(ctx, steps[v-1]); err != nil {
				return fmt.Errorf("migrate %s to version %d: %w", n.locks, v, err)
			}
			if _, err := tx.Exec(ctx, `COMMENT ON TABLE `+n.locks+` IS `+sqlLiteral(tableComment(v))); err != nil {
				return fmt.Errorf("record schema version %d: %w", v, err)
			}
		}
		return nil
	})
}
