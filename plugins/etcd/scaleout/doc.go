// Package scaleout holds holdfast's scale-out tests: several `holdfast
// serve` processes, stateless, sharing their locks through one etcd (one
// member, or a three-member cluster that loses a member under load), with
// every critical section writing to a fenced resource that rejects stale
// fencing tokens. It has no code outside its tests.
package scaleout
