// Package redis is holdfast's Redis backend: locks in a single Redis server,
// behind Sentinel, or in a Redis Cluster, through go-redis's universal client.
//
// # How it keeps the promises
//
// Acquire, Release and Extend are each one Lua script, which Redis runs
// atomically: Acquire creates the lock only if the key is absent, with a
// millisecond TTL (PEXPIRE), so Redis is the authority on expiry and the
// granularity is 1 ms; Release and Extend compare the owner token in the
// same script that deletes or renews the lock.
//
// Fencing tokens are max(last token + 1, the Redis server's TIME in
// microseconds), computed inside the Acquire script. The last token lives in
// a per-key meta hash; when Redis restarts empty (no persistence) or the meta
// hash has expired, the clock floor still gives a larger token than any
// issued before. Assumption, stated plainly: the clock of the Redis server
// that answers does not step back by more than the time between the last
// acquisition of a key and the first one after the restart (or failover: the
// clocks of a master and its replicas must agree that well). Tokens are
// therefore not consecutive: they are microsecond-sized steps.
//
// The meta hash also keeps the key's last HLC stamp (NextStamp is computed
// inside the script). It expires meta_retention (default 1h) after the lock
// is released or expires, so unique keys do not pile up forever. That is
// safe: fencing is covered by the clock floor, and a stamp proposed an hour
// later is beyond the forgotten one unless server clocks disagree by an hour.
// meta_retention=0 keeps meta hashes forever.
//
// Keys: <key_prefix>{K}:lock and <key_prefix>{K}:meta, where the hash tag {K}
// puts both in one Cluster slot (the key's own '{', '}' and '%' are
// %-escaped so they cannot break the tag). A key with a hash tag of its own
// ({T}: the text between its first '{' and the next '}', as Redis Cluster
// reads keys) is stored under that tag instead, <key_prefix>{T}K:lock, so
// that keys sharing a tag share a slot.
//
// Sets of keys (backend.SetBackend, up to MaxKeys = 64): AcquireSet,
// ReleaseSet and ExtendSet are one Lua script each over the lock and meta
// hash of every key, atomic in Redis: the script checks every key before it
// writes any (all free for AcquireSet, every key held by the owner token for
// ReleaseSet and ExtendSet), then changes all of them. Each key gets its own
// fencing token (max(its last + 1, TIME)); all get one stamp, the latest of
// the proposal and the successor of every key's last stamp. Each key is
// announced on its own channel. In a Cluster a script's keys must share a
// slot, so a set is taken only when every key hashes to one slot (one hash
// tag for the set's keys); the backend computes the slots first and refuses
// any other set with backend.ErrFailedPrecondition naming the rule. A single
// key is a set of one: Acquire, Release and Extend run the same scripts.
//
// Request identities (Info.RequestIDs) are kept in the lock hash (the last
// Acquire's or Extend's id and fingerprint, the Acquire's replay, and
// whether a replay was answered) and, for a Release, in the meta hash until
// the released lease would have expired; the scripts compare them in the
// same atomic step that decides the call, on every key of a set, so a
// repeat through any server sharing the Redis is answered as the first.
//
// Lock-delay (Info.MaxLockDelay = 1m): an Acquire with a lock-delay d also
// writes <key_prefix>{K}:delay with PX = TTL + d (Extend renews it, Release
// deletes it). Redis expires the lock at its TTL and the delay key d later,
// by its own clock, so while the lock is gone and the delay key is not, the
// key is in its lock-delay: Acquire refuses it and Get reports the delay
// key's PTTL as DelayRemaining. It is atomic with every call (the same
// scripts), and needs nothing to run at the expiry.
//
// Semaphores and rwlocks (Info.Kinds; see grants_lua.go): a key of another
// kind than a mutex keeps its grants in one more hash, <key_prefix>{K}:grants,
// owner token to the grant (permits, fencing token, deadline by Redis's
// TIME, stamp, holder, request identity), and its kind and limit in the
// meta hash beside its fencing counter and last stamp. A grant is one Lua
// script: it refuses a key kept with another kind or limit (a mutex key
// included, while its meta hash lives), drops the grants whose deadline has
// passed, sums the permits of the others and grants only if the request's
// fit the limit; fencing tokens and stamps come from the meta hash as for a
// mutex, so they strictly increase over every grant of the key. Release
// and Extend of one key find the grant by its owner token in the same
// scripts as a mutex's. Each grant also has an empty key,
// <key_prefix>{K}:g:<fencing token>, with the grant's TTL: its expired-key
// notification is the grant's EventExpired (nothing decides by it). A set
// claiming a key of another kind is refused, naming the key's kind.
//
// Elections (KindElection): a grant key of limit 1 whose grant carries a
// value; Proclaim is one script that replaces the value of the token's live
// grant on an election key and publishes a proclaimed event (see
// proclaimScript).
//
// Watch: Acquire and Release PUBLISH an event on <key_prefix>events:K (a
// PUBLISH is cluster-wide); expiries are caught from Redis keyspace
// notifications (__keyevent@DB__:expired), which the backend turns on at
// start-up with CONFIG SET notify-keyspace-events Ex when they are off and
// CONFIG is allowed. Where it is not (managed Redis), the engine's own
// expiry timer wakes waiters; the backend logs that once. Redis deletes
// expired keys lazily and in a background cycle, so an expiry event can come
// up to about 100 ms after the TTL; an Acquire is never delayed by it.
//
// Follow (backend.FollowBackend, follow.go) is native: one pubsub
// connection per Follow SUBSCRIBEs to the channel of each followed key and
// PSUBSCRIBEs to <key_prefix>events:P* for each followed prefix, so Redis
// sends the plugin only the followed keys' events, where Watch "" takes a
// pattern on every key's channel and the plugin would drop all but the
// followed ones; expiries come from the keyspace notifications, for every
// key, as for Watch. A change's Applied is called once Redis has answered
// a PING sent on the feed after the change's (UN)SUBSCRIBE commands, which
// Redis runs in order, so an event published after Applied reaches the
// feed. Of the copies Redis sends of an event that matches the key's
// channel and prefixes' patterns, one is sent on. In a Cluster the feed is
// one node's connection (a PUBLISH reaches every node). A lost connection
// ends Follow with ErrUnavailable, as it ends Watch (go-redis would
// subscribe again, but events published in between would be lost).
package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/proto/hlc"
)

// Name is the backend's name in Info.
const Name = "redis"

// Version is this backend's version.
const Version = "0.1.0"

// Backend is the Redis backend. Open it with Open; Close it when done.
type Backend struct {
	opts      Options
	client    goredis.UniversalClient
	log       *slog.Logger
	durable   bool
	serverVer string
}

var _ backend.Backend = (*Backend)(nil)

// Open parses opts (see OptionKeys), connects and checks the connection
// within the dial timeout, so a wrong address or wrong credentials fail
// start-up with a clear error. It is the plugin's backendserver.OpenFunc.
func Open(ctx context.Context, opts map[string]string) (backend.Backend, error) {
	o, err := ParseOptions(opts)
	if err != nil {
		return nil, err
	}
	return New(ctx, o)
}

// New connects with parsed options.
func New(ctx context.Context, o Options) (*Backend, error) {
	tlsCfg, err := o.tlsConfig()
	if err != nil {
		return nil, fmt.Errorf("%w: redis: %w", backend.ErrInvalidArgument, err)
	}
	uo := &goredis.UniversalOptions{
		Addrs:            o.Addrs,
		MasterName:       o.MasterName,
		Username:         o.Username,
		Password:         o.Password,
		SentinelUsername: o.SentinelUsername,
		SentinelPassword: o.SentinelPassword,
		DB:               o.DB,
		TLSConfig:        tlsCfg,
		IsClusterMode:    o.Cluster,
		ClientName:       "holdfast",
		DialTimeout:      o.DialTimeout,
		ReadTimeout:      o.OpTimeout,
		WriteTimeout:     o.OpTimeout,
		PoolTimeout:      o.OpTimeout,
		PoolSize:         o.PoolSize,
		// One quick redial, then an error: the engine answers unavailable
		// at once instead of hanging callers while Redis is away.
		DialerRetries:      1,
		DialerRetryTimeout: 50 * time.Millisecond,
		// Mutating scripts are not blindly resent after a network error
		// (the first attempt may have run); callers and the engine retry.
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
		MaintNotificationsConfig: &maintnotifications.Config{
			Mode: maintnotifications.ModeDisabled,
		},
		// RESP2: the backend uses no RESP3 feature (no client-side
		// caching, no maintenance notifications), and under RESP3 go-redis
		// runs its push-notification processor before every read of the
		// Watch subscriptions (one per event: 7% of the plugin's CPU at
		// concurrency 32 in make bench's profile) and on pooled connections.
		// Script replies are arrays, integers and strings either way.
		Protocol: 2,
	}
	b := &Backend{opts: o, client: goredis.NewUniversalClient(uo), log: slog.Default().With("backend", Name)}
	routeLogs.Do(func() { goredis.SetLogger(slogLogger{b.log}) })
	if err := b.start(ctx); err != nil {
		_ = b.client.Close()
		return nil, err
	}
	return b, nil
}

func (b *Backend) start(ctx context.Context) error {
	// Bound start-up even when ctx has no deadline: a few dial attempts.
	ctx, cancel := context.WithTimeout(ctx, 2*b.opts.DialTimeout+b.opts.OpTimeout)
	defer cancel()
	where := strings.Join(b.opts.Addrs, ",")
	if b.opts.MasterName != "" {
		where = fmt.Sprintf("master %q via sentinels %s", b.opts.MasterName, where)
	}
	if err := b.forEachNode(ctx, func(ctx context.Context, c goredis.UniversalClient) error {
		return c.Ping(ctx).Err()
	}); err != nil {
		hint := ""
		switch {
		case isAuthErr(err):
			hint = " (check username/password)"
		case (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) && !b.opts.TLS:
			// A TLS server drops a plain-text client: at once (EOF), or
			// with a reset when the client's first commands are unread.
			hint = " (the server closed the connection: does it require TLS? set tls=true)"
		}
		return fmt.Errorf("%w: redis: cannot use %s%s: %w", backend.ErrUnavailable, where, hint, err)
	}
	if v, err := b.client.Info(ctx, "server").Result(); err == nil {
		b.serverVer = infoField(v, "redis_version")
	}
	b.durable = b.detectDurable(ctx)
	b.warnEviction(ctx)
	if !b.ensureKeyspaceEvents(ctx) {
		b.log.Warn("Redis expiry notifications are off and cannot be turned on; waiters on expired locks are woken by the engine's expiry timer",
			"hint", "CONFIG SET notify-keyspace-events Ex")
	}
	return nil
}

// forEachNode runs fn on every master of a Cluster, or once on the client.
// The calls never overlap (go-redis runs ForEachMaster's callbacks in
// parallel; fn may then share state without locking).
func (b *Backend) forEachNode(ctx context.Context, fn func(context.Context, goredis.UniversalClient) error) error {
	if cc, ok := b.client.(*goredis.ClusterClient); ok {
		var mu sync.Mutex
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			return fn(ctx, c)
		})
	}
	return fn(ctx, b.client)
}

func (b *Backend) detectDurable(ctx context.Context) bool {
	switch b.opts.Durable {
	case "true":
		return true
	case "false":
		return false
	}
	durable := true
	err := b.forEachNode(ctx, func(ctx context.Context, c goredis.UniversalClient) error {
		cfg, err := c.ConfigGet(ctx, "append*").Result()
		if err != nil {
			return err
		}
		if cfg["appendonly"] != "yes" || cfg["appendfsync"] != "always" {
			durable = false
		}
		return nil
	})
	return err == nil && durable
}

// warnEviction logs when Redis may evict keys under memory pressure: every
// lock key has a TTL, so allkeys-* and volatile-* policies can delete a held
// lock, and mutual exclusion with it. Only noeviction is safe.
func (b *Backend) warnEviction(ctx context.Context) {
	_ = b.forEachNode(ctx, func(ctx context.Context, c goredis.UniversalClient) error {
		cfg, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
		if err != nil {
			return err
		}
		if p := cfg["maxmemory-policy"]; p != "" && p != "noeviction" {
			b.log.Warn("Redis may evict held locks under memory pressure; set maxmemory-policy noeviction",
				"maxmemory-policy", p)
		}
		return nil
	})
}

// ensureKeyspaceEvents turns on expired-key notifications (E and x) on every
// node, keeping whatever flags are already set. It reports whether they are on.
func (b *Backend) ensureKeyspaceEvents(ctx context.Context) bool {
	on := true
	err := b.forEachNode(ctx, func(ctx context.Context, c goredis.UniversalClient) error {
		cfg, err := c.ConfigGet(ctx, "notify-keyspace-events").Result()
		if err != nil {
			return err
		}
		flags := cfg["notify-keyspace-events"]
		hasE := strings.Contains(flags, "E")
		hasX := strings.Contains(flags, "x") || strings.Contains(flags, "A")
		if hasE && hasX {
			return nil
		}
		if b.opts.KeyspaceEvents == "off" {
			on = false
			return nil
		}
		if !hasE {
			flags += "E"
		}
		if !hasX {
			flags += "x"
		}
		return c.ConfigSet(ctx, "notify-keyspace-events", flags).Err()
	})
	return err == nil && on
}

// Close closes the connections.
func (b *Backend) Close() error { return b.client.Close() }

// Info states the backend's promises.
func (b *Backend) Info(ctx context.Context) (backend.Info, error) {
	v := Version
	if b.serverVer != "" {
		v += " (redis " + b.serverVer + ")"
	}
	return backend.Info{
		Name:           Name,
		Version:        v,
		Shared:         true,
		Durable:        b.durable,
		TTLGranularity: time.Millisecond,
		MinTTL:         b.opts.MinTTL,
		MaxTTL:         b.opts.MaxTTL,
		Fair:           false,
		MaxKeys:        MaxKeys,
		RequestIDs:     true,
		MaxLockDelay:   MaxLockDelay,
		Kinds:          Kinds,
	}, nil
}

// Acquire runs the acquire script on one key: one atomic step.
func (b *Backend) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.AcquireResult, error) {
	if req.Kind != backend.KindMutex {
		return b.acquireGrant(ctx, req)
	}
	res, err := b.AcquireSet(ctx, acquireSetOf(req))
	if err != nil {
		return backend.AcquireResult{}, err
	}
	return b.withHolders(ctx, req.Key, acquireResultOf(res))
}

// Release runs the release script on one key: compare the token, then
// delete.
func (b *Backend) Release(ctx context.Context, req backend.ReleaseRequest) (bool, error) {
	return b.ReleaseSet(ctx, releaseSetOf(req))
}

// Extend runs the extend script on one key: compare the token, then renew.
func (b *Backend) Extend(ctx context.Context, req backend.ExtendRequest) (backend.ExtendResult, error) {
	res, err := b.ExtendSet(ctx, extendSetOf(req))
	if err != nil {
		return backend.ExtendResult{}, err
	}
	return extendResultOf(res), nil
}

// Get returns the lock on key, if held.
func (b *Backend) Get(ctx context.Context, key string) (backend.Record, bool, error) {
	res, err := getScript.Run(ctx, b.client, b.grantKeys(key)).Slice()
	if err != nil {
		return backend.Record{}, false, b.fail("get", err)
	}
	return b.parseGet(key, res)
}

// List scans for lock keys under req.Prefix (SCAN on every node), sorts them
// and reads one page. A page costs a scan of the keyspace's matching keys:
// List is for operators, not for the hot path.
func (b *Backend) List(ctx context.Context, req backend.ListRequest) (backend.ListPage, error) {
	// Both layouts of baseKey: keys that are their own hash tag, and keys
	// with a hash tag of their own (whose escaped form follows the tag).
	esc := globEscape(escapeKey(req.Prefix))
	var patterns []string
	for _, suffix := range []string{":lock", ":grants"} {
		patterns = append(patterns, b.opts.KeyPrefix+"{"+esc+"*}"+suffix, b.opts.KeyPrefix+"{*}"+esc+"*"+suffix)
	}
	var keys []string
	seen := map[string]bool{}
	err := b.forEachNode(ctx, func(ctx context.Context, c goredis.UniversalClient) error {
		for _, pattern := range patterns {
			it := c.Scan(ctx, 0, pattern, 1000).Iterator()
			for it.Next(ctx) {
				rk := it.Val()
				if base, ok := strings.CutSuffix(rk, ":grants"); ok {
					rk = base + ":lock"
				}
				k, ok := b.decodeLockKey(rk)
				if ok && strings.HasPrefix(k, req.Prefix) && k > req.PageToken && !seen[k] {
					seen[k] = true
					keys = append(keys, k)
				}
			}
			if err := it.Err(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return backend.ListPage{}, b.fail("list", err)
	}
	sort.Strings(keys)
	// PageSize counts grants: a key holding grants counts as many.
	size := max(req.PageSize, 1)
	var page backend.ListPage
	more := false
	for count := 0; len(keys) > 0 && count < size; {
		n := min(size-count, len(keys))
		batch := keys[:n]
		keys = keys[n:]
		pipe := b.client.Pipeline()
		cmds := make([]*goredis.Cmd, len(batch))
		for i, k := range batch {
			cmds[i] = getScript.Eval(ctx, pipe, b.grantKeys(k))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return backend.ListPage{}, b.fail("list", err)
		}
		for i, cmd := range cmds {
			if count >= size {
				// Full (a key's grants filled it): the rest of the batch
				// comes on the next page.
				more = true
				break
			}
			res, err := cmd.Slice()
			if err != nil {
				return backend.ListPage{}, b.fail("list", err)
			}
			rec, held, err := b.parseGet(batch[i], res)
			if err != nil {
				return backend.ListPage{}, b.fail("list", err)
			}
			if held { // else expired or released since the scan
				page.Records = append(page.Records, rec)
				count += max(len(rec.Holders), 1)
			}
		}
	}
	if (more || len(keys) > 0) && len(page.Records) > 0 {
		page.NextPageToken = page.Records[len(page.Records)-1].Key
	}
	return page, nil
}

func (b *Backend) checkTTL(ttl time.Duration) error {
	if ttl < b.opts.MinTTL || ttl > b.opts.MaxTTL {
		return fmt.Errorf("%w: ttl %s is outside the redis backend's range [%s, %s]",
			backend.ErrInvalidArgument, ttl, b.opts.MinTTL, b.opts.MaxTTL)
	}
	return nil
}

// millis rounds d up to whole milliseconds, Redis's unit: a lock is never
// held for less than asked.
func millis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// fail wraps a Redis error: the caller's own cancellation stays visible
// (errors.Is(err, context.Canceled)); everything else is unavailable.
func (b *Backend) fail(op string, err error) error {
	return fmt.Errorf("%w: redis %s: %w", backend.ErrUnavailable, op, err)
}

func isAuthErr(err error) bool {
	s := err.Error()
	return strings.Contains(s, "WRONGPASS") || strings.Contains(s, "NOAUTH") ||
		strings.Contains(s, "NOPERM") || strings.Contains(s, "invalid password") ||
		strings.Contains(s, "invalid username-password")
}

// keys are the lock, meta and delay keys of key, in one Cluster slot.
func (b *Backend) keys(key string) []string {
	base := b.baseKey(key)
	return []string{base + ":lock", base + ":meta", base + ":delay"}
}

// baseKey is what key's lock and meta keys start with. Its hash tag (the
// text between the first '{' and the next '}', which alone decides a
// Cluster slot) is the key's own hash tag when it has one, as Redis Cluster
// reads keys, so that keys sharing a tag ({accounts}/1, {accounts}/2) share
// a slot and can be taken as one set: <prefix>{T}E. Any other key is its own
// tag: <prefix>{E}. E is the %-escaped key, which holds no '{' or '}'.
func (b *Backend) baseKey(key string) string {
	esc := escapeKey(key)
	if tag, ok := hashTag(key); ok {
		return b.opts.KeyPrefix + "{" + tag + "}" + esc
	}
	return b.opts.KeyPrefix + "{" + esc + "}"
}

// hashTag is key's Redis Cluster hash tag: the text between its first '{'
// and the first '}' after it, when not empty.
func hashTag(key string) (string, bool) {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return "", false
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return "", false
	}
	return key[i+1 : i+1+j], true
}

// decodeLockKey returns the lock key's holdfast key (either layout of
// baseKey).
func (b *Backend) decodeLockKey(rk string) (string, bool) {
	rest, ok := strings.CutPrefix(rk, b.opts.KeyPrefix+"{")
	if !ok {
		return "", false
	}
	rest, ok = strings.CutSuffix(rest, ":lock")
	if !ok {
		return "", false
	}
	i := strings.IndexByte(rest, '}')
	if i < 0 {
		return "", false
	}
	if i == len(rest)-1 { // <prefix>{E}
		esc := rest[:i]
		if strings.ContainsAny(esc, "{}") {
			return "", false
		}
		key, ok := unescapeKey(esc)
		if !ok || b.baseKey(key) != b.opts.KeyPrefix+"{"+esc+"}" {
			return "", false
		}
		return key, true
	}
	esc := rest[i+1:] // <prefix>{T}E
	if strings.ContainsAny(esc, "{}") {
		return "", false
	}
	key, ok := unescapeKey(esc)
	if !ok || b.baseKey(key)+":lock" != rk {
		return "", false
	}
	return key, true
}

func (b *Backend) channel(key string) string { return b.opts.KeyPrefix + "events:" + key }

// escapeKey %-escapes '%', '{' and '}' so a key cannot end or empty the
// hash tag. It maps character by character, so the escape of a prefix is a
// prefix of the escape.
func escapeKey(k string) string {
	if !strings.ContainsAny(k, "%{}") {
		return k
	}
	var sb strings.Builder
	for i := 0; i < len(k); i++ {
		switch c := k[i]; c {
		case '%':
			sb.WriteString("%25")
		case '{':
			sb.WriteString("%7B")
		case '}':
			sb.WriteString("%7D")
		default:
			sb.WriteByte(c)
		}
	}
	return sb.String()
}

func unescapeKey(e string) (string, bool) {
	if !strings.Contains(e, "%") {
		return e, true
	}
	var sb strings.Builder
	for i := 0; i < len(e); i++ {
		if e[i] != '%' {
			sb.WriteByte(e[i])
			continue
		}
		if i+2 >= len(e) {
			return "", false
		}
		switch e[i+1 : i+3] {
		case "25":
			sb.WriteByte('%')
		case "7B":
			sb.WriteByte('{')
		case "7D":
			sb.WriteByte('}')
		default:
			return "", false
		}
		i += 2
	}
	return sb.String(), true
}

// globEscape quotes the characters SCAN MATCH and PSUBSCRIBE treat as glob.
func globEscape(s string) string {
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '*', '?', '[', ']', '\\':
			sb.WriteByte('\\')
			sb.WriteByte(c)
		default:
			sb.WriteByte(c)
		}
	}
	return sb.String()
}

// splitStamp splits a stamp into parts a Lua double holds exactly.
func splitStamp(t hlc.Timestamp) (sec, nsec int64, logical uint32) {
	sec, nsec = t.WallTime/1e9, t.WallTime%1e9
	if nsec < 0 {
		sec, nsec = sec-1, nsec+1e9
	}
	return sec, nsec, t.Logical
}

// parseRecord reads {fence, holder, ss, sn, sl, pttl ms, time s, time us}.
func parseRecord(key string, v []any) (backend.Record, error) {
	if len(v) < 8 {
		return backend.Record{}, fmt.Errorf("unexpected script reply %v", v)
	}
	fence, err := strconv.ParseUint(asString(v[0]), 10, 64)
	if err != nil {
		return backend.Record{}, fmt.Errorf("fencing token %q: %w", asString(v[0]), err)
	}
	ss, sn, sl := asInt(v[2]), asInt(v[3]), asInt(v[4])
	pttl := time.Duration(asInt(v[5])) * time.Millisecond
	now := time.Unix(asInt(v[6]), asInt(v[7])*1000)
	rec := backend.Record{
		Key:          key,
		FencingToken: fence,
		Holder:       asString(v[1]),
		Stamp:        hlc.Timestamp{WallTime: ss*1e9 + sn, Logical: uint32(sl)},
	}
	if pttl > 0 {
		rec.Remaining = pttl
		rec.ExpiresAt = now.Add(pttl)
	}
	return rec, nil
}

func asString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}

func asInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}

func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// routeLogs sends go-redis's own log lines (dial failures, Sentinel's new
// master) to slog, which the plugin host reads, at debug level: every failure
// that matters already reaches the caller as an error.
var routeLogs sync.Once

type slogLogger struct{ log *slog.Logger }

func (l slogLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "go-redis: "+fmt.Sprintf(format, v...))
}

// isTimeout reports a read deadline that passed (used by Watch's health check).
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
