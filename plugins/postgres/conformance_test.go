package postgres_test

import (
	"testing"

	"github.com/holdfast/holdfast/conformance"
	"github.com/holdfast/holdfast/conformance/harness"
	"github.com/holdfast/holdfast/plugins/postgres/pgtest"
)

// conformanceOptions are the plugin options for a conformance run: the
// shared PostgreSQL, in a schema of the run's own (dropped when it ends).
func conformanceOptions(t *testing.T) map[string]string {
	dsn := pgtest.DSN(t)
	schema := schemaName(t)
	t.Cleanup(func() { dropSchema(t, dsn, schema) })
	return map[string]string{"dsn": dsn, "schema": schema}
}

// TestBackendConformance runs the shared suite's backend level against the
// holdfast-backend-postgres executable, through the plugin host.
func TestBackendConformance(t *testing.T) {
	conformance.RunBackend(t, conformance.Config{
		Plugin:        "postgres",
		PluginOptions: conformanceOptions(t),
	})
}

// TestServiceConformance runs the shared suite's service level against two
// holdfast servers on one PostgreSQL schema, started by the suite.
func TestServiceConformance(t *testing.T) {
	opts := conformanceOptions(t)
	// By path: the plugin need not sit next to the holdfast binary.
	plugin, err := harness.Binary(t.Context(), t.TempDir(), "holdfast-backend-postgres")
	if err != nil {
		t.Fatal(err)
	}
	conformance.RunService(t, conformance.Config{
		Serve: &harness.Options{Backend: plugin, BackendOptions: opts},
	})
}
