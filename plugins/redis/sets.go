package redis

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	goredis "github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/core/backend"
)

// MaxKeys is the most keys one AcquireSet takes: the set's script runs
// alone on the Redis server (nothing else runs meanwhile), so the bound
// keeps it short.
const MaxKeys = 64

var _ backend.SetBackend = (*Backend)(nil)

// A set's script gets KEYS = lock and meta key of every key, in the set's
// order (lock_1, meta_1, lock_2, meta_2, ...), and decides for all of them
// before it writes any: Redis runs a script as one atomic step, so the set
// is taken, released or renewed whole or not at all.

// acquireSetScript: ARGV = token, ttl ms, holder, stamp seconds,
// nanoseconds and logical, meta retention ms, then one event channel per
// key. Returns {0, i, fence, holder, ss, sn, sl, pttl ms, time s, time us}
// when key i (from 1) is held (nothing changed), else {1, time s, time us,
// ss, sn, sl, fence_1, ..., fence_n}: every key stores one stamp, the
// latest of the proposal and the successor of every key's last stamp.
var acquireSetScript = goredis.NewScript(luaPrelude + `
local token, ttl, holder = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local n = #KEYS / 2
local ts, tus, nowus = now()
for i = 1, n do
  local cur = redis.call('HMGET', KEYS[2*i-1], 't', 'f', 'h', 'ss', 'sn', 'sl')
  if cur[1] then
    return {0, i, cur[2], cur[3], cur[4], cur[5], cur[6], redis.call('PTTL', KEYS[2*i-1]), ts, tus}
  end
end
local ps, pn, pl = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local metas = {}
for i = 1, n do
  local m = redis.call('HMGET', KEYS[2*i], 'f', 'ss', 'sn', 'sl')
  metas[i] = m
  local ns, nn, nl = succ(tonumber(m[2]) or 0, tonumber(m[3]) or 0, tonumber(m[4]) or 0)
  if before(ps, pn, pl, ns, nn, nl) then ps, pn, pl = ns, nn, nl end
end
local s1, s2, s3 = fmt(ps), fmt(pn), fmt(pl)
local retain = tonumber(ARGV[7])
local out = {1, ts, tus, s1, s2, s3}
for i = 1, n do
  local lock, meta = KEYS[2*i-1], KEYS[2*i]
  local f = fmt(math.max((tonumber(metas[i][1]) or 0) + 1, nowus))
  redis.call('HSET', lock, 't', token, 'f', f, 'h', holder, 'ss', s1, 'sn', s2, 'sl', s3)
  redis.call('PEXPIRE', lock, ttl)
  redis.call('HSET', meta, 'f', f, 'h', holder, 'ss', s1, 'sn', s2, 'sl', s3)
  if retain > 0 then keep(meta, ttl + retain) else keep(meta, 0) end
  redis.call('PUBLISH', ARGV[7 + i], table.concat({'acquired', f, s1, s2, s3, fmt(ttl), ts, tus, holder}, '\n'))
  out[6 + i] = f
end
return out
`)

// releaseSetScript: ARGV = token, stamp seconds, nanoseconds and logical,
// meta retention ms, then one event channel per key. Returns 1 when the
// token held every key and all are deleted, else 0 (nothing changed).
var releaseSetScript = goredis.NewScript(luaPrelude + `
local n = #KEYS / 2
local curs = {}
for i = 1, n do
  local cur = redis.call('HMGET', KEYS[2*i-1], 't', 'f', 'h', 'ss', 'sn', 'sl')
  if cur[1] ~= ARGV[1] then return 0 end
  curs[i] = cur
end
local ts, tus = now()
for i = 1, n do
  local lock, meta, cur = KEYS[2*i-1], KEYS[2*i], curs[i]
  local pttl = redis.call('PTTL', lock)
  redis.call('DEL', lock)
  remember(meta, cur[2], cur[3], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]))
  keep(meta, tonumber(ARGV[5]))
  redis.call('PUBLISH', ARGV[5 + i], table.concat({'released', cur[2], cur[4], cur[5], cur[6], fmt(pttl), ts, tus, cur[3]}, '\n'))
end
return 1
`)

// extendSetScript: ARGV = token, ttl ms, stamp seconds, nanoseconds and
// logical, meta retention ms. Returns {0} when the token does not hold
// every key (nothing changed), else {1, time s, time us, then fence,
// holder, ss, sn, sl of every key}; each key keeps its acquisition stamp.
var extendSetScript = goredis.NewScript(luaPrelude + `
local n = #KEYS / 2
local curs = {}
for i = 1, n do
  local cur = redis.call('HMGET', KEYS[2*i-1], 't', 'f', 'h', 'ss', 'sn', 'sl')
  if cur[1] ~= ARGV[1] then return {0} end
  curs[i] = cur
end
local ts, tus = now()
local ttl, retain = tonumber(ARGV[2]), tonumber(ARGV[6])
local out = {1, ts, tus}
for i = 1, n do
  local lock, meta, cur = KEYS[2*i-1], KEYS[2*i], curs[i]
  redis.call('PEXPIRE', lock, ttl)
  remember(meta, cur[2], cur[3], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]))
  if retain > 0 then keep(meta, ttl + retain) else keep(meta, 0) end
  for j = 2, 6 do out[#out + 1] = cur[j] end
end
return out
`)

// setKeys checks a set's keys and returns its Redis keys (lock and meta of
// each, in order) and event channels. In a Cluster every key of a set must
// hash to one slot, as every key of a script must: the set is refused with
// backend.ErrFailedPrecondition otherwise, naming the rule and the way to
// follow it (one hash tag for the set's keys).
func (b *Backend) setKeys(keys []string) (rkeys, channels []string, err error) {
	if len(keys) < 1 || len(keys) > MaxKeys {
		return nil, nil, fmt.Errorf("%w: a set names %d keys; the redis backend takes 1 to %d",
			backend.ErrInvalidArgument, len(keys), MaxKeys)
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	for i, k := range sorted {
		if k == "" {
			return nil, nil, fmt.Errorf("%w: key must not be empty", backend.ErrInvalidArgument)
		}
		if i > 0 && sorted[i-1] == k {
			return nil, nil, fmt.Errorf("%w: key %q is named twice in one set", backend.ErrInvalidArgument, k)
		}
	}
	_, cluster := b.client.(*goredis.ClusterClient)
	first := b.lockKey(keys[0])
	for _, k := range keys {
		rk := b.keys(k)
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

// AcquireSet runs the set acquire script: one atomic step over every key.
func (b *Backend) AcquireSet(ctx context.Context, req backend.AcquireSetRequest) (backend.AcquireSetResult, error) {
	keys := make([]string, len(req.Claims))
	for i, c := range req.Claims {
		keys[i] = c.Key
	}
	rkeys, channels, err := b.setKeys(keys)
	if err != nil {
		return backend.AcquireSetResult{}, err
	}
	if req.OwnerToken == "" {
		return backend.AcquireSetResult{}, fmt.Errorf("%w: owner_token must not be empty", backend.ErrInvalidArgument)
	}
	if err := b.checkTTL(req.TTL); err != nil {
		return backend.AcquireSetResult{}, err
	}
	s, n, l := splitStamp(req.Stamp)
	args := []any{req.OwnerToken, millis(req.TTL), req.Holder, s, n, l, millis(b.opts.MetaRetention)}
	for _, c := range channels {
		args = append(args, c)
	}
	res, err := acquireSetScript.Run(ctx, b.client, rkeys, args...).Slice()
	if err != nil {
		return backend.AcquireSetResult{}, b.fail("acquire set", err)
	}
	if asInt(res[0]) != 1 {
		if len(res) < 10 {
			return backend.AcquireSetResult{}, b.fail("acquire set", fmt.Errorf("unexpected script reply %v", res))
		}
		i := int(asInt(res[1])) - 1
		if i < 0 || i >= len(keys) {
			return backend.AcquireSetResult{}, b.fail("acquire set", fmt.Errorf("unexpected script reply %v", res))
		}
		rec, err := parseRecord(keys[i], res[2:])
		if err != nil {
			return backend.AcquireSetResult{}, b.fail("acquire set", err)
		}
		return backend.AcquireSetResult{Blocker: rec}, nil
	}
	if len(res) != 6+len(keys) {
		return backend.AcquireSetResult{}, b.fail("acquire set", fmt.Errorf("unexpected script reply %v", res))
	}
	out := backend.AcquireSetResult{Acquired: true, Records: make([]backend.Record, len(keys))}
	ttl := strconv.FormatInt(millis(req.TTL), 10)
	for i, k := range keys {
		rec, err := parseRecord(k, []any{res[6+i], req.Holder, res[3], res[4], res[5], ttl, res[1], res[2]})
		if err != nil {
			return backend.AcquireSetResult{}, b.fail("acquire set", err)
		}
		out.Records[i] = rec
	}
	return out, nil
}

// ReleaseSet runs the set release script: compare the token on every key,
// then delete every lock.
func (b *Backend) ReleaseSet(ctx context.Context, req backend.ReleaseSetRequest) (bool, error) {
	rkeys, channels, err := b.setKeys(req.Keys)
	if err != nil {
		return false, err
	}
	if req.OwnerToken == "" {
		return false, nil
	}
	s, n, l := splitStamp(req.Stamp)
	args := []any{req.OwnerToken, s, n, l, millis(b.opts.MetaRetention)}
	for _, c := range channels {
		args = append(args, c)
	}
	res, err := releaseSetScript.Run(ctx, b.client, rkeys, args...).Int64()
	if err != nil {
		return false, b.fail("release set", err)
	}
	return res == 1, nil
}

// ExtendSet runs the set extend script: compare the token on every key,
// then renew every lock.
func (b *Backend) ExtendSet(ctx context.Context, req backend.ExtendSetRequest) (backend.ExtendSetResult, error) {
	rkeys, _, err := b.setKeys(req.Keys)
	if err != nil {
		return backend.ExtendSetResult{}, err
	}
	if err := b.checkTTL(req.TTL); err != nil {
		return backend.ExtendSetResult{}, err
	}
	if req.OwnerToken == "" {
		return backend.ExtendSetResult{}, nil
	}
	s, n, l := splitStamp(req.Stamp)
	res, err := extendSetScript.Run(ctx, b.client, rkeys,
		req.OwnerToken, millis(req.TTL), s, n, l, millis(b.opts.MetaRetention)).Slice()
	if err != nil {
		return backend.ExtendSetResult{}, b.fail("extend set", err)
	}
	if asInt(res[0]) != 1 {
		return backend.ExtendSetResult{}, nil
	}
	if len(res) != 3+5*len(req.Keys) {
		return backend.ExtendSetResult{}, b.fail("extend set", fmt.Errorf("unexpected script reply %v", res))
	}
	out := backend.ExtendSetResult{Extended: true, Records: make([]backend.Record, len(req.Keys))}
	ttl := strconv.FormatInt(millis(req.TTL), 10)
	for i, k := range req.Keys {
		f := res[3+5*i : 3+5*i+5]
		rec, err := parseRecord(k, []any{f[0], f[1], f[2], f[3], f[4], ttl, res[1], res[2]})
		if err != nil {
			return backend.ExtendSetResult{}, b.fail("extend set", err)
		}
		out.Records[i] = rec
	}
	return out, nil
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
