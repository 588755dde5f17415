package redis

import (
	"context"
	"fmt"
	"slices"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/core/backend"
)

// MaxKeys is the most keys one AcquireSet takes: the set's script runs
// alone on the Redis server (nothing else runs meanwhile), so the bound
// keeps it short.
const MaxKeys = 64

var _ backend.SetBackend = (*Backend)(nil)

// MaxLockDelay is the longest lock-delay kept (Consul's bound).
const MaxLockDelay = time.Minute

// errConflict is a repeat of a kept request id with another fingerprint.
var errConflict = fmt.Errorf("%w: the request id was used with other arguments", backend.ErrRequestConflict)

// setKeys checks a set's keys and returns its Redis keys (lock, meta and
// delay of each, in order; for a set of one key and withGrants, its
// grantKeys, which let Release and Extend find a grant) and event channels. In a Cluster every key of a set must
// hash to one slot, as every key of a script must: the set is refused with
// backend.ErrFailedPrecondition otherwise, naming the rule and the way to
// follow it (one hash tag for the set's keys).
func (b *Backend) setKeys(keys []string, withGrants bool) (rkeys, channels []string, err error) {
	if len(keys) < 1 || len(keys) > MaxKeys {
		return nil, nil, fmt.Errorf("%w: a set names %d keys; the redis backend takes 1 to %d",
			backend.ErrInvalidArgument, len(keys), MaxKeys)
	}
	if slices.Contains(keys, "") {
		return nil, nil, fmt.Errorf("%w: key must not be empty", backend.ErrInvalidArgument)
	}
	if len(keys) > 1 {
		sorted := slices.Clone(keys)
		slices.Sort(sorted)
		for i := 1; i < len(sorted); i++ {
			if sorted[i-1] == sorted[i] {
				return nil, nil, fmt.Errorf("%w: key %q is named twice in one set", backend.ErrInvalidArgument, sorted[i])
			}
		}
	}
	if len(keys) == 1 && withGrants {
		return b.grantKeys(keys[0]), []string{b.channel(keys[0])}, nil
	}
	_, cluster := b.client.(*goredis.ClusterClient)
	first := ""
	rkeys = make([]string, 0, 3*len(keys))
	channels = make([]string, 0, len(keys))
	for _, k := range keys {
		rk := b.keys(k)
		if first == "" {
			first = rk[0]
		}
		if cluster && clusterSlot(rk[0]) != clusterSlot(first) {
			return nil, nil, fmt.Errorf("%w: in Redis Cluster every key of a set must hash to one slot, "+
				"and %q (slot %d) and %q (slot %d) do not: give the set's keys one hash tag, "+
				"as in {accounts}/1 and {accounts}/2 (only the text between the first { and the next } decides the slot)",
				backend.ErrFailedPrecondition, keys[0], clusterSlot(first), k, clusterSlot(rk[0]))
		}
		rkeys = append(rkeys, rk...)
		channels = append(channels, b.channel(k))
	}
	return rkeys, channels, nil
}

// AcquireSet runs the acquire script over every key: one atomic step.
func (b *Backend) AcquireSet(ctx context.Context, req backend.AcquireSetRequest) (backend.AcquireSetResult, error) {
	return runOne(ctx, b, req, b.acquireCall, b.acquireReply)
}

// acquireCall checks an AcquireSet and makes its script call.
func (b *Backend) acquireCall(req backend.AcquireSetRequest) (scriptCall, error) {
	keys := make([]string, len(req.Claims))
	for i, c := range req.Claims {
		keys[i] = c.Key
	}
	rkeys, channels, err := b.setKeys(keys, false)
	if err != nil {
		return scriptCall{}, err
	}
	if req.OwnerToken == "" {
		// A lock under the empty token is one the empty token would release.
		return scriptCall{}, fmt.Errorf("%w: key and owner_token must not be empty", backend.ErrInvalidArgument)
	}
	if err := b.checkTTL(req.TTL); err != nil {
		return scriptCall{}, err
	}
	if req.LockDelay < 0 || req.LockDelay > MaxLockDelay {
		return scriptCall{}, fmt.Errorf("%w: lock_delay %s is outside the redis backend's range [0, %s]",
			backend.ErrInvalidArgument, req.LockDelay, MaxLockDelay)
	}
	s, n, l := splitStamp(req.Stamp)
	args := []any{req.OwnerToken, millis(req.TTL), req.Holder, s, n, l, millis(b.opts.MetaRetention),
		req.Request.ID, req.Request.Fingerprint, req.Replay, millis(req.LockDelay), flag(req.ReplayOnly)}
	for _, c := range channels {
		args = append(args, c)
	}
	return scriptCall{op: "acquire", script: acquireScript, batch: acquireBatchScript, keys: rkeys, args: args}, nil
}

// acquireReply reads the acquire script's reply to req.
func (b *Backend) acquireReply(req backend.AcquireSetRequest, res []any) (backend.AcquireSetResult, error) {
	keys := make([]string, len(req.Claims))
	for i, c := range req.Claims {
		keys[i] = c.Key
	}
	var err error
	bad := func() (backend.AcquireSetResult, error) {
		return backend.AcquireSetResult{}, b.fail("acquire", fmt.Errorf("unexpected script reply %v", res))
	}
	if len(res) == 0 {
		return bad()
	}
	switch asInt(res[0]) {
	case 1: // {1, ts, tus, replayed, replay, rec...}
		if len(res) != 5+recLen*len(keys) {
			return bad()
		}
		out := backend.AcquireSetResult{Acquired: true, Replayed: asInt(res[3]) == 1, Replay: asString(res[4]),
			Records: make([]backend.Record, len(keys))}
		for i, k := range keys {
			if out.Records[i], err = parseRec(k, res[1], res[2], res[5+recLen*i:]); err != nil {
				return backend.AcquireSetResult{}, b.fail("acquire", err)
			}
		}
		return out, nil
	case 0: // {0, ts, tus, i, rec}
		i := int(asInt(res[3])) - 1
		if len(res) != 4+recLen || i < 0 || i >= len(keys) {
			return bad()
		}
		rec, err := parseRec(keys[i], res[1], res[2], res[4:])
		if err != nil {
			return backend.AcquireSetResult{}, b.fail("acquire", err)
		}
		return backend.AcquireSetResult{Blocker: rec}, nil
	case 3: // {3, i, delay ms}
		i := int(asInt(res[1])) - 1
		if len(res) != 3 || i < 0 || i >= len(keys) {
			return bad()
		}
		return backend.AcquireSetResult{Blocker: backend.Record{Key: keys[i], DelayRemaining: time.Duration(asInt(res[2])) * time.Millisecond}}, nil
	case 5: // {5, i, kind, limit}: kept with another kind (sets are mutexes)
		i := int(asInt(res[1])) - 1
		kind, ok := kindByName(asString(res[2]))
		if len(res) != 4 || i < 0 || i >= len(keys) || !ok {
			return bad()
		}
		return backend.AcquireSetResult{Blocker: backend.Record{Key: keys[i], Kind: kind, Limit: int(asInt(res[3]))}}, nil
	case 4:
		return backend.AcquireSetResult{}, nil
	case -1:
		return backend.AcquireSetResult{}, errConflict
	}
	return bad()
}

// ReleaseSet runs the release script over every key: compare the token on
// every key, then delete every lock.
func (b *Backend) ReleaseSet(ctx context.Context, req backend.ReleaseSetRequest) (bool, error) {
	return runOne(ctx, b, req, b.releaseCall, b.releaseReply)
}

// releaseCall checks a ReleaseSet and makes its script call (none for the
// empty token, which holds nothing).
func (b *Backend) releaseCall(req backend.ReleaseSetRequest) (scriptCall, error) {
	// A key's grant, or its mutex lock: one key names its grants key too.
	rkeys, channels, err := b.setKeys(req.Keys, true)
	if err != nil || req.OwnerToken == "" {
		return scriptCall{}, err
	}
	s, n, l := splitStamp(req.Stamp)
	args := []any{req.OwnerToken, s, n, l, millis(b.opts.MetaRetention), req.Request.ID, req.Request.Fingerprint, flag(req.Abandon)}
	for _, c := range channels {
		args = append(args, c)
	}
	return scriptCall{op: "release", script: releaseScript, batch: releaseBatchScript, keys: rkeys, args: args}, nil
}

// releaseReply reads the release script's reply: 1 released, 0 not, -1 a
// request conflict.
func (b *Backend) releaseReply(_ backend.ReleaseSetRequest, res []any) (bool, error) {
	if len(res) != 1 {
		return false, b.fail("release", fmt.Errorf("unexpected script reply %v", res))
	}
	switch asInt(res[0]) {
	case -1:
		return false, errConflict
	case 1:
		return true, nil
	}
	return false, nil
}

// ExtendSet runs the extend script over every key: compare the token on
// every key, then renew every lock.
func (b *Backend) ExtendSet(ctx context.Context, req backend.ExtendSetRequest) (backend.ExtendSetResult, error) {
	return runOne(ctx, b, req, b.extendCall, b.extendReply)
}

// extendCall checks an ExtendSet and makes its script call (none for the
// empty token, which holds nothing).
func (b *Backend) extendCall(req backend.ExtendSetRequest) (scriptCall, error) {
	// A key's grant, or its mutex lock: one key names its grants key too.
	rkeys, _, err := b.setKeys(req.Keys, true)
	if err != nil {
		return scriptCall{}, err
	}
	if err := b.checkTTL(req.TTL); err != nil || req.OwnerToken == "" {
		return scriptCall{}, err
	}
	s, n, l := splitStamp(req.Stamp)
	return scriptCall{op: "extend", script: extendScript, batch: extendBatchScript, keys: rkeys, args: []any{req.OwnerToken, millis(req.TTL), s, n, l,
		millis(b.opts.MetaRetention), req.Request.ID, req.Request.Fingerprint}}, nil
}

// extendReply reads the extend script's reply to req.
func (b *Backend) extendReply(req backend.ExtendSetRequest, res []any) (backend.ExtendSetResult, error) {
	var err error
	if len(res) == 0 {
		return backend.ExtendSetResult{}, b.fail("extend", fmt.Errorf("unexpected script reply %v", res))
	}
	switch asInt(res[0]) {
	case 0:
		return backend.ExtendSetResult{}, nil
	case -1:
		return backend.ExtendSetResult{}, errConflict
	case 6: // a grant renewed (luaExtendGrant)
		rec, _, _, err := parseState(req.Keys[0], res)
		if err != nil {
			return backend.ExtendSetResult{}, b.fail("extend", err)
		}
		return backend.ExtendSetResult{Extended: true, Records: []backend.Record{rec}}, nil
	}
	if len(res) != 3+recLen*len(req.Keys) {
		return backend.ExtendSetResult{}, b.fail("extend", fmt.Errorf("unexpected script reply %v", res))
	}
	out := backend.ExtendSetResult{Extended: true, Records: make([]backend.Record, len(req.Keys))}
	for i, k := range req.Keys {
		if out.Records[i], err = parseRec(k, res[1], res[2], res[3+recLen*i:]); err != nil {
			return backend.ExtendSetResult{}, b.fail("extend", err)
		}
	}
	return out, nil
}

// parseGet reads the get script's reply.
func (b *Backend) parseGet(key string, res []any) (backend.Record, bool, error) {
	switch asInt(res[0]) {
	case 1:
		if len(res) != 3+recLen {
			break
		}
		rec, err := parseRec(key, res[1], res[2], res[3:])
		if err != nil {
			return backend.Record{}, false, b.fail("get", err)
		}
		return rec, true, nil
	case 2:
		rec, _, _, err := parseState(key, res)
		if err != nil {
			return backend.Record{}, false, b.fail("get", err)
		}
		return rec, true, nil
	case 3:
		if len(res) != 2 {
			break
		}
		return backend.Record{Key: key, DelayRemaining: time.Duration(asInt(res[1])) * time.Millisecond}, false, nil
	case 0:
		return backend.Record{}, false, nil
	}
	return backend.Record{}, false, b.fail("get", fmt.Errorf("unexpected script reply %v", res))
}

// recLen is the length of a lock in a script's reply: fence, holder, ss,
// sn, sl, pttl ms, lock-delay ms.
const recLen = 7

// parseRec reads one lock of a script's reply, answered at server time
// ts (seconds), tus (microseconds).
func parseRec(key string, ts, tus any, v []any) (backend.Record, error) {
	if len(v) < recLen {
		return backend.Record{}, fmt.Errorf("unexpected script reply %v", v)
	}
	rec, err := parseRecord(key, []any{v[0], v[1], v[2], v[3], v[4], v[5], ts, tus})
	rec.LockDelay = time.Duration(asInt(v[6])) * time.Millisecond
	return rec, err
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// clusterSlot is the Redis Cluster slot of a Redis key: CRC16 (XMODEM) of
// its hash tag, or of the whole key when it has none, modulo 16384.
func clusterSlot(rk string) int {
	if tag, ok := hashTag(rk); ok {
		rk = tag
	}
	var crc uint16
	for i := 0; i < len(rk); i++ {
		crc ^= uint16(rk[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
