// Package postgres is holdfast's PostgreSQL lock backend, on jackc/pgx
// (pgxpool). Several holdfast servers may share one database: locks are rows,
// every decision is one SQL statement, and PostgreSQL's clock is the one
// clock that decides expiry.
//
// # Storage
//
// One table of locks, <schema>.locks (schema option, default "holdfast"), with a
// primary key on the key (byte order, COLLATE "C"), two partial indexes (held
// rows by expiry, free rows by last change), a sequence for fencing tokens
// and a trigger that announces changes with pg_notify (which changes: see
// Notify modes). The plugin creates and
// migrates it on start, in one transaction under a transaction-level
// advisory lock, so plugins starting together do not race. The schema
// version is kept in the table's comment ("holdfast locks v8").
//
// # Semantics
//
//   - Acquire is one INSERT ... ON CONFLICT (key) DO UPDATE ... WHERE the
//     existing row is free or its lease has expired by clock_timestamp(),
//     wrapped in a CTE that returns the current holder when the insert did
//     not take the row. PostgreSQL's row lock on the conflicting key decides
//     between racers: exactly one wins.
//   - Owner tokens are stored as SHA-256 digests. Release and Extend are one
//     UPDATE each whose WHERE compares the digest and the expiry, so a stale
//     holder can neither release nor extend its successor's lock, nor a lock
//     that has expired.
//   - Fencing tokens come from one sequence, nextval() evaluated in the
//     DO UPDATE after the row lock is taken: a sequence never returns a value
//     twice, even across crashes and restarts of PostgreSQL (it is WAL-logged
//     ahead of use), so tokens strictly increase per key (and across keys).
//     Because no per-key counter has to survive, rows of free keys can be
//     deleted (see Growth).
//   - Stamps: the row keeps the key's last stamp, also while free. Acquire
//     stores NextStamp(last, proposed), computed in the same statement;
//     Release keeps the later of the row's stamp and the release's stamp;
//     Extend keeps the acquisition's stamp (as the memory backend does).
//   - Expiry: expires_at = clock_timestamp() + ttl, compared with
//     clock_timestamp() by every statement, at microsecond resolution; a lock
//     is free to Acquire the moment its TTL has run out on the database's
//     clock, whatever the cleaner has done. Info reports a TTL granularity of
//     1ms (the resolution we promise; the plugin's clock never decides).
//   - Watch: one dedicated connection per Watch runs LISTEN; EventSynced is
//     sent once LISTEN has returned, so every later commit is seen. The
//     trigger emits events in the same transaction as the change, so an
//     event is sent exactly when the change commits, in commit order. A
//     takeover after expiry emits expired (the old holder) and then
//     acquired. Which changes it announces depends on the notify option
//     (next item).
//   - Notify modes. PostgreSQL serialises the commits of all transactions
//     that NOTIFY, database-wide (a lock held from pre-commit to commit
//     keeps the notification queue in commit order), so announcing every
//     change caps write throughput at one commit at a time.
//     notify=all (the default) announces every change: Watch reports
//     every acquired, released and expired event, as the public Watch API
//     promises. notify=contended announces only what a waiting acquirer
//     can be waiting for, so an uncontended Acquire+Release commits no
//     NOTIFY at all:
//     (a) the end (release, expiry, takeover) of a lease that an Acquire
//     failed against. The failing Acquire marks the row (contended) in its
//     own statement, under the row lock that decided it lost, and commits
//     the mark before it returns; the lease's end takes the same row lock
//     and reads the mark in the statement that ends it. Of the two, one
//     commits first: if the failed Acquire did, the end sees the mark and
//     notifies; if the end did, the Acquire (whose ON CONFLICT re-reads the
//     latest row version once it holds the lock) finds the row free and
//     takes it, so it did not fail. The engine's waiter on the failing
//     server sleeps only after its Acquire returned, so after the mark
//     committed; its backend watch was listening before (or a resync wakes
//     every waiter). No waiter that failed can miss the wake-up.
//     (b) a Release through another plugin instance than the one that
//     acquired the lease (acquired_by, a random number per plugin
//     process). The engine lets a waiter queued behind a winner of its
//     own server wait for that lease's end without trying (so without
//     marking): a release through its own server wakes it locally, a
//     release through any other server is announced by (b), and the
//     expiry is covered by the engine's timer at the winner's TTL.
//     A takeover clears the mark. Under notify=contended, Watch therefore
//     reports no acquired events, and released/expired events only of the
//     leases in (a) and (b): it wakes waiters, it is not a change feed.
//     Elections are the exception: their grants' every change is announced
//     in both modes (see elections.go), so Observe works in both.
//     Servers sharing a schema should use one mode: the mode of the
//     session making a change decides whether it is announced.
//   - Cleaner: one goroutine per plugin marks expired rows free in batches of
//     100 with FOR UPDATE SKIP LOCKED (it never waits for, or blocks, an
//     acquirer: a row an acquirer holds is skipped and the acquirer's own
//     statement takes it over), which makes the trigger emit EventExpired.
//     It sleeps until the earliest expiry in the table (queried from the
//     expiry index), woken earlier when this plugin stores a lock that
//     expires sooner, and never longer than cleaner_max_sleep (default 1s),
//     the safety net for locks stored by other plugins that have gone away.
//     So the EventExpired of a lock arrives within a few milliseconds of its
//     expiry when its plugin is alive, and within cleaner_max_sleep otherwise.
//   - Growth: released and expired keys keep their row (owner NULL) so the
//     last stamp survives; the cleaner deletes rows that have been free for
//     idle_retention (default 15m), in batches of 500 with SKIP LOCKED. The
//     table therefore holds the held keys plus the keys freed in the last
//     idle_retention, not every key ever used. Deleting is safe for fencing
//     because tokens come from the global sequence, never from the row. The
//     one statement that could carry an older token into a re-created row is
//     an INSERT that drew nextval() before the deleted row existed; every
//     statement is bounded by statement_timeout (default 10s, set on every
//     connection), and idle_retention must exceed it, so none can. Stamps of
//     a deleted row are forgotten; an engine proposing a stamp idle_retention
//     later is past them unless clocks differ by more than idle_retention.
//   - Errors: a database that cannot be reached (refused, reset, timed out)
//     answers errors wrapping backend.ErrUnavailable; each call is bounded by
//     call_timeout (default 5s) even when the caller's context is not. A
//     value PostgreSQL refuses as data (class 22) wraps ErrInvalidArgument.
//   - Sets of keys (backend.SetBackend, up to MaxKeys = 64): AcquireSet,
//     ReleaseSet and ExtendSet are each one transaction, atomic in the
//     database. It first inserts a free row for every key that has none
//     (ON CONFLICT DO NOTHING, in key order), then locks every key's row
//     with SELECT ... ORDER BY key FOR UPDATE, so two sets sharing keys wait
//     for each other in one global order and never deadlock (a single-key
//     statement locks one row and cannot close a cycle). It decides on the
//     locked rows: AcquireSet takes every row (one UPDATE, nextval() per
//     row after the locks, one stamp, the latest of the proposal and the
//     successor of every row's stamp) only if none holds a live lease, and
//     otherwise reports the first holder (marking it contended under
//     notify=contended, as a failed Acquire does); ReleaseSet and ExtendSet
//     change the rows only if the owner digest holds a live lease on every
//     one. The trigger announces each key's change on its own, in the
//     transaction's commit.
//   - Request identities (Info.RequestIDs; schema v3, v6): the row keeps the
//     identity of the last Acquire or Extend applied to its lease
//     (request_id, request_fp), the Acquire's replay and whether a replay
//     was answered (claimed), and the identity of the key's last Release
//     until that lease would have expired (released_id, released_fp,
//     released_until). A single-key call that carries an identity is one
//     call of lock_acquire, lock_release or lock_extend (v6, requests.go),
//     which compares and writes them on the locked row in the step that
//     decides the call; a set that carries one runs in the set transaction
//     above, which does the same for every key; so a repeat through any
//     plugin sharing the schema is answered as the first. A call without
//     one keeps its single statement, which clears them when it takes or
//     releases a lease, and an abandoning Release spares a claimed lease in
//     that statement. A replay-only Acquire of one key reads the row
//     without locking it and writes only a repeat's claim or a contended
//     mark, naming the lease it read (requests.go, replayOnly). A Release's identity is lost early only if the
//     cleaner deletes the free row first (idle_retention after the
//     release, shorter than a long lease): a repeat then answers false,
//     never a wrong true.
//   - Semaphores and rwlocks (Info.Kinds; schema v4): a grants table beside
//     the locks table, and three functions that decide in one round trip
//     each; see grants.go.
//   - Elections (Info.Kinds; schema v5): a value per grant and
//     grant_proclaim, one round trip; see elections.go.
//   - Not kept: lock-delays (Info.MaxLockDelay 0), so the server refuses a
//     lock_delay with unimplemented naming the capability.
//   - Info: shared, durable (rows and the sequence survive a restart of
//     PostgreSQL), TTL between 1ms and 24h, not fair, sets of up to 64 keys,
//     semaphores, rwlocks and elections.
//
// # Options
//
//	dsn                 connection string (URL or key=value; required)
//	schema              schema for the table (default "holdfast"; letters, digits, _)
//	max_conns           pool size (default pgxpool's: max(4, CPUs))
//	connect_timeout     per connection attempt, when the dsn sets none (default 5s)
//	call_timeout        bound on each backend call (default 5s)
//	statement_timeout   server-side bound on every statement (default 10s)
//	idle_retention      how long free rows are kept (default 15m; > statement_timeout)
//	cleaner_max_sleep   longest sleep of the cleaner (default 1s)
//	notify              all (default) or contended (see Notify modes)
package postgres

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/proto/hlc"
)

// Name is the backend name reported by Info.
const Name = "postgres"

// Version is reported by Info.
const Version = "0.1.0"

// TTL limits and granularity reported by Info.
const (
	MinTTL = time.Millisecond
	MaxTTL = 24 * time.Hour
	// TTLGranularity: expiry is compared with clock_timestamp() at
	// microsecond resolution in every statement; we promise a millisecond.
	TTLGranularity = time.Millisecond
)

// Option defaults.
const (
	DefaultSchema           = "holdfast"
	DefaultConnectTimeout   = 5 * time.Second
	DefaultCallTimeout      = 5 * time.Second
	DefaultStatementTimeout = 10 * time.Second
	DefaultIdleRetention    = 15 * time.Minute
	DefaultCleanerMaxSleep  = time.Second
)

// Batch sizes of the cleaner.
const (
	expireBatch = 100
	deleteBatch = 500
)

// ErrClosed is returned (wrapping backend.ErrUnavailable) by calls on a
// closed Backend.
var ErrClosed = fmt.Errorf("%w: postgres backend closed", backend.ErrUnavailable)

// schemaName is what the schema option accepts: a plain identifier, so the
// name needs no escaping anywhere (it also names the NOTIFY channel and is
// written into the trigger function).
var schemaName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,49}$`)

// Values of the notify option.
const (
	// NotifyAll announces every change (acquired, released, expired) in
	// the changing transaction: Watch reports everything.
	NotifyAll = "all"
	// NotifyContended announces only the changes of keys a failed Acquire
	// marked as contended: the wake-ups waiters need, without the
	// database-wide NOTIFY commit lock on the uncontended path.
	NotifyContended = "contended"
)

// Options configure a Backend; Open fills them from the plugin's options.
type Options struct {
	DSN              string
	Schema           string
	MaxConns         int32 // 0: pgxpool's default
	ConnectTimeout   time.Duration
	CallTimeout      time.Duration
	StatementTimeout time.Duration
	IdleRetention    time.Duration
	CleanerMaxSleep  time.Duration
	// Notify says which changes NOTIFY their watchers: NotifyAll (the
	// default) or NotifyContended (see the package doc).
	Notify string

	noCleaner bool // tests only (export_test.go)
}

// ParseOptions reads plugin options (see the package doc), refusing unknown
// keys and bad values with errors wrapping backend.ErrInvalidArgument.
func ParseOptions(opts map[string]string) (Options, error) {
	o := Options{
		Schema:           DefaultSchema,
		CallTimeout:      DefaultCallTimeout,
		StatementTimeout: DefaultStatementTimeout,
		IdleRetention:    DefaultIdleRetention,
		CleanerMaxSleep:  DefaultCleanerMaxSleep,
		Notify:           NotifyAll,
	}
	durations := map[string]*time.Duration{
		"connect_timeout":   &o.ConnectTimeout,
		"call_timeout":      &o.CallTimeout,
		"statement_timeout": &o.StatementTimeout,
		"idle_retention":    &o.IdleRetention,
		"cleaner_max_sleep": &o.CleanerMaxSleep,
	}
	var unknown []string
	for k, v := range opts {
		switch k {
		case "dsn":
			o.DSN = v
		case "schema":
			o.Schema = v
		case "notify":
			if v != NotifyAll && v != NotifyContended {
				return Options{}, fmt.Errorf("%w: postgres: option notify=%q must be %q or %q",
					backend.ErrInvalidArgument, v, NotifyAll, NotifyContended)
			}
			o.Notify = v
		case "max_conns":
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil || n < 1 || n > 10000 {
				return Options{}, fmt.Errorf("%w: postgres: option max_conns=%q must be an integer in [1, 10000]",
					backend.ErrInvalidArgument, v)
			}
			o.MaxConns = int32(n)
		default:
			d, ok := durations[k]
			if !ok {
				unknown = append(unknown, k)
				continue
			}
			dur, err := time.ParseDuration(v)
			if err != nil || dur <= 0 {
				return Options{}, fmt.Errorf("%w: postgres: option %s=%q must be a positive duration such as 5s",
					backend.ErrInvalidArgument, k, v)
			}
			*d = dur
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return Options{}, fmt.Errorf("%w: postgres: unknown option(s) %s (known: dsn, schema, max_conns, notify, %s)",
			backend.ErrInvalidArgument, strings.Join(unknown, ", "),
			"connect_timeout, call_timeout, statement_timeout, idle_retention, cleaner_max_sleep")
	}
	if o.DSN == "" {
		return Options{}, fmt.Errorf("%w: postgres: option dsn is required (e.g. dsn=postgres://user:password@host:5432/db)",
			backend.ErrInvalidArgument)
	}
	if !schemaName.MatchString(o.Schema) {
		return Options{}, fmt.Errorf("%w: postgres: option schema=%q must be 1 to 50 letters, digits or _, not starting with a digit",
			backend.ErrInvalidArgument, o.Schema)
	}
	if o.IdleRetention <= o.StatementTimeout {
		return Options{}, fmt.Errorf("%w: postgres: idle_retention (%s) must exceed statement_timeout (%s): "+
			"a free row may only be deleted once no statement that started before it can still run",
			backend.ErrInvalidArgument, o.IdleRetention, o.StatementTimeout)
	}
	return o, nil
}

// Backend is a backend.Backend on PostgreSQL. Create it with Open or New;
// Close stops its cleaner, ends its watches and closes its pool.
type Backend struct {
	opts     Options
	pool     *pgxpool.Pool
	n        names
	sql      statements
	sets     setStatements
	grants   grantStatements
	ident    identStatements
	hints    grantHints // keys this plugin granted on (grants.go)
	mark     bool       // a failed Acquire marks the row contended (notify=contended)
	instance int64      // this plugin process, stored in acquired_by

	ctx    context.Context // cancelled by Close: ends the cleaner and watches
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// The cleaner's schedule: wakeAt is when it will look next; poke wakes
	// it early when this plugin stores a lock that expires before that.
	// While a round runs (awake), such expiries collect in pending.
	mu      sync.Mutex
	wakeAt  time.Time
	awake   bool
	pending time.Time
	poke    chan struct{}
}

var (
	_ backend.Backend            = (*Backend)(nil)
	_ interface{ Close() error } = (*Backend)(nil)
)

// Open is the plugin entry point: backendserver.Serve(postgres.Open).
func Open(ctx context.Context, opts map[string]string) (backend.Backend, error) {
	o, err := ParseOptions(opts)
	if err != nil {
		return nil, err
	}
	return New(ctx, o)
}

// New connects, migrates the schema and starts the cleaner. It fails within
// about twice the connect timeout when the database cannot be reached or
// refuses the credentials.
func New(ctx context.Context, o Options) (*Backend, error) {
	cfg, err := pgxpool.ParseConfig(o.DSN)
	if err != nil {
		// pgconn redacts the password in its parse errors.
		return nil, fmt.Errorf("%w: postgres: option dsn: %w", backend.ErrInvalidArgument, err)
	}
	if o.MaxConns > 0 {
		cfg.MaxConns = o.MaxConns
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	if o.ConnectTimeout > 0 {
		cfg.ConnConfig.ConnectTimeout = o.ConnectTimeout
	}
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = strconv.FormatInt(o.StatementTimeout.Milliseconds(), 10)
	if o.Notify == "" {
		o.Notify = NotifyAll
	}
	// The trigger reads the mode and the plugin instance from the changing
	// session.
	instance, err := newInstance()
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.RuntimeParams[notifyGUC] = o.Notify
	cfg.ConnConfig.RuntimeParams[instanceGUC] = strconv.FormatInt(instance, 10)
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "holdfast-backend-postgres"
	}
	target := fmt.Sprintf("%s:%d database %q as user %q", cfg.ConnConfig.Host, cfg.ConnConfig.Port,
		cfg.ConnConfig.Database, cfg.ConnConfig.User)

	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: postgres: %s: %w", backend.ErrInvalidArgument, target, err)
	}
	startCtx, cancel := context.WithTimeout(ctx, 2*cfg.ConnConfig.ConnectTimeout+o.StatementTimeout)
	defer cancel()
	if err := pool.Ping(startCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("%w: postgres: cannot connect to %s: %w", backend.ErrUnavailable, target, err)
	}
	n := newNames(o.Schema)
	if err := migrate(startCtx, pool, n); err != nil {
		pool.Close()
		return nil, fmt.Errorf("%w: postgres: schema %q on %s: %w", backend.ErrUnavailable, o.Schema, target, err)
	}
	bctx, bcancel := context.WithCancel(context.Background())
	b := &Backend{
		opts:     o,
		pool:     pool,
		n:        n,
		sql:      newStatements(n),
		sets:     newSetStatements(n),
		grants:   newGrantStatements(n),
		ident:    newIdentStatements(n),
		mark:     o.Notify == NotifyContended,
		instance: instance,
		ctx:      bctx,
		cancel:   bcancel,
		poke:     make(chan struct{}, 1),
	}
	if !o.noCleaner {
		b.wg.Add(1)
		go b.clean()
	}
	return b, nil
}

// Close stops the cleaner, ends every watch with ErrClosed and closes the
// pool. It is safe to call more than once.
func (b *Backend) Close() error {
	b.cancel()
	b.wg.Wait()
	b.pool.Close()
	return nil
}

// Schema is the schema holding the backend's table.
func (b *Backend) Schema() string { return b.n.schema }

// Info implements backend.Backend.
func (b *Backend) Info(context.Context) (backend.Info, error) {
	return backend.Info{
		Name:           Name,
		Version:        Version,
		Shared:         true,
		Durable:        true,
		TTLGranularity: TTLGranularity,
		MinTTL:         MinTTL,
		MaxTTL:         MaxTTL,
		Fair:           false,
		MaxKeys:        MaxKeys,
		RequestIDs:     true,
		Kinds:          Kinds,
	}, nil
}

// statements are the SQL texts for one schema, built once.
type statements struct {
	acquire, release, extend, get, list, kind string
	expire, deleteIdle, nextExpiry            string
}

// recordCols are the columns every lock-returning statement selects, in the
// order scanRecord reads them.
const recordCols = `key, fencing, holder, expires_at, stamp_wall, stamp_logical,
	(extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint`

func newStatements(n names) statements {
	return statements{
		// $1 key, $2 owner digest, $3 holder, $4 ttl µs, $5/$6 stamp,
		// $7 whether a failed attempt marks the row contended (false under
		// notify=all: a failed attempt writes nothing), $8 this plugin's
		// instance (acquired_by).
		//
		// DO UPDATE decides once, in the sub-select t, whether the row is
		// free or expired (take). If so it takes the row over (and clears
		// contended); if not, and $7 is set and the row is not yet marked,
		// it only marks it contended: the attempt that lost has marked the
		// lease, under the row lock and in its own commit, before the
		// engine's waiter sleeps. The WHERE skips the write when there is
		// nothing to change.
		//
		// nextval() and the expiry are evaluated in DO UPDATE, after the
		// row lock: a value drawn before waiting could be older than the
		// token of a holder that came and went meanwhile. (CASE evaluates
		// nextval() only when the row is taken.)
		acquire: `WITH acq AS (
	INSERT INTO ` + n.locks + ` AS l (key, owner, holder, fencing, expires_at, stamp_wall, stamp_logical, changed_at, acquired_by)
	VALUES ($1, $2, $3, nextval('` + n.fencing + `'), clock_timestamp() + $4::bigint * interval '1 microsecond',
		$5, $6, clock_timestamp(), $8)
	ON CONFLICT (key) DO UPDATE SET
		(owner, holder, fencing, expires_at, stamp_wall, stamp_logical, changed_at, contended, acquired_by,
		 request_id, request_fp, replay, claimed) = (
			SELECT CASE WHEN t.take THEN excluded.owner ELSE l.owner END,
			       CASE WHEN t.take THEN excluded.holder ELSE l.holder END,
			       CASE WHEN t.take THEN nextval('` + n.fencing + `') ELSE l.fencing END,
			       CASE WHEN t.take THEN t.now + $4::bigint * interval '1 microsecond' ELSE l.expires_at END,
			       CASE WHEN NOT t.take THEN l.stamp_wall
			            WHEN (excluded.stamp_wall, excluded.stamp_logical) >= (t.w, t.lg) THEN excluded.stamp_wall ELSE t.w END,
			       CASE WHEN NOT t.take THEN l.stamp_logical
			            WHEN (excluded.stamp_wall, excluded.stamp_logical) >= (t.w, t.lg) THEN excluded.stamp_logical ELSE t.lg END,
			       CASE WHEN t.take THEN t.now ELSE l.changed_at END,
			       CASE WHEN t.take THEN false ELSE l.contended OR $7::boolean END,
			       CASE WHEN t.take THEN excluded.acquired_by ELSE l.acquired_by END,
			       CASE WHEN t.take THEN NULL ELSE l.request_id END,
			       CASE WHEN t.take THEN NULL ELSE l.request_fp END,
			       CASE WHEN t.take THEN NULL ELSE l.replay END,
			       CASE WHEN t.take THEN false ELSE l.claimed END
			FROM (SELECT l.owner IS NULL OR l.expires_at <= clock_timestamp() AS take, clock_timestamp() AS now,
			             CASE WHEN l.stamp_logical >= 4294967295 THEN l.stamp_wall + 1 ELSE l.stamp_wall END AS w,
			             CASE WHEN l.stamp_logical >= 4294967295 THEN 0 ELSE l.stamp_logical + 1 END AS lg) AS t)
	WHERE l.kind = '' AND (l.owner IS NULL OR l.expires_at <= clock_timestamp() OR ($7::boolean AND NOT l.contended))
	RETURNING owner = $2, ` + recordCols + `
)
SELECT * FROM acq
UNION ALL
SELECT false, ` + recordCols + ` FROM ` + n.locks + `
WHERE key = $1 AND owner IS NOT NULL AND expires_at > clock_timestamp() AND NOT EXISTS (SELECT FROM acq)`,

		// $1 key, $2 owner digest, $3/$4 stamp, $5 abandon (leave a lease
		// alone when a replay of its Acquire was answered). A release
		// without a request identity forgets the key's last one.
		release: `UPDATE ` + n.locks + ` AS l SET
	owner = NULL, holder = '', expires_at = NULL, changed_at = clock_timestamp(),
	request_id = NULL, request_fp = NULL, replay = NULL, claimed = false,
	released_id = NULL, released_fp = NULL, released_until = NULL,
	(stamp_wall, stamp_logical) = (
		SELECT CASE WHEN ($3::bigint, $4::bigint) > (l.stamp_wall, l.stamp_logical) THEN $3::bigint ELSE l.stamp_wall END,
		       CASE WHEN ($3::bigint, $4::bigint) > (l.stamp_wall, l.stamp_logical) THEN $4::bigint ELSE l.stamp_logical END)
WHERE key = $1 AND owner = $2 AND expires_at > clock_timestamp() AND NOT ($5::boolean AND claimed)`,

		// $1 key, $2 owner digest, $3 ttl µs.
		extend: `UPDATE ` + n.locks + ` SET
	expires_at = clock_timestamp() + $3::bigint * interval '1 microsecond', changed_at = clock_timestamp()
WHERE key = $1 AND owner = $2 AND expires_at > clock_timestamp()
RETURNING ` + recordCols,

		get: `SELECT ` + recordCols + ` FROM ` + n.locks + `
WHERE key = $1 AND owner IS NOT NULL AND expires_at > clock_timestamp()`,

		kind: `SELECT kind, lim FROM ` + n.locks + ` WHERE key = $1`,

		// $1 prefix, $2 last key of the previous page ('' for none), $3 limit.
		list: `SELECT ` + recordCols + ` FROM ` + n.locks + `
WHERE key >= $1 AND starts_with(key, $1) AND key > $2
	AND owner IS NOT NULL AND expires_at > clock_timestamp()
ORDER BY key LIMIT $3`,

		// The trigger emits EventExpired for each row marked free here.
		// A row of another kind than a mutex (owner NULL) is never here.
		expire: `UPDATE ` + n.locks + ` SET owner = NULL, holder = '', expires_at = NULL, changed_at = clock_timestamp()
WHERE key IN (
	SELECT key FROM ` + n.locks + `
	WHERE owner IS NOT NULL AND expires_at <= clock_timestamp()
	ORDER BY expires_at LIMIT ` + strconv.Itoa(expireBatch) + `
	FOR UPDATE SKIP LOCKED)
AND owner IS NOT NULL AND expires_at <= clock_timestamp()`,

		// $1 idle_retention µs.
		deleteIdle: `DELETE FROM ` + n.locks + `
WHERE key IN (
	SELECT key FROM ` + n.locks + `
	WHERE owner IS NULL AND changed_at < clock_timestamp() - $1::bigint * interval '1 microsecond'
		AND NOT EXISTS (SELECT FROM ` + n.grants + ` g WHERE g.key = ` + n.locks + `.key)
	LIMIT ` + strconv.Itoa(deleteBatch) + `
	FOR UPDATE SKIP LOCKED)
AND owner IS NULL AND NOT EXISTS (SELECT FROM ` + n.grants + ` g WHERE g.key = ` + n.locks + `.key)`,

		// Microseconds until the earliest expiry, NULL when nothing is held.
		nextExpiry: `SELECT (extract(epoch FROM least(
	(SELECT min(expires_at) FROM ` + n.locks + ` WHERE owner IS NOT NULL),
	(SELECT min(expires_at) FROM ` + n.grants + `)) - clock_timestamp()) * 1000000)::bigint`,
	}
}

// newInstance draws the number that names this plugin process in the rows
// it acquires (acquired_by): random, so a restarted plugin is another one.
func newInstance() (int64, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return 0, fmt.Errorf("postgres: instance id: %w", err)
	}
	return int64(binary.BigEndian.Uint64(b[:])>>1) + 1, nil
}

// digest is what the table stores for an owner token.
func digest(token string) []byte {
	sum := sha256.Sum256([]byte(token))
	return sum[:]
}

func micros(d time.Duration) int64 { return d.Microseconds() }

// scanRecord reads recordCols.
func scanRecord(row interface{ Scan(...any) error }, extra ...any) (backend.Record, error) {
	var (
		r         backend.Record
		fencing   int64
		wall, lg  int64
		remaining int64
	)
	dest := append(extra, &r.Key, &fencing, &r.Holder, &r.ExpiresAt, &wall, &lg, &remaining)
	if err := row.Scan(dest...); err != nil {
		return backend.Record{}, err
	}
	r.FencingToken = uint64(fencing)
	r.Stamp = hlc.Timestamp{WallTime: wall, Logical: uint32(lg)}
	r.Remaining = max(time.Duration(remaining)*time.Microsecond, 0)
	return r, nil
}

// call bounds one backend call by call_timeout and by Close.
func (b *Backend) call(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if b.ctx.Err() != nil {
		return nil, nil, ErrClosed
	}
	ctx, cancel := context.WithTimeout(ctx, b.opts.CallTimeout)
	stop := context.AfterFunc(b.ctx, cancel)
	return ctx, func() { stop(); cancel() }, nil
}

// wrap classifies a database error for the engine: the caller's own
// cancellation stays a context error, refused data is invalid_argument, and
// everything else (refused or lost connections, timeouts, server shutdown)
// is unavailable.
func (b *Backend) wrap(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		if b.ctx.Err() != nil {
			return ErrClosed
		}
		// The caller's deadline, or ours (call_timeout): both mean the
		// database did not answer in time.
		return fmt.Errorf("%w: postgres: %s: %w", backend.ErrUnavailable, op, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "22") {
		return fmt.Errorf("%w: postgres: %s: %w", backend.ErrInvalidArgument, op, err)
	}
	return fmt.Errorf("%w: postgres: %s: %w", backend.ErrUnavailable, op, err)
}

func checkTTL(ttl time.Duration) error {
	if ttl < MinTTL || ttl > MaxTTL {
		return fmt.Errorf("%w: ttl %s is outside the postgres backend's range [%s, %s]",
			backend.ErrInvalidArgument, ttl, MinTTL, MaxTTL)
	}
	return nil
}

func checkKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: key must not be empty", backend.ErrInvalidArgument)
	}
	if strings.IndexByte(key, 0) >= 0 {
		return fmt.Errorf("%w: key must not contain NUL bytes", backend.ErrInvalidArgument)
	}
	return nil
}

// acquireAttempts bounds the retries of an Acquire whose statement neither
// took the row nor saw a live holder (the holder committed after the
// statement's snapshot, or expired during it). Each retry is a new atomic
// statement; two suffice in practice.
const acquireAttempts = 5

// Acquire implements backend.Backend.
func (b *Backend) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.AcquireResult, error) {
	if err := checkKey(req.Key); err != nil {
		return backend.AcquireResult{}, err
	}
	if req.OwnerToken == "" {
		return backend.AcquireResult{}, fmt.Errorf("%w: owner_token must not be empty", backend.ErrInvalidArgument)
	}
	if err := checkTTL(req.TTL); err != nil {
		return backend.AcquireResult{}, err
	}
	if req.Kind != backend.KindMutex {
		return b.acquireGrant(ctx, req)
	}
	if err := checkNoDelay(req.LockDelay); err != nil {
		return backend.AcquireResult{}, err
	}
	if req.ReplayOnly {
		// Only a repeat is answered (requests.go).
		return b.replayOnly(ctx, req)
	}
	if req.Request.ID != "" {
		// A request identity is compared and kept by lock_acquire.
		return b.acquireIdent(ctx, req)
	}
	ctx, done, err := b.call(ctx)
	if err != nil {
		return backend.AcquireResult{}, err
	}
	defer done()
	// NextStamp against the zero stamp: what a brand-new key stores; the
	// statement raises it past the key's last stamp when the row exists.
	st := backend.NextStamp(hlc.Timestamp{}, req.Stamp)
	owner := digest(req.OwnerToken)
	for range acquireAttempts {
		var acquired bool
		rec, err := scanRecord(b.pool.QueryRow(ctx, b.sql.acquire,
			req.Key, owner, req.Holder, micros(req.TTL), st.WallTime, int64(st.Logical), b.mark, b.instance), &acquired)
		if errors.Is(err, pgx.ErrNoRows) {
			// Neither taken nor held: the key changed hands during the
			// statement, or it is kept with another kind (whose row the
			// statement never takes, and which stays so while it lives).
			var kind string
			var limit int
			err := b.pool.QueryRow(ctx, b.sql.kind, req.Key).Scan(&kind, &limit)
			if err == nil && kind != "" {
				return b.keptOther(ctx, req.Key, kind, limit)
			}
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return backend.AcquireResult{}, b.wrap(ctx, "acquire "+strconv.Quote(req.Key), err)
			}
			continue
		}
		if err != nil {
			return backend.AcquireResult{}, b.wrap(ctx, "acquire "+strconv.Quote(req.Key), err)
		}
		if acquired {
			b.scheduled(rec.Remaining)
		}
		return backend.AcquireResult{Acquired: acquired, Record: rec}, nil
	}
	return backend.AcquireResult{}, fmt.Errorf("%w: postgres: acquire %q: the key changed hands %d times during the call; retry",
		backend.ErrUnavailable, req.Key, acquireAttempts)
}

// Release implements backend.Backend.
func (b *Backend) Release(ctx context.Context, req backend.ReleaseRequest) (bool, error) {
	if err := checkKey(req.Key); err != nil {
		return false, err
	}
	// A key this plugin granted on most likely holds grants: try its grant
	// first (the answer is the same in either order, a key being of one
	// kind at a time; the order saves a round trip).
	grantFirst := b.hints.has(req.Key)
	if grantFirst {
		if ok, err := b.releaseGrant(ctx, req); ok || err != nil {
			return ok, err
		}
	}
	if req.Request.ID != "" && req.OwnerToken != "" {
		ok, err := b.releaseIdent(ctx, req)
		if ok || err != nil || grantFirst {
			return ok, err
		}
		return b.releaseGrant(ctx, req)
	}
	if req.OwnerToken == "" {
		return false, nil
	}
	ctx, done, err := b.call(ctx)
	if err != nil {
		return false, err
	}
	defer done()
	tag, err := b.pool.Exec(ctx, b.sql.release, req.Key, digest(req.OwnerToken),
		req.Stamp.WallTime, int64(req.Stamp.Logical), req.Abandon)
	if err != nil {
		return false, b.wrap(ctx, "release "+strconv.Quote(req.Key), err)
	}
	if tag.RowsAffected() == 1 || grantFirst {
		return tag.RowsAffected() == 1, nil
	}
	// Not a mutex lock of this owner: perhaps one of the key's grants.
	return b.releaseGrant(ctx, req)
}

// Extend implements backend.Backend. The record keeps its acquisition stamp.
func (b *Backend) Extend(ctx context.Context, req backend.ExtendRequest) (backend.ExtendResult, error) {
	if err := checkKey(req.Key); err != nil {
		return backend.ExtendResult{}, err
	}
	if err := checkTTL(req.TTL); err != nil {
		return backend.ExtendResult{}, err
	}
	if req.OwnerToken == "" {
		return backend.ExtendResult{}, nil
	}
	grantFirst := b.hints.has(req.Key) // as in Release
	if grantFirst {
		if res, err := b.extendGrant(ctx, req); res.Extended || err != nil {
			return res, err
		}
	}
	if req.Request.ID != "" {
		res, err := b.extendIdent(ctx, req)
		if res.Extended || err != nil || grantFirst {
			return res, err
		}
		return b.extendGrant(ctx, req)
	}
	ctx, done, err := b.call(ctx)
	if err != nil {
		return backend.ExtendResult{}, err
	}
	defer done()
	rec, err := scanRecord(b.pool.QueryRow(ctx, b.sql.extend, req.Key, digest(req.OwnerToken), micros(req.TTL)))
	if errors.Is(err, pgx.ErrNoRows) {
		if grantFirst {
			return backend.ExtendResult{}, nil
		}
		// Not a mutex lock of this owner: perhaps one of the key's grants.
		return b.extendGrant(ctx, req)
	}
	if err != nil {
		return backend.ExtendResult{}, b.wrap(ctx, "extend "+strconv.Quote(req.Key), err)
	}
	b.scheduled(rec.Remaining)
	return backend.ExtendResult{Extended: true, Record: rec}, nil
}

// Get implements backend.Backend.
func (b *Backend) Get(ctx context.Context, key string) (backend.Record, bool, error) {
	if err := checkKey(key); err != nil {
		return backend.Record{}, false, err
	}
	ctx, done, err := b.call(ctx)
	if err != nil {
		return backend.Record{}, false, err
	}
	defer done()
	rec, err := scanRecord(b.pool.QueryRow(ctx, b.sql.get, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return b.getGrants(ctx, key)
	}
	if err != nil {
		return backend.Record{}, false, b.wrap(ctx, "get "+strconv.Quote(key), err)
	}
	return rec, true, nil
}

// pageTokenPrefix versions the page token format.
const pageTokenPrefix = "p1:"

func encodePageToken(lastKey string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(pageTokenPrefix + lastKey))
}

func decodePageToken(tok string) (string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || !strings.HasPrefix(string(raw), pageTokenPrefix) {
		return "", fmt.Errorf("%w: page_token is not a token this backend issued", backend.ErrInvalidArgument)
	}
	return strings.TrimPrefix(string(raw), pageTokenPrefix), nil
}

// List implements backend.Backend: one indexed range scan per page.
func (b *Backend) List(ctx context.Context, req backend.ListRequest) (backend.ListPage, error) {
	if req.PageSize < 1 {
		return backend.ListPage{}, fmt.Errorf("%w: page_size must be at least 1, got %d", backend.ErrInvalidArgument, req.PageSize)
	}
	after := ""
	if req.PageToken != "" {
		k, err := decodePageToken(req.PageToken)
		if err != nil {
			return backend.ListPage{}, err
		}
		after = k
	}
	if strings.IndexByte(req.Prefix, 0) >= 0 {
		return backend.ListPage{}, fmt.Errorf("%w: prefix must not contain NUL bytes", backend.ErrInvalidArgument)
	}
	ctx, done, err := b.call(ctx)
	if err != nil {
		return backend.ListPage{}, err
	}
	defer done()
	mutexes, err := collectRecords(b.pool.Query(ctx, b.sql.list, req.Prefix, after, req.PageSize+1))
	if err != nil {
		return backend.ListPage{}, b.wrap(ctx, "list", err)
	}
	// PageSize counts grants, and a key's grants are never split across
	// pages: with PageSize + MaxLimit + 1 grant rows, every key a page can
	// reach is read whole (listGrants leaves out a key cut by the limit).
	grants, moreGrants, err := b.listGrants(ctx, req.Prefix, after, req.PageSize+backend.MaxLimit+1)
	if err != nil {
		return backend.ListPage{}, b.wrap(ctx, "list", err)
	}
	var page backend.ListPage
	count := 0
	for len(mutexes)+len(grants) > 0 && count < req.PageSize {
		var rec backend.Record
		if len(grants) == 0 || len(mutexes) > 0 && mutexes[0].Key < grants[0].Key {
			rec, mutexes = mutexes[0], mutexes[1:]
		} else {
			rec, grants = grants[0], grants[1:]
		}
		page.Records = append(page.Records, rec)
		count += max(len(rec.Holders), 1)
	}
	if len(page.Records) > 0 && (len(mutexes) > 0 || len(grants) > 0 || moreGrants) {
		page.NextPageToken = encodePageToken(page.Records[len(page.Records)-1].Key)
	}
	return page, nil
}
