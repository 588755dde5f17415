package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SetWatchPing changes how long a watch waits quietly before pinging, for a
// test; it returns a function restoring the old value.
func SetWatchPing(d time.Duration) (restore func()) {
	old := watchPing.Swap(int64(d))
	return func() { watchPing.Store(old) }
}

// CleanerSleepsUntil reports when b's cleaner wakes next; asleep is false
// while it is in a round (whose schedule is not known yet).
func CleanerSleepsUntil(b *Backend) (at time.Time, asleep bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.awake {
		return time.Time{}, false
	}
	return b.wakeAt, true
}

// NewWithoutCleaner opens a backend on schema whose cleaner never runs, so a
// test can reach an expired row before any cleaner does. It is closed when t
// ends.
func NewWithoutCleaner(t testing.TB, dsn, schema string) *Backend {
	t.Helper()
	o, err := ParseOptions(map[string]string{"dsn": dsn, "schema": schema})
	if err != nil {
		t.Fatal(err)
	}
	o.noCleaner = true
	b, err := New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// CreateSchemaAt creates schema at layout version v (< SchemaVersion), as an
// older plugin would have, so a test can check the migration from it.
func CreateSchemaAt(ctx context.Context, dsn, schema string, v int) error {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	n := newNames(schema)
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `CREATE SCHEMA `+n.qschema); err != nil {
			return err
		}
		for i := 1; i <= v; i++ {
			if _, err := tx.Exec(ctx, migrations(n)[i-1]); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `COMMENT ON TABLE `+n.locks+` IS `+sqlLiteral(tableComment(v)))
		return err
	})
}
