package postgres

import (
	"context"
	"testing"
	"time"
)

// SetWatchPing changes how long a watch waits quietly before pinging, for a
// test; it returns a function restoring the old value.
func SetWatchPing(d time.Duration) (restore func()) {
	old := watchPing.Swap(int64(d))
	return func() { watchPing.Store(old) }
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
