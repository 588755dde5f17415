package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/plugins/postgres"
	"github.com/holdfast/holdfast/plugins/postgres/pgtest"
)

// TestMigrateFromV4: a schema at layout v4 (semaphores and rwlocks, no
// values) with a grant held in it is migrated on start: the grant stays
// held, with an empty value, its owner can still release it, and the
// migrated schema keeps elections (a campaign with a value, a Proclaim).
func TestMigrateFromV4(t *testing.T) {
	dsn := pgtest.DSN(t)
	schema := schemaName(t)
	t.Cleanup(func() { dropSchema(t, dsn, schema) })
	ctx := context.Background()
	if err := postgres.CreateSchemaAt(ctx, dsn, schema, 4); err != nil {
		t.Fatal(err)
	}
	tok := token()
	// The grant as a v4 plugin took it: v4's grant_acquire, which has no
	// value parameter.
	fencing := query[int64](t, dsn, `SELECT r_about FROM `+schema+`.grant_acquire('sem', sha256($1::bytea), 'v4', 60000000, 1, 0,
		'semaphore', 2, 1, '', '', '', false) LIMIT 1`, []byte(tok))
	b := open(t, map[string]string{"schema": schema})
	if got := query[string](t, dsn, "SELECT obj_description(to_regclass($1), 'pg_class')", schema+".locks"); got != "holdfast locks v8" {
		t.Fatalf("table comment %q after migration", got)
	}
	rec, held, err := b.Get(ctx, "sem")
	if err != nil || !held || rec.FencingToken != uint64(fencing) || rec.Holder != "v4" || rec.Value != "" || len(rec.Holders) != 1 {
		t.Fatalf("Get of the v4 grant: %+v %v %v, want held by %d (holder v4, no value)", rec, held, err, fencing)
	}
	if !release(t, b, "sem", tok) {
		t.Fatal("the v4 grant's owner could not release it")
	}

	leader := grantReq("lead", token(), backend.KindElection, 1, 1, time.Minute)
	leader.Value = "10.0.0.1:7410"
	res, err := b.Acquire(ctx, leader)
	if err != nil || !res.Acquired || res.Record.Value != leader.Value {
		t.Fatalf("campaign on the migrated schema: %+v %v", res, err)
	}
	p, err := b.Proclaim(ctx, backend.ProclaimRequest{Key: "lead", OwnerToken: leader.OwnerToken, Value: "10.0.0.2:7410", Stamp: clock.Now()})
	if err != nil || !p.Proclaimed || p.Record.Value != "10.0.0.2:7410" || p.Record.FencingToken != res.Record.FencingToken {
		t.Fatalf("proclaim on the migrated schema: %+v %v", p, err)
	}
}
