// Package etcdconformance runs holdfast's shared conformance suite
// (github.com/holdfast/holdfast/conformance) against the etcd backend, at
// both levels: the plugin driven through the plugin host, and holdfast
// servers on it driven through their API. It has no code outside its tests.
package etcdconformance
