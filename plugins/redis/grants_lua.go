package redis

import goredis "github.com/redis/go-redis/v9"

// Keys of another kind than a mutex (semaphores, rwlocks, elections) hold
// grants, one per lease, in one more hash beside the key's lock, meta and
// delay keys, in the same Cluster slot:
//
//	<prefix>{K}:grants  owner token -> msgpack {f, permits, deadline µs, ttl ms,
//	                    ss, sn, sl, holder, rid, rfp, replay, claimed, value};
//	                    PX = the latest deadline
//	<prefix>{K}:g:<f>:<permits>  one empty string per grant, PX = the
//	                    grant's TTL: its expiry is the grant's expired-key
//	                    notification, which names the grant by its key
//	<prefix>{K}:meta    as for a mutex, plus k = kind and n = limit
//
// A grant is live while its deadline (Redis TIME when granted or renewed
// plus the TTL) is after Redis's TIME: every script drops the expired ones
// it reads, so the count of permits in use is always of live grants, by
// Redis's clock. The :g: keys only announce expiries (Watch); nothing
// decides by them. msgpack (cmsgpack, built into Redis's Lua) keeps a
// grant's fields binary-safe in one hash value. The value (an election's,
// empty for the other kinds) is the last field, so a grant written before
// it existed reads as an empty value.
//
// The kind and limit live in the meta hash as long as the fencing counter
// and the last stamp do; a meta hash with a fencing token and no kind is a
// mutex key's. The meta hash outlives every grant (its PX is raised to the
// latest grant's TTL + meta_retention), so a key's kind cannot be forgotten
// while it has holders.
//
// A call on one key passes KEYS = lock, meta, delay, grants (a set passes
// three keys per key and never reaches a grant): Release and Extend of one
// key take the grant path when the owner token names a grant and the key
// holds no mutex lock.
const luaGrants = `
local function gbase() return string.sub(KEYS[1], 1, -6) end
local function gsentinel(g) return gbase() .. ':g:' .. fmt(g[1]) .. ':' .. fmt(g[2]) end
local function grantsk() return KEYS[4] end
-- live reads the grants hash, deletes the expired grants, and returns the
-- live ones ({token, grant} pairs) and the permits they hold.
local function live(nowus)
  local all = redis.call('HGETALL', grantsk())
  local out, used, dead = {}, 0, {}
  for i = 1, #all, 2 do
    local g = cmsgpack.unpack(all[i + 1])
    if g[3] <= nowus then dead[#dead + 1] = all[i] else
      out[#out + 1] = {all[i], g}
      used = used + g[2]
    end
  end
  if #dead > 0 then redis.call('HDEL', grantsk(), unpack(dead)) end
  return out, used
end
-- state is a reply: {code, time s, time us, replayed, replay, kind, limit,
-- permits in use, index of the grant the call is about (0: none), then 8
-- fields per grant: fence, holder, ss, sn, sl, pttl ms, permits, value}.
local function state(code, ts, tus, nowus, replayed, replay, kind, limit, gs, used, idx)
  local out = {code, ts, tus, replayed, replay, kind, limit, used, idx}
  for _, e in ipairs(gs) do
    local g = e[2]
    out[#out + 1] = fmt(g[1])
    out[#out + 1] = g[8]
    out[#out + 1] = fmt(g[5])
    out[#out + 1] = fmt(g[6])
    out[#out + 1] = fmt(g[7])
    out[#out + 1] = math.floor((g[3] - nowus) / 1000)
    out[#out + 1] = g[2]
    out[#out + 1] = g[13] or ''
  end
  return out
end
-- pexpireAtLeast makes k live for at least ms more: a key without a TTL
-- gets one only when fresh (the meta hash of a new key; an old one without
-- a TTL is kept forever, meta_retention=0).
local function pexpireAtLeast(k, ms, fresh)
  local p = redis.call('PTTL', k)
  if fresh or (p >= 0 and p < ms) then redis.call('PEXPIRE', k, ms) end
end
-- keepGrants makes the grants hash live as long as its latest grant.
local function keepGrants(ms)
  if redis.call('PTTL', grantsk()) < ms then redis.call('PEXPIRE', grantsk(), ms) end
end
local function keepMeta(meta, ms, fresh, retain)
  if retain > 0 then pexpireAtLeast(meta, ms, fresh) else redis.call('PERSIST', meta) end
end
-- announce publishes a grant's event: type, fence, ss, sn, sl, ttl ms, time
-- s, time us, permits, kind, limit, the holder's length in bytes, then the
-- holder followed by the value (both may hold newlines).
local function announce(channel, typ, g, ttl, ts, tus, kind, limit)
  redis.call('PUBLISH', channel, table.concat({typ, fmt(g[1]), fmt(g[5]), fmt(g[6]), fmt(g[7]), fmt(ttl), ts, tus,
    fmt(g[2]), kind, fmt(limit), fmt(#g[8]), g[8] .. (g[13] or '')}, '\n'))
end
`

// grantScript: KEYS = lock, meta, delay, grants; ARGV = token, ttl ms,
// holder, stamp seconds, nanoseconds and logical, meta retention ms,
// request id, fingerprint, replay, replay only (1/0), kind, limit, permits,
// event channel, value. Returns a state (see luaGrants) with code 1 (acquired: a
// new grant, a replay of the request that took one, or a retry by the owner
// token that holds one; idx names it) or 0 (the permits do not fit; idx 0),
// or {5, kind, limit} when the key is kept with another kind or limit (a
// mutex key: "mutex", 1), {4} for replay only and not a replay, {-1} for
// a repeat of a request id with another fingerprint.
//
// A grant takes the fencing token max(last + 1, TIME in µs) and the stamp
// NextStamp(last, proposal), both from the meta hash, as a mutex does.
var grantScript = goredis.NewScript(luaPrelude + luaGrants + `
local token, ttl, holder = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local rid, rfp, replay = ARGV[8], ARGV[9], ARGV[10]
local kind, limit, permits = ARGV[12], tonumber(ARGV[13]), tonumber(ARGV[14])
local ts, tus, nowus = now()
local lock, meta = KEYS[1], KEYS[2]
local m = redis.call('HMGET', meta, 'f', 'ss', 'sn', 'sl', 'k', 'n')
if redis.call('EXISTS', lock) == 1 or (m[1] and not m[5]) then return {5, 'mutex', 1} end
if m[5] and (m[5] ~= kind or tonumber(m[6]) ~= limit) then return {5, m[5], tonumber(m[6])} end
local gs, used = live(nowus)
for i, e in ipairs(gs) do
  local g = e[2]
  if rid ~= '' and g[9] == rid and g[10] ~= rfp then return {-1} end
  if rid ~= '' and g[9] == rid then
    g[12] = 1
    redis.call('HSET', grantsk(), e[1], cmsgpack.pack(g))
    return state(1, ts, tus, nowus, 1, g[11], kind, limit, gs, used, i)
  end
  if e[1] == token then return state(1, ts, tus, nowus, 0, '', kind, limit, gs, used, i) end
end
if ARGV[11] == '1' then return {4} end
if used + permits > limit then return state(0, ts, tus, nowus, 0, '', kind, limit, gs, used, 0) end
local ps, pn, pl = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local ns, nn, nl = succ(tonumber(m[2]) or 0, tonumber(m[3]) or 0, tonumber(m[4]) or 0)
if before(ps, pn, pl, ns, nn, nl) then ps, pn, pl = ns, nn, nl end
local f = math.max((tonumber(m[1]) or 0) + 1, nowus)
local g = {f, permits, nowus + ttl * 1000, ttl, ps, pn, pl, holder, rid, rfp, replay, 0, ARGV[16]}
redis.call('HSET', grantsk(), token, cmsgpack.pack(g))
keepGrants(ttl)
redis.call('SET', gsentinel(g), '', 'PX', ttl)
redis.call('HSET', meta, 'f', fmt(f), 'h', holder, 'ss', fmt(ps), 'sn', fmt(pn), 'sl', fmt(pl), 'k', kind, 'n', fmt(limit))
local retain = tonumber(ARGV[7])
keepMeta(meta, ttl + retain, not m[1], retain)
announce(ARGV[15], 'granted', g, ttl, ts, tus, kind, limit)
gs[#gs + 1] = {token, g}
return state(1, ts, tus, nowus, 0, '', kind, limit, gs, used + permits, #gs)
`)

// luaReleaseGrant is the grant path of the release script (one key whose
// owner token names a grant and which holds no mutex lock): it deletes the
// grant and its :g: key, raises the meta hash's stamp to the release's, and
// keeps the release's request identity in the meta hash as a mutex's
// release does (the key's last release). ARGV as the release script's.
const luaReleaseGrant = `
local function releaseGrant()
  local token, rid, rfp = ARGV[1], ARGV[6], ARGV[7]
  local ts, tus, nowus = now()
  local v = redis.call('HGET', grantsk(), token)
  local g = v and cmsgpack.unpack(v)
  if not g or g[3] <= nowus then
    if rid == '' then return 0 end
    local m = redis.call('HMGET', KEYS[2], 'xid', 'xfp', 'xu')
    if m[1] ~= rid then return 0 end
    if m[2] ~= rfp then return -1 end
    if (tonumber(m[3]) or 0) <= nowus then return 0 end
    return 1
  end
  if ARGV[8] == '1' and g[12] == 1 then return 0 end
  local meta, retain = KEYS[2], tonumber(ARGV[5])
  local left = math.floor((g[3] - nowus) / 1000)
  redis.call('HDEL', grantsk(), token)
  redis.call('DEL', gsentinel(g))
  local xset = nil
  if rid ~= '' then xset = {'xid', rid, 'xfp', rfp, 'xu', fmt(g[3])} end
  local kept = remember(meta, fmt(g[1]), g[8], ARGV[2], ARGV[3], ARGV[4], xset)
  if rid ~= '' then
    keepMeta(meta, math.max(retain, left), false, retain)
  elseif kept then
    redis.call('HDEL', meta, 'xid', 'xfp', 'xu')
  end
  local k = redis.call('HMGET', meta, 'k', 'n')
  announce(ARGV[9], 'ungranted', g, left, ts, tus, k[1] or '', tonumber(k[2]) or 0)
  return 1
end
`

// grantPath wraps luaGrants and the definitions defs of a script's grant
// path in one function, grantPath, that defines them and returns call's
// result: the release and extend scripts of a mutex then create one
// closure per call instead of every grant helper's (a Lua local function
// is a closure made each time the script runs; callgrind counted the
// unused helpers at 3% of a mutex Release inside Redis).
func grantPath(defs, call string) string {
	return "local function grantPath()\n" + luaGrants + defs + "return " + call + "\nend\n"
}

// luaExtendGrant is the grant path of the extend script: it renews the
// grant (and its :g: key) for the TTL from Redis's TIME, keeping its
// stamp, and answers a state whose idx is the grant. ARGV as the extend
// script's.
const luaExtendGrant = `
local function extendGrant()
  local token, ttl, rid, rfp = ARGV[1], tonumber(ARGV[2]), ARGV[7], ARGV[8]
  local ts, tus, nowus = now()
  local v = redis.call('HGET', grantsk(), token)
  local g = v and cmsgpack.unpack(v)
  if not g or g[3] <= nowus then return {0} end
  if rid ~= '' and g[9] == rid and g[10] ~= rfp then return {-1} end
  g[3], g[4] = nowus + ttl * 1000, ttl
  if rid ~= '' then g[9], g[10] = rid, rfp end
  redis.call('HSET', grantsk(), token, cmsgpack.pack(g))
  keepGrants(ttl)
  redis.call('SET', gsentinel(g), '', 'PX', ttl)
  local meta, retain = KEYS[2], tonumber(ARGV[6])
  remember(meta, fmt(g[1]), g[8], ARGV[3], ARGV[4], ARGV[5])
  keepMeta(meta, ttl + retain, false, retain)
  local k = redis.call('HMGET', meta, 'k', 'n')
  local gs, used = live(nowus)
  local idx = 0
  for i, e in ipairs(gs) do if e[1] == token then idx = i end end
  return state(6, ts, tus, nowus, 0, '', k[1] or '', tonumber(k[2]) or 0, gs, used, idx)
end
`

// proclaimScript: KEYS = lock, meta, delay, grants; ARGV = token, value,
// stamp seconds, nanoseconds and logical, event channel, the election
// kind's name. If the token holds
// a live grant of an election key, it replaces the grant's value, raises
// the meta hash's stamp to the call's (as a release does: the key's next
// leader is stamped after it) and announces the grant as proclaimed; the
// grant's fencing token, deadline and stamp stay as they were. Returns a
// state (see luaGrants) with code 7 whose idx is the grant, or {0} when the
// token holds no live grant of an election.
var proclaimScript = goredis.NewScript(luaPrelude + luaGrants + `
local token = ARGV[1]
local ts, tus, nowus = now()
local v = redis.call('HGET', grantsk(), token)
local g = v and cmsgpack.unpack(v)
if not g or g[3] <= nowus then return {0} end
local meta = KEYS[2]
local k = redis.call('HMGET', meta, 'k', 'n')
if k[1] ~= ARGV[7] then return {0} end
g[13] = ARGV[2]
redis.call('HSET', grantsk(), token, cmsgpack.pack(g))
remember(meta, fmt(g[1]), g[8], ARGV[3], ARGV[4], ARGV[5])
announce(ARGV[6], 'proclaimed', g, math.floor((g[3] - nowus) / 1000), ts, tus, k[1], tonumber(k[2]) or 1)
local gs, used = live(nowus)
local idx = 0
for i, e in ipairs(gs) do if e[1] == token then idx = i end end
return state(7, ts, tus, nowus, 0, '', k[1], tonumber(k[2]) or 1, gs, used, idx)
`)
