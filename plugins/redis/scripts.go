package redis

import goredis "github.com/redis/go-redis/v9"

// Every mutating call is one Lua script, so Redis runs it as one atomic step
// (and go-redis's Script sends EVALSHA, loading the script on NOSCRIPT).
//
// Per key K the backend keeps two hashes, in one Cluster slot thanks to the
// hash tag {K}:
//
//	<prefix>{K}:lock  t=owner token f=fencing token h=holder ss,sn,sl=stamp; PX = the lease's TTL
//	<prefix>{K}:meta  f=last fencing token h=last holder ss,sn,sl=last stamp; PX = TTL + meta_retention
//
// Stamps travel as three numbers (seconds, nanoseconds, logical): a Lua
// number is a double, exact only up to 2^53, and a wall time in nanoseconds
// is beyond that. Numbers are written back by fmt, never with Lua's
// tostring, which would switch to exponent notation. Every number written
// is a whole number below 2^53. fmt prints it with %d, in two parts of at
// most nine digits when it is beyond 2^31 (Lua 5.1 casts a %d argument to
// a C long, 32 bits on a 32-bit Redis): the same digits as %.0f at a
// fraction of its cost, since %.0f goes through glibc's multi-precision
// float printing, 5% of an Acquire's instructions inside Redis (callgrind).
const luaPrelude = `
if redis.replicate_commands then pcall(redis.replicate_commands) end
local function fmt(n)
  if n < 2147483648 and n > -2147483648 then return string.format('%d', n) end
  if n < 0 then return string.format('%.0f', n) end
  local hi = math.floor(n / 1000000000)
  local lo = n - hi * 1000000000
  if lo < 0 then hi, lo = hi - 1, lo + 1000000000 elseif lo >= 1000000000 then hi, lo = hi + 1, lo - 1000000000 end
  return string.format('%d%09d', hi, lo)
end
local function now()
  local t = redis.call('TIME')
  return t[1], t[2], tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function before(a1, a2, a3, b1, b2, b3)
  if a1 ~= b1 then return a1 < b1 end
  if a2 ~= b2 then return a2 < b2 end
  return a3 < b3
end
local function succ(s, n, l)
  if l < 4294967295 then return s, n, l + 1 end
  if n < 999999999 then return s, n + 1, 0 end
  return s + 1, 0, 0
end
-- remember raises the meta hash's last fencing token and stamp to f and
-- (ss, sn, sl: the call's stamp as ARGV brought it, in decimal), in one
-- HSET that also writes the field-value pairs of set (a table, or nil),
-- and returns whether the meta hash keeps a release's request identity
-- (xid).
local function remember(meta, f, h, ss, sn, sl, set)
  local m = redis.call('HMGET', meta, 'f', 'ss', 'sn', 'sl', 'xid')
  set = set or {}
  if not m[1] or tonumber(m[1]) < tonumber(f) then
    local k = #set
    set[k + 1], set[k + 2], set[k + 3], set[k + 4] = 'f', f, 'h', h
  end
  if not m[2] or before(tonumber(m[2]), tonumber(m[3]), tonumber(m[4]), tonumber(ss), tonumber(sn), tonumber(sl)) then
    local k = #set
    set[k + 1], set[k + 2], set[k + 3], set[k + 4], set[k + 5], set[k + 6] = 'ss', ss, 'sn', sn, 'sl', sl
  end
  if #set > 0 then redis.call('HSET', meta, unpack(set)) end
  return m[5] and true or false
end
-- keep passes ms formatted: Redis turns a Lua number argument into a
-- string with %.17g, glibc's slow path.
local function keep(meta, ms)
  if ms > 0 then redis.call('PEXPIRE', meta, fmt(ms)) else redis.call('PERSIST', meta) end
end
`

// Every call names its keys as KEYS = lock, meta and delay key of each key,
// in order (lock_1, meta_1, delay_1, lock_2, ...); a single key is a set of
// one. Each script decides for every key before it writes any: Redis runs a
// script as one atomic step, so a set is taken, released or renewed whole
// or not at all.
//
// The lock hash also keeps the request identity of the last Acquire or
// Extend applied to it (rid, rfp), its Acquire's replay (rp), whether a
// replay of that Acquire was answered (cl) and its lock-delay in ms (ld).
// The meta hash keeps the identity of the key's last Release (xid, xfp)
// until that lease would have expired (xu, server time in µs). The delay
// key exists, with PX = the lease's TTL + its lock-delay, from the Acquire
// until the delay after the lease's expiry: Release deletes it, Extend
// renews it; once the lock has expired, its PTTL is the lock-delay left.
//
// A lock is answered as {fence, holder, ss, sn, sl, pttl ms, lock-delay ms}
// (rec below); booleans and missing fields never reach a reply (a nil ends
// a Lua array).
const luaKeys = `
local n = math.floor(#KEYS / 3)
local function lockk(i) return KEYS[3*i-2] end
local function metak(i) return KEYS[3*i-1] end
local function delayk(i) return KEYS[3*i] end
local function rec(out, c, pttl)
  for j = 2, 6 do out[#out + 1] = c[j] or '' end
  out[#out + 1] = pttl
  out[#out + 1] = tonumber(c[7]) or 0
end
`

// acquireScript: ARGV = token, ttl ms, holder, stamp seconds, nanoseconds
// and logical, meta retention ms, request id, fingerprint, replay,
// lock-delay ms, replay only (1/0), then one event channel per key.
// Returns one of:
//
//	{1, time s, time us, replayed 1/0, replay, rec_1 ... rec_n}  acquired (a
//	    new lock, a replay of the request that took every key, or a retry
//	    by the owner token that holds every key)
//	{0, time s, time us, i, rec}  key i (from 1) is held by someone else
//	{3, i, delay ms}              key i is in its lock-delay
//	{5, i, kind, limit}           key i is kept with another kind (luaGrants)
//	{4}                           replay only, and not a replay
//	{-1}                          a repeat of the request id with another fingerprint
//
// A new lock stores one stamp on every key, the latest of the proposal and
// the successor of every key's last stamp, and on each key its own fencing
// token: max(last + 1, TIME in µs).
var acquireScript = goredis.NewScript(luaPrelude + luaKeys + acquireBody)

const acquireBody = `
local token, ttl, holder = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local rid, rfp, replay, ld = ARGV[8], ARGV[9], ARGV[10], tonumber(ARGV[11])
local ts, tus, nowus = now()
local cur, held = {}, 0
for i = 1, n do
  cur[i] = redis.call('HMGET', lockk(i), 't', 'f', 'h', 'ss', 'sn', 'sl', 'ld', 'rid', 'rfp', 'rp')
  if cur[i][1] then held = held + 1 end
end
if held == n then
  local rep, mine = rid ~= '', true
  for i = 1, n do
    local c = cur[i]
    if rid ~= '' and c[8] == rid and c[9] ~= rfp then return {-1} end
    if c[8] ~= rid or c[1] ~= cur[1][1] then rep = false end
    if c[1] ~= token then mine = false end
  end
  if rep or mine then
    local out = {1, ts, tus, 0, ''}
    if rep then out[4], out[5] = 1, cur[1][10] or '' end
    for i = 1, n do
      if rep then redis.call('HSET', lockk(i), 'cl', '1') end
      rec(out, cur[i], redis.call('PTTL', lockk(i)))
    end
    return out
  end
end
for i = 1, n do
  if cur[i][1] then
    local out = {0, ts, tus, i}
    rec(out, cur[i], redis.call('PTTL', lockk(i)))
    return out
  end
end
for i = 1, n do
  local d = redis.call('PTTL', delayk(i))
  if d > 0 then return {3, i, d} end
end
local metas = {}
for i = 1, n do
  local m = redis.call('HMGET', metak(i), 'k', 'n', 'f', 'ss', 'sn', 'sl')
  if m[1] then return {5, i, m[1], tonumber(m[2]) or 0} end
  metas[i] = m
end
if ARGV[12] == '1' then return {4} end
-- The numbers of ARGV are written as they came (the plugin sends them in
-- decimal, as fmt writes them): only a stamp raised past the proposal and
-- sums are formatted.
local ps, pn, pl = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local s1, s2, s3 = ARGV[4], ARGV[5], ARGV[6]
for i = 1, n do
  local m = metas[i]
  local ns, nn, nl = succ(tonumber(m[4]) or 0, tonumber(m[5]) or 0, tonumber(m[6]) or 0)
  if before(ps, pn, pl, ns, nn, nl) then
    ps, pn, pl = ns, nn, nl
    s1, s2, s3 = fmt(ps), fmt(pn), fmt(pl)
  end
end
local retain = tonumber(ARGV[7])
local out = {1, ts, tus, 0, ''}
for i = 1, n do
  local lock, meta = lockk(i), metak(i)
  local f = fmt(math.max((tonumber(metas[i][3]) or 0) + 1, nowus))
  if rid ~= '' then
    redis.call('HSET', lock, 't', token, 'f', f, 'h', holder, 'ss', s1, 'sn', s2, 'sl', s3, 'ld', ARGV[11],
      'rid', rid, 'rfp', rfp, 'rp', replay)
  else
    redis.call('HSET', lock, 't', token, 'f', f, 'h', holder, 'ss', s1, 'sn', s2, 'sl', s3, 'ld', ARGV[11])
  end
  redis.call('PEXPIRE', lock, ARGV[2])
  if ld > 0 then redis.call('SET', delayk(i), '1', 'PX', fmt(ttl + ld)) end
  redis.call('HSET', meta, 'f', f, 'h', holder, 'ss', s1, 'sn', s2, 'sl', s3)
  if retain > 0 then keep(meta, ttl + retain) else keep(meta, 0) end
  redis.call('PUBLISH', ARGV[12 + i], table.concat({'acquired', f, s1, s2, s3, ARGV[2], ts, tus, holder}, '\n'))
  rec(out, {token, f, holder, s1, s2, s3, ARGV[11]}, ttl)
end
return out
`

// releaseScript: ARGV = token, stamp seconds, nanoseconds and logical, meta
// retention ms, request id, fingerprint, abandon (1/0), then one event
// channel per key. Returns 1 when the token held every key and all are
// deleted, or when the request id is the one that released every key (a
// repeat); 0 when nothing changed (also for an abandon of a lock whose
// Acquire's replay was answered); -1 for a repeat with another fingerprint.
//
// Called on one key with its grants key as a fourth key, it releases the
// grant the token names when the key holds no mutex lock (luaReleaseGrant);
// so does an item of a batch (the body carries the grant path).
var releaseScript = goredis.NewScript(luaPrelude + luaKeys + releaseBody)

var releaseBody = grantPath(luaReleaseGrant, "releaseGrant()") + `
local token, rid, rfp = ARGV[1], ARGV[6], ARGV[7]
local cur = {}
cur[1] = redis.call('HMGET', lockk(1), 't', 'f', 'h', 'ss', 'sn', 'sl', 'cl')
if #KEYS == 4 and not cur[1][1] and redis.call('HEXISTS', KEYS[4], token) == 1 then
  return grantPath()
end
local ts, tus, nowus = now()
for i = 1, n do
  if i > 1 then cur[i] = redis.call('HMGET', lockk(i), 't', 'f', 'h', 'ss', 'sn', 'sl', 'cl') end
  if cur[i][1] ~= token then
    if rid == '' then return 0 end
    for j = 1, n do
      local m = redis.call('HMGET', metak(j), 'xid', 'xfp', 'xu')
      if m[1] ~= rid then return 0 end
      if m[2] ~= rfp then return -1 end
      if (tonumber(m[3]) or 0) <= nowus then return 0 end
    end
    return 1
  end
end
if ARGV[8] == '1' then
  for i = 1, n do
    if cur[i][7] == '1' then return 0 end
  end
end
local retain = tonumber(ARGV[5])
for i = 1, n do
  local lock, meta, c = lockk(i), metak(i), cur[i]
  local pttl = redis.call('PTTL', lock)
  redis.call('DEL', lock, delayk(i))
  -- The release's request identity goes into remember's HSET: one write
  -- of the meta hash, not two.
  local xset = nil
  if rid ~= '' then xset = {'xid', rid, 'xfp', rfp, 'xu', fmt(nowus + pttl * 1000)} end
  local kept = remember(meta, c[2], c[3], ARGV[2], ARGV[3], ARGV[4], xset)
  if rid ~= '' then
    if retain > 0 then keep(meta, math.max(retain, pttl)) else keep(meta, 0) end
  else
    if kept then redis.call('HDEL', meta, 'xid', 'xfp', 'xu') end
    keep(meta, retain)
  end
  redis.call('PUBLISH', ARGV[8 + i], table.concat({'released', c[2], c[4], c[5], c[6], fmt(pttl), ts, tus, c[3]}, '\n'))
end
return 1
`

// extendScript: ARGV = token, ttl ms, stamp seconds, nanoseconds and
// logical, meta retention ms, request id, fingerprint. Returns {0} when the
// token does not hold every key, {-1} for a repeat of a kept request id with
// another fingerprint, else {1, time s, time us, rec_1 ... rec_n} of the
// renewed locks (each keeps its acquisition stamp and lock-delay; a request
// id replaces the one kept, none keeps it).
//
// Called on one key with its grants key as a fourth key, it renews the
// grant the token names when the key holds no mutex lock, answering a state
// with code 6 (luaExtendGrant); so does an item of a batch.
var extendScript = goredis.NewScript(luaPrelude + luaKeys + extendBody)

var extendBody = grantPath(luaExtendGrant, "extendGrant()") + `
local token, ttl, rid, rfp = ARGV[1], tonumber(ARGV[2]), ARGV[7], ARGV[8]
local cur = {}
cur[1] = redis.call('HMGET', lockk(1), 't', 'f', 'h', 'ss', 'sn', 'sl', 'ld', 'rid', 'rfp')
if #KEYS == 4 and not cur[1][1] and redis.call('HEXISTS', KEYS[4], token) == 1 then
  return grantPath()
end
for i = 1, n do
  if i > 1 then cur[i] = redis.call('HMGET', lockk(i), 't', 'f', 'h', 'ss', 'sn', 'sl', 'ld', 'rid', 'rfp') end
  if cur[i][1] ~= token then return {0} end
  if rid ~= '' and cur[i][8] == rid and cur[i][9] ~= rfp then return {-1} end
end
local ts, tus = now()
local retain = tonumber(ARGV[6])
local out = {1, ts, tus}
for i = 1, n do
  local lock, meta, c = lockk(i), metak(i), cur[i]
  redis.call('PEXPIRE', lock, ttl)
  local ld = tonumber(c[7]) or 0
  if ld > 0 then redis.call('SET', delayk(i), '1', 'PX', ttl + ld) end
  if rid ~= '' then redis.call('HSET', lock, 'rid', rid, 'rfp', rfp) end
  remember(meta, c[2], c[3], ARGV[3], ARGV[4], ARGV[5])
  if retain > 0 then keep(meta, ttl + retain) else keep(meta, 0) end
  rec(out, c, ttl)
end
return out
`

// getScript: KEYS = lock, meta, delay, grants. Returns {1, time s, time
// us, rec} when the key holds a mutex lock, a state with code 2 (see
// luaGrants; expired grants left out, not deleted) when it holds grants,
// {3, delay ms} when it is free but in its lock-delay, else {0}; one script
// so the TTLs and the server time belong to the same instant.
var getScript = goredis.NewScript(luaPrelude + luaGrants + `
local c = redis.call('HMGET', KEYS[1], 't', 'f', 'h', 'ss', 'sn', 'sl', 'ld')
local ts, tus, nowus = now()
if not c[1] then
  local all = redis.call('HGETALL', KEYS[4])
  local gs, used = {}, 0
  for i = 1, #all, 2 do
    local g = cmsgpack.unpack(all[i + 1])
    if g[3] > nowus then
      gs[#gs + 1] = {all[i], g}
      used = used + g[2]
    end
  end
  if #gs > 0 then
    local k = redis.call('HMGET', KEYS[2], 'k', 'n')
    return state(2, ts, tus, nowus, 0, '', k[1] or '', tonumber(k[2]) or 0, gs, used, 0)
  end
  local d = redis.call('PTTL', KEYS[3])
  if d > 0 then return {3, d} end
  return {0}
end
local out = {1, ts, tus}
for j = 2, 6 do out[#out + 1] = c[j] or '' end
out[#out + 1] = redis.call('PTTL', KEYS[1])
out[#out + 1] = tonumber(c[7]) or 0
return out
`)

// Batch scripts run the items of a batch in one EVAL: each item is its
// script's body run as a function of its own KEYS and ARGV (parameters
// that shadow the globals), so it decides exactly as its single call
// would; the reply is the list of the items' replies. An item whose body
// raised an error (a Redis command refused: say, a key of another type
// written by someone else) is answered {-2, message}, and the others'
// replies stand, as they would for single calls. ARGV = number of
// items m, each item's key count, each item's argument count, then every
// item's arguments; KEYS = every item's keys, in order. The keys of one
// EVAL must share a Cluster slot, so Cluster batches are pipelined instead.
var (
	acquireBatchScript = goredis.NewScript(luaPrelude + batchOf(acquireBody))
	releaseBatchScript = goredis.NewScript(luaPrelude + batchOf(releaseBody))
	extendBatchScript  = goredis.NewScript(luaPrelude + batchOf(extendBody))
)

func batchOf(body string) string {
	return `
local function item(KEYS, ARGV)
` + luaKeys + body + `
end
local m = tonumber(ARGV[1])
local out, k, a, base = {}, 0, 0, 2 * m + 1
for i = 1, m do
  local nk, na = tonumber(ARGV[1 + i]), tonumber(ARGV[1 + m + i])
  local ks, as = {}, {}
  for j = 1, nk do ks[j] = KEYS[k + j] end
  for j = 1, na do as[j] = ARGV[base + a + j] end
  k, a = k + nk, a + na
  local ok, res = pcall(item, ks, as)
  if ok then out[i] = res else out[i] = {-2, tostring(res)} end
end
return out
`
}
