// Command holdfast-backend-etcd is holdfast's etcd backend plugin. The
// holdfast server launches it:
//
//	holdfast serve --backend etcd --backend-opt endpoints=http://127.0.0.1:2379
//
// Options (--backend-opt key=value): endpoints, dial_timeout, call_timeout,
// prefix, username, password, tls_ca, tls_cert, tls_key, min_ttl; see the
// package doc of github.com/holdfast/holdfast/plugins/etcd.
package main

import (
	"github.com/holdfast/holdfast/core/backend/backendserver"
	"github.com/holdfast/holdfast/plugins/etcd"
)

func main() {
	backendserver.Serve(etcd.Open)
}
