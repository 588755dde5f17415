package redis

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/proto/hlc"
)

// Kinds are the kinds of key the backend keeps beside a mutex.
var Kinds = []backend.Kind{backend.KindSemaphore, backend.KindRWLock, backend.KindElection}

// grantKeys are the keys a call on one key names: lock, meta, delay and
// grants (see luaGrants), in one Cluster slot.
func (b *Backend) grantKeys(key string) []string {
	base := b.baseKey(key)
	return []string{base + ":lock", base + ":meta", base + ":delay", base + ":grants"}
}

// kindByName reads a kind as the scripts keep it (Kind.String); a mutex
// key keeps none.
func kindByName(name string) (backend.Kind, bool) {
	for _, k := range append([]backend.Kind{backend.KindMutex}, Kinds...) {
		if k.String() == name {
			return k, true
		}
	}
	return 0, false
}

// acquireGrant runs the grant script: one atomic step that drops the key's
// expired grants, sums the permits of the live ones and grants only if the
// request's fit within the limit.
func (b *Backend) acquireGrant(ctx context.Context, req backend.AcquireRequest) (backend.AcquireResult, error) {
	if req.Key == "" || req.OwnerToken == "" {
		return backend.AcquireResult{}, fmt.Errorf("%w: key and owner_token must not be empty", backend.ErrInvalidArgument)
	}
	if err := b.checkTTL(req.TTL); err != nil {
		return backend.AcquireResult{}, err
	}
	if err := req.CheckGrant(Kinds); err != nil {
		return backend.AcquireResult{}, err
	}
	s, n, l := splitStamp(req.Stamp)
	res, err := grantScript.Run(ctx, b.client, b.grantKeys(req.Key), req.OwnerToken, millis(req.TTL), req.Holder, s, n, l,
		millis(b.opts.MetaRetention), req.Request.ID, req.Request.Fingerprint, req.Replay, flag(req.ReplayOnly),
		req.Kind.String(), req.Limit, req.Permits, b.channel(req.Key), req.Value).Slice()
	if err != nil {
		return backend.AcquireResult{}, b.fail("acquire", err)
	}
	switch asInt(res[0]) {
	case 1, 0:
		rec, replayed, replay, err := parseState(req.Key, res)
		if err != nil {
			return backend.AcquireResult{}, b.fail("acquire", err)
		}
		return backend.AcquireResult{Acquired: asInt(res[0]) == 1, Record: rec, Replayed: replayed, Replay: replay}, nil
	case 5:
		return b.keptOther(ctx, req.Key, res)
	case 4:
		return backend.AcquireResult{}, nil
	case -1:
		return backend.AcquireResult{}, errConflict
	}
	return backend.AcquireResult{}, b.fail("acquire", fmt.Errorf("unexpected script reply %v", res))
}

// keptOther answers an Acquire refused because its key is kept with
// another kind or limit ({5, kind, limit}): not acquired, with the kept kind
// and limit, and the key's holders when it has any (read after the refusal:
// informational, as every reported holder is).
func (b *Backend) keptOther(ctx context.Context, key string, res []any) (backend.AcquireResult, error) {
	if len(res) != 3 {
		return backend.AcquireResult{}, b.fail("acquire", fmt.Errorf("unexpected script reply %v", res))
	}
	kind, ok := kindByName(asString(res[1]))
	if !ok {
		return backend.AcquireResult{}, b.fail("acquire", fmt.Errorf("key %q keeps an unknown kind %q", key, asString(res[1])))
	}
	rec, held, err := b.Get(ctx, key)
	if err != nil {
		return backend.AcquireResult{}, err
	}
	if !held {
		rec = backend.Record{Key: key}
	}
	rec.Kind, rec.Limit = kind, int(asInt(res[2]))
	return backend.AcquireResult{Record: rec}, nil
}

// withHolders completes a mutex Acquire refused because its key is kept as
// another kind (the acquire script says only the kind and limit) with the
// key's holders, read after the refusal (informational, as every reported
// holder is).
func (b *Backend) withHolders(ctx context.Context, key string, out backend.AcquireResult) (backend.AcquireResult, error) {
	if out.Acquired || out.Record.Kind == backend.KindMutex {
		return out, nil
	}
	rec, held, err := b.Get(ctx, key)
	if err != nil {
		return backend.AcquireResult{}, err
	}
	if held {
		rec.Kind, rec.Limit = out.Record.Kind, out.Record.Limit
		out.Record = rec
	}
	return out, nil
}

// stateHead is the length of a state reply's head: code, time s, time us,
// replayed, replay, kind, limit, in use, index; stateGrant is the length of
// one grant in it (fence, holder, ss, sn, sl, pttl ms, permits, value).
const (
	stateHead  = 9
	stateGrant = 8
)

// parseState reads a state reply (see luaGrants) into the key's record:
// every live grant in fencing-token order, and in the record's own fields
// the grant the call is about (the reply's index) or else the one that ends
// first.
func parseState(key string, res []any) (rec backend.Record, replayed bool, replay string, err error) {
	if len(res) < stateHead || (len(res)-stateHead)%stateGrant != 0 {
		return backend.Record{}, false, "", fmt.Errorf("unexpected script reply %v", res)
	}
	kind, ok := kindByName(asString(res[5]))
	if !ok {
		return backend.Record{}, false, "", fmt.Errorf("key %q keeps an unknown kind %q", key, asString(res[5]))
	}
	now := time.Unix(asInt(res[1]), asInt(res[2])*1000)
	rec = backend.Record{Key: key, Kind: kind, Limit: int(asInt(res[6])), InUse: int(asInt(res[7]))}
	idx := int(asInt(res[8])) - 1
	var about backend.Grant
	for i, v := 0, res[stateHead:]; len(v) >= stateGrant; i, v = i+1, v[stateGrant:] {
		fence, err := strconv.ParseUint(asString(v[0]), 10, 64)
		if err != nil {
			return backend.Record{}, false, "", fmt.Errorf("fencing token %q: %w", asString(v[0]), err)
		}
		left := time.Duration(max(asInt(v[5]), 0)) * time.Millisecond
		g := backend.Grant{
			FencingToken: fence,
			Holder:       asString(v[1]),
			ExpiresAt:    now.Add(left),
			Remaining:    left,
			Stamp:        hlc.Timestamp{WallTime: asInt(v[2])*1e9 + asInt(v[3]), Logical: uint32(asInt(v[4]))},
			Permits:      int(asInt(v[6])),
			Value:        asString(v[7]),
		}
		if i == idx || idx < 0 && (len(rec.Holders) == 0 || g.Remaining < about.Remaining) {
			about = g
		}
		rec.Holders = append(rec.Holders, g)
	}
	slices.SortFunc(rec.Holders, func(a, b backend.Grant) int { return compareUint(a.FencingToken, b.FencingToken) })
	if len(rec.Holders) > 0 {
		rec.FencingToken, rec.Holder, rec.ExpiresAt, rec.Remaining = about.FencingToken, about.Holder, about.ExpiresAt, about.Remaining
		rec.Stamp, rec.Permits, rec.Value = about.Stamp, about.Permits, about.Value
	}
	return rec, asInt(res[3]) == 1, asString(res[4]), nil
}

func compareUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// grantEvent reads a grant's acquired, released or proclaimed event (see
// announce): type, fence, ss, sn, sl, ttl ms, time s, time us, permits,
// kind, limit, the holder's length, then the holder and the value.
func grantEvent(key string, typ backend.EventType, payload string) (backend.Event, bool) {
	f := strings.SplitN(payload, "\n", 13)
	if len(f) != 13 {
		return backend.Event{}, false
	}
	n, err := strconv.Atoi(f[11])
	if err != nil || n < 0 || n > len(f[12]) {
		return backend.Event{}, false
	}
	rec, err := parseRecord(key, []any{f[1], f[12][:n], f[2], f[3], f[4], f[5], f[6], f[7]})
	if err != nil {
		return backend.Event{}, false
	}
	kind, ok := kindByName(f[9])
	if !ok {
		return backend.Event{}, false
	}
	rec.Permits, rec.Kind, rec.Limit, rec.Value = int(asInt(f[8])), kind, int(asInt(f[10])), f[12][n:]
	return backend.Event{Type: typ, Record: rec}, true
}

// Proclaim implements backend.ElectionBackend: one script replaces the value
// of the token's live grant on an election key (see proclaimScript). A token
// that holds none, the empty one included, answers false and changes
// nothing.
func (b *Backend) Proclaim(ctx context.Context, req backend.ProclaimRequest) (backend.ProclaimResult, error) {
	if req.Key == "" {
		return backend.ProclaimResult{}, fmt.Errorf("%w: key must not be empty", backend.ErrInvalidArgument)
	}
	if len(req.Value) > backend.MaxValueBytes {
		return backend.ProclaimResult{}, fmt.Errorf("%w: value of %d bytes exceeds the maximum %d", backend.ErrInvalidArgument, len(req.Value), backend.MaxValueBytes)
	}
	if req.OwnerToken == "" {
		return backend.ProclaimResult{}, nil
	}
	s, n, l := splitStamp(req.Stamp)
	res, err := proclaimScript.Run(ctx, b.client, b.grantKeys(req.Key), req.OwnerToken, req.Value, s, n, l,
		b.channel(req.Key), backend.KindElection.String()).Slice()
	if err != nil {
		return backend.ProclaimResult{}, b.fail("proclaim", err)
	}
	switch asInt(res[0]) {
	case 0:
		return backend.ProclaimResult{}, nil
	case 7:
		rec, _, _, err := parseState(req.Key, res)
		if err != nil {
			return backend.ProclaimResult{}, b.fail("proclaim", err)
		}
		return backend.ProclaimResult{Proclaimed: true, Record: rec}, nil
	}
	return backend.ProclaimResult{}, b.fail("proclaim", fmt.Errorf("unexpected script reply %v", res))
}

// decodeGrantKey reads a grant's expiry key (<base>:g:<fence>:<permits>):
// its key, fencing token and permits.
func (b *Backend) decodeGrantKey(rk string) (key string, fence uint64, permits int, ok bool) {
	i := strings.LastIndex(rk, ":g:")
	if i < 0 {
		return "", 0, 0, false
	}
	f, p, found := strings.Cut(rk[i+3:], ":")
	fence, err := strconv.ParseUint(f, 10, 64)
	n, perr := strconv.Atoi(p)
	if !found || err != nil || perr != nil {
		return "", 0, 0, false
	}
	key, ok = b.decodeLockKey(rk[:i] + ":lock")
	return key, fence, n, ok
}
