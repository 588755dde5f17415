// Package redisconformance runs holdfast's shared conformance suite
// (github.com/holdfast/holdfast/conformance) against the Redis backend, at
// both levels: the plugin driven through the plugin host, on a Redis without
// persistence and on one with an fsync'd append-only file, and holdfast
// servers on it driven through their API. It has no code outside its tests.
package redisconformance
