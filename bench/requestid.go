package main

import (
	"crypto/rand"
	"encoding/base64"
	"flag"
)

// requestIDs makes the holdfast rows that stand for a client (the
// uncontended Acquire+Release rows, the engine rows under them, the hot-key
// workers, Acquire beside List) send a fresh request_id with every Acquire
// and Release, as every SDK call does. The request id is what makes a
// client's retry safe, and a backend keeps and compares it in the step that
// decides the call, so a call with one can take another path in the store
// than a call without (PostgreSQL: the plpgsql functions of schema v6 in
// place of the plain statements). -request-ids=false measures the old path,
// which no SDK takes; the peers' rows are the same either way.
var requestIDs = flag.Bool("request-ids", true,
	"holdfast rows send a fresh request_id with each Acquire and Release, as every SDK call does (false: none, a path no SDK takes)")

// newRequestID draws a request id in the format the Go SDK sends (its
// generator is internal to sdk-go): 128 random bits, base64url without
// padding, 22 characters (request_id takes 16 to 128 printable ASCII
// characters). It is "" when -request-ids=false.
func newRequestID() string {
	if !*requestIDs {
		return ""
	}
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// ridLegend says in the tables' titles which path the holdfast rows took.
func ridLegend() string {
	if *requestIDs {
		return "with a fresh request_id each, as the SDKs send"
	}
	return "without request_id (-request-ids=false: a path no SDK takes)"
}
