package engine

import (
	"slices"
	"strconv"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// Multi-key leases.
//
// An Acquire with claims takes several keys in one atomic step of the
// backend (backend.SetBackend: one transaction, one script), all or none,
// under one owner token, one TTL and one lock-delay, with a fencing token
// per key. Release and Extend with keys act on every named key or none.
//
// Waiting: a waiter for a set joins the queue of every one of its keys in
// one step (waitq.JoinSet), so two waiters stand in the same order, their
// order of arrival, in every queue they share, and it tries the backend
// only when it heads all of them. Nobody waits for a later arrival, so
// overlapping sets never deadlock and nobody starves: a set is not passed
// by later single-key waiters on one of its keys (no barging), and a
// single-key waiter is not passed by a later set. On a fair backend the
// store's queues keep that order across servers the same way: a set's
// entries are put in every key's queue in one step (EnqueueSet: in etcd,
// one transaction, so they share one revision, the order of every queue).
// Keys go to the backend distinct and in byte order, the one order every
// store takes its row or key locks in.

// keySet is the keys one request names.
type keySet struct {
	keys  []string // distinct, in byte order: what the backend and the queues get
	asked []string // in the request's order: the answer's order
	multi bool     // named as claims or keys: answered as a multi-key lease
}

// set reports whether the backend must take the keys as a set.
func (s keySet) set() bool { return len(s.keys) > 1 }

func singleKey(key string) keySet {
	return keySet{keys: []string{key}, asked: []string{key}}
}

// keysOf validates the keys a request names: key, or list (claims or keys,
// field names the list in messages), not both.
func (e *Engine) keysOf(key string, list []string, field string) (keySet, error) {
	if len(list) == 0 {
		if err := checkKey("key", key); err != nil {
			return keySet{}, err
		}
		return singleKey(key), nil
	}
	if key != "" {
		return keySet{}, invalidf("key and %s: set one or the other", field)
	}
	item := func(i int) string {
		if field == "claims" {
			return fieldIndex(field, i) + ".key"
		}
		return fieldIndex(field, i)
	}
	if limit := e.maxKeys(); len(list) > limit {
		if limit == 1 {
			return keySet{}, newErr(ErrUnimplemented, "%s: the backend %q takes one key per request (it lacks capability %s)",
				field, e.Info().Name, lockv1.Capability_CAPABILITY_MULTI_KEY)
		}
		return keySet{}, invalidf("%s: %d keys exceeds the maximum %d keys per request", field, len(list), limit)
	}
	seen := make(map[string]int, len(list))
	for i, k := range list {
		if err := checkKey(item(i), k); err != nil {
			return keySet{}, err
		}
		if j, dup := seen[k]; dup {
			return keySet{}, invalidf("%s: %q is named twice (%s and %s)", field, k, item(j), item(i))
		}
		seen[k] = i
	}
	sorted := slices.Clone(list)
	slices.Sort(sorted)
	return keySet{keys: sorted, asked: list, multi: true}, nil
}

func fieldIndex(field string, i int) string {
	return field + "[" + strconv.Itoa(i) + "]"
}

// claimKeys are the keys of an Acquire's claims.
func claimKeys(claims []*lockv1.Claim) []string {
	keys := make([]string, len(claims))
	for i, c := range claims {
		keys[i] = c.GetKey()
	}
	return keys
}

// claims are the backend's claims of s.
func (s keySet) claims() []backend.Claim {
	out := make([]backend.Claim, len(s.keys))
	for i, k := range s.keys {
		out[i] = backend.Claim{Key: k}
	}
	return out
}

// sets is the backend's set calls, when it takes sets.
func (e *Engine) sets() (backend.SetBackend, bool) {
	sb, ok := e.b.(backend.SetBackend)
	return sb, ok
}

// maxKeys is the most keys one request may name on this server: the
// backend's MaxKeys (when it implements the set calls, and on a fair
// backend the set queue as well), narrowed by Config.MaxKeys.
func (e *Engine) maxKeys() int {
	info := e.Info()
	if info.MaxKeys <= 1 {
		return 1
	}
	if _, ok := e.b.(backend.SetBackend); !ok {
		return 1
	}
	if info.Fair {
		if _, ok := e.b.(backend.FairSetBackend); !ok {
			return 1
		}
	}
	return min(info.MaxKeys, e.cfg.MaxKeys)
}

// maxLockDelay is the longest lock_delay an Acquire may ask for: the
// backend's, narrowed by Config.MaxLockDelay (0: no lock-delay).
func (e *Engine) maxLockDelay() time.Duration {
	return max(0, min(e.Info().MaxLockDelay, e.cfg.MaxLockDelay))
}
