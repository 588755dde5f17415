// Command holdfast-backend-postgres is holdfast's PostgreSQL backend plugin.
// The holdfast server launches it:
//
//	holdfast serve --backend postgres --backend-opt dsn=postgres://user:pass@host:5432/db
//
// Options (--backend-opt key=value): dsn, schema, max_conns, connect_timeout,
// call_timeout, statement_timeout, idle_retention, cleaner_max_sleep; see the
// package doc of github.com/holdfast/holdfast/plugins/postgres.
package main

import (
	"github.com/holdfast/holdfast/core/backend/backendserver"
	"github.com/holdfast/holdfast/plugins/postgres"
)

func main() {
	backendserver.Serve(postgres.Open)
}
