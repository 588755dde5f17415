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
// is beyond that. Numbers are written back with %.0f, never with Lua's
// tostring, which would switch to exponent notation.
//
// Fencing tokens: f = max(last f + 1, TIME in microseconds). The meta hash
// alone would go back to 0 when Redis restarts empty (no persistence) or when
// the meta hash expires; the clock floor keeps the token above every token
// issued before, as long as the Redis server's clock has not stepped back
// by more than the restart took (see the package doc).
const luaPrelude = `
if redis.replicate_commands then pcall(redis.replicate_commands) end
local function fmt(n) return string.format('%.0f', n) end
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
local function remember(meta, f, h, s, n, l)
  local m = redis.call('HMGET', meta, 'f', 'ss', 'sn', 'sl')
  if not m[1] or tonumber(m[1]) < tonumber(f) then
    redis.call('HSET', meta, 'f', f, 'h', h)
  end
  if not m[2] or before(tonumber(m[2]), tonumber(m[3]), tonumber(m[4]), s, n, l) then
    redis.call('HSET', meta, 'ss', fmt(s), 'sn', fmt(n), 'sl', fmt(l))
  end
end
local function keep(meta, ms)
  if ms > 0 then redis.call('PEXPIRE', meta, ms) else redis.call('PERSIST', meta) end
end
`

// acquireScript: KEYS = lock, meta; ARGV = token, ttl ms, holder, stamp
// seconds, stamp nanoseconds, stamp logical, meta retention ms, channel.
// Returns {acquired, fence, holder, ss, sn, sl, pttl ms, time s, time us}:
// the new lock, or the current holder. A retry of an acquisition that
// already succeeded (same owner token) answers acquired again.
var acquireScript = goredis.NewScript(luaPrelude + `
local lock, meta = KEYS[1], KEYS[2]
local token, ttl, holder = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local ts, tus, nowus = now()
local cur = redis.call('HMGET', lock, 't', 'f', 'h', 'ss', 'sn', 'sl')
if cur[1] then
  local won = 0
  if cur[1] == token then won = 1 end
  return {won, cur[2], cur[3], cur[4], cur[5], cur[6], redis.call('PTTL', lock), ts, tus}
end
local m = redis.call('HMGET', meta, 'f', 'ss', 'sn', 'sl')
local fence = math.max((tonumber(m[1]) or 0) + 1, nowus)
local ps, pn, pl = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local ns, nn, nl = succ(tonumber(m[2]) or 0, tonumber(m[3]) or 0, tonumber(m[4]) or 0)
if before(ps, pn, pl, ns, nn, nl) then ps, pn, pl = ns, nn, nl end
local f, s1, s2, s3 = fmt(fence), fmt(ps), fmt(pn), fmt(pl)
redis.call('HSET', lock, 't', token, 'f', f, 'h', holder, 'ss', s1, 'sn', s2, 'sl', s3)
redis.call('PEXPIRE', lock, ttl)
redis.call('HSET', meta, 'f', f, 'h', holder, 'ss', s1, 'sn', s2, 'sl', s3)
local retain = tonumber(ARGV[7])
if retain > 0 then keep(meta, ttl + retain) else keep(meta, 0) end
redis.call('PUBLISH', ARGV[8], table.concat({'acquired', f, s1, s2, s3, fmt(ttl), ts, tus, holder}, '\n'))
return {1, f, holder, s1, s2, s3, ttl, ts, tus}
`)

// releaseScript: KEYS = lock, meta; ARGV = token, stamp seconds, stamp
// nanoseconds, stamp logical, meta retention ms, channel. Returns 1 when the
// token held the lock and the lock is deleted, else 0 (nothing changed).
var releaseScript = goredis.NewScript(luaPrelude + `
local lock, meta = KEYS[1], KEYS[2]
local cur = redis.call('HMGET', lock, 't', 'f', 'h', 'ss', 'sn', 'sl')
if cur[1] ~= ARGV[1] then return 0 end
local ts, tus = now()
local pttl = redis.call('PTTL', lock)
redis.call('DEL', lock)
remember(meta, cur[2], cur[3], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]))
keep(meta, tonumber(ARGV[5]))
redis.call('PUBLISH', ARGV[6], table.concat({'released', cur[2], cur[4], cur[5], cur[6], fmt(pttl), ts, tus, cur[3]}, '\n'))
return 1
`)

// extendScript: KEYS = lock, meta; ARGV = token, ttl ms, stamp seconds,
// stamp nanoseconds, stamp logical, meta retention ms. Returns {0} when the
// token does not hold the lock, else {1, fence, holder, ss, sn, sl, pttl ms,
// time s, time us} of the renewed lock.
var extendScript = goredis.NewScript(luaPrelude + `
local lock, meta = KEYS[1], KEYS[2]
local cur = redis.call('HMGET', lock, 't', 'f', 'h', 'ss', 'sn', 'sl')
if cur[1] ~= ARGV[1] then return {0} end
local ts, tus = now()
local ttl = tonumber(ARGV[2])
redis.call('PEXPIRE', lock, ttl)
remember(meta, cur[2], cur[3], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]))
local retain = tonumber(ARGV[6])
if retain > 0 then keep(meta, ttl + retain) else keep(meta, 0) end
return {1, cur[2], cur[3], cur[4], cur[5], cur[6], ttl, ts, tus}
`)

// getScript: KEYS = lock. Returns {0} when the key is free, else {1, fence,
// holder, ss, sn, sl, pttl ms, time s, time us}; one script so the TTL and
// the server time belong to the same instant.
var getScript = goredis.NewScript(luaPrelude + `
local cur = redis.call('HMGET', KEYS[1], 'f', 'h', 'ss', 'sn', 'sl')
if not cur[1] then return {0} end
local ts, tus = now()
return {1, cur[1], cur[2], cur[3], cur[4], cur[5], redis.call('PTTL', KEYS[1]), ts, tus}
`)
