package wire

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/holdfast/holdfast/core/backend"
	backendv1 "github.com/holdfast/holdfast/proto/holdfast/backend/v1"
)

// The From... functions below turn a plugin's answers into backend types,
// for the host. A plugin is another program (possibly third-party, possibly
// broken), so its answers are checked like any input: an answer that cannot
// be right (an acquired lock without a record, a record for another key, a
// list entry outside the prefix, an invalid duration or time) is refused
// with an error wrapping backend.ErrUnavailable, and callers answer
// unavailable rather than act on it. Nothing here panics, whatever the bytes
// (see the fuzz test).

// errMalformed makes the error for a nonsensical answer.
func errMalformed(op, format string, args ...any) error {
	return fmt.Errorf("%w: the plugin's %s answer is malformed: %s", backend.ErrUnavailable, op, fmt.Sprintf(format, args...))
}

// fromRecord converts a record that must be present. key, when not
// empty, is the key the record must be for.
func fromRecord(op string, p *backendv1.Record, key string) (backend.Record, error) {
	if p == nil {
		return backend.Record{}, errMalformed(op, "no record")
	}
	if key != "" && p.GetKey() != key {
		return backend.Record{}, errMalformed(op, "record for key %q, asked about %q", p.GetKey(), key)
	}
	if p.GetKey() == "" {
		return backend.Record{}, errMalformed(op, "record without a key")
	}
	r := backend.Record{
		Key:          p.GetKey(),
		FencingToken: p.GetFencingToken(),
		Holder:       p.GetHolder(),
		Stamp:        FromStamp(p.GetStamp()),
		Value:        p.GetValue(),
	}
	var err error
	if r.Remaining, r.ExpiresAt, err = leaseTimes(op, "", p.GetRemaining(), p.GetExpiresAt()); err != nil {
		return backend.Record{}, err
	}
	if r.LockDelay, err = nonNegative(op, "lock_delay", p.GetLockDelay()); err != nil {
		return backend.Record{}, err
	}
	if err := fromShape(op, p, &r); err != nil {
		return backend.Record{}, err
	}
	return r, nil
}

// fromShape decodes a record's kind, limit, permits and holders. Limit and
// Permits are at least 1 (unset is a mutex's 1); InUse, when the plugin
// left it unset, is the sum of the holders' permits. Nothing checks that the
// holders fit the limit: a backend that over-grants is shown as it is (the
// conformance suite catches it).
func fromShape(op string, p *backendv1.Record, r *backend.Record) error {
	kind, ok := FromKind(p.GetKind())
	if !ok {
		return errMalformed(op, "record of unknown kind %v", p.GetKind())
	}
	r.Kind = kind
	r.Limit = int(max(p.GetLimit(), 1))
	r.Permits = int(max(p.GetPermits(), 1))
	r.InUse = int(p.GetInUse())
	if n := len(p.GetHolders()); n > 0 {
		r.Holders = make([]backend.Grant, n)
	}
	sum := 0
	for i, g := range p.GetHolders() {
		grant, err := fromGrant(op, g)
		if err != nil {
			return err
		}
		r.Holders[i] = grant
		sum += grant.Permits
	}
	if r.InUse == 0 {
		r.InUse = sum
	}
	return nil
}

func fromGrant(op string, p *backendv1.Grant) (backend.Grant, error) {
	g := backend.Grant{
		FencingToken: p.GetFencingToken(),
		Holder:       p.GetHolder(),
		Stamp:        FromStamp(p.GetStamp()),
		Permits:      int(max(p.GetPermits(), 1)),
		Value:        p.GetValue(),
	}
	var err error
	if g.Remaining, g.ExpiresAt, err = leaseTimes(op, "holder's ", p.GetRemaining(), p.GetExpiresAt()); err != nil {
		return backend.Grant{}, err
	}
	return g, nil
}

// leaseTimes decodes a lease's remaining time and expiry (unset: zero);
// what prefixes the field names in messages.
func leaseTimes(op, what string, d *durationpb.Duration, t *timestamppb.Timestamp) (time.Duration, time.Time, error) {
	var remaining time.Duration
	var expires time.Time
	if d != nil {
		if err := d.CheckValid(); err != nil {
			return 0, time.Time{}, errMalformed(op, "%sremaining: %v", what, err)
		}
		// A holder past its expiry (clock skew between the plugin and its
		// store) has nothing left, not a negative time.
		remaining = max(d.AsDuration(), 0)
	}
	if t != nil {
		if err := t.CheckValid(); err != nil {
			return 0, time.Time{}, errMalformed(op, "%sexpires_at: %v", what, err)
		}
		expires = t.AsTime()
	}
	return remaining, expires, nil
}

// nonNegative converts a duration of an answer that must not be negative
// (unset is zero).
func nonNegative(op, field string, d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, errMalformed(op, "%s: %v", field, err)
	}
	if d.AsDuration() < 0 {
		return 0, errMalformed(op, "%s: %s is negative", field, d.AsDuration())
	}
	return d.AsDuration(), nil
}

// fromDelayRecord decodes the record of a key nobody holds: its
// lock-delay, when it is in one (the zero Record when not). keys, when
// not empty, are the keys it may be for.
func fromDelayRecord(op string, p *backendv1.Record, keys ...string) (backend.Record, bool, error) {
	if p.GetDelayRemaining() == nil {
		return backend.Record{}, false, nil
	}
	d, err := nonNegative(op, "delay_remaining", p.GetDelayRemaining())
	if err != nil {
		return backend.Record{}, false, err
	}
	if len(keys) > 0 && !slices.Contains(keys, p.GetKey()) {
		return backend.Record{}, false, errMalformed(op, "lock-delay of key %q, asked about %q", p.GetKey(), keys)
	}
	if d == 0 {
		return backend.Record{}, false, nil
	}
	return backend.Record{Key: p.GetKey(), DelayRemaining: d}, true, nil
}

// FromAcquireResponse decodes the answer to an Acquire of key.
func FromAcquireResponse(resp *backendv1.AcquireResponse, key string) (backend.AcquireResult, error) {
	if resp.GetAcquired() {
		rec, err := fromRecord("Acquire", resp.GetRecord(), key)
		if err != nil {
			return backend.AcquireResult{}, err
		}
		return backend.AcquireResult{Acquired: true, Record: rec, Replayed: resp.GetReplayed(), Replay: resp.GetReplay()}, nil
	}
	if resp.GetReplayed() {
		return backend.AcquireResult{}, errMalformed("Acquire", "a replay that did not acquire")
	}
	if rec, delayed, err := fromDelayRecord("Acquire", resp.GetRecord(), key); delayed || err != nil {
		return backend.AcquireResult{Record: rec}, err
	}
	// Not acquired: the holder, when the plugin knows it; a record with no
	// key means "held, holder unknown".
	if resp.GetRecord() == nil || resp.GetRecord().GetKey() == "" {
		return backend.AcquireResult{}, nil
	}
	rec, err := fromRecord("Acquire", resp.GetRecord(), key)
	return backend.AcquireResult{Record: rec}, err
}

// FromAcquireSetResponse decodes the answer to an AcquireSet of keys (in
// the order they were claimed).
func FromAcquireSetResponse(resp *backendv1.AcquireSetResponse, keys []string) (backend.AcquireSetResult, error) {
	const op = "AcquireSet"
	if resp.GetAcquired() {
		recs, err := fromRecords(op, resp.GetRecords(), keys)
		if err != nil {
			return backend.AcquireSetResult{}, err
		}
		return backend.AcquireSetResult{Acquired: true, Records: recs, Replayed: resp.GetReplayed(), Replay: resp.GetReplay()}, nil
	}
	if resp.GetReplayed() || len(resp.GetRecords()) > 0 {
		return backend.AcquireSetResult{}, errMalformed(op, "records or a replay without acquired")
	}
	if rec, delayed, err := fromDelayRecord(op, resp.GetBlocker(), keys...); delayed || err != nil {
		return backend.AcquireSetResult{Blocker: rec}, err
	}
	b := resp.GetBlocker()
	if b == nil || b.GetKey() == "" {
		return backend.AcquireSetResult{}, nil
	}
	if !slices.Contains(keys, b.GetKey()) {
		return backend.AcquireSetResult{}, errMalformed(op, "blocker on key %q, asked about %q", b.GetKey(), keys)
	}
	rec, err := fromRecord(op, b, "")
	return backend.AcquireSetResult{Blocker: rec}, err
}

// FromExtendSetResponse decodes the answer to an ExtendSet of keys.
func FromExtendSetResponse(resp *backendv1.ExtendSetResponse, keys []string) (backend.ExtendSetResult, error) {
	if !resp.GetExtended() {
		return backend.ExtendSetResult{}, nil
	}
	recs, err := fromRecords("ExtendSet", resp.GetRecords(), keys)
	if err != nil {
		return backend.ExtendSetResult{}, err
	}
	return backend.ExtendSetResult{Extended: true, Records: recs}, nil
}

// fromRecords decodes one record per key, in the keys' order.
func fromRecords(op string, ps []*backendv1.Record, keys []string) ([]backend.Record, error) {
	if len(ps) != len(keys) {
		return nil, errMalformed(op, "%d records for %d keys", len(ps), len(keys))
	}
	out := make([]backend.Record, len(ps))
	for i, p := range ps {
		rec, err := fromRecord(op, p, keys[i])
		if err != nil {
			return nil, err
		}
		out[i] = rec
	}
	return out, nil
}

// FromExtendResponse decodes the answer to an Extend of key.
func FromExtendResponse(resp *backendv1.ExtendResponse, key string) (backend.ExtendResult, error) {
	if !resp.GetExtended() {
		return backend.ExtendResult{}, nil
	}
	rec, err := fromRecord("Extend", resp.GetRecord(), key)
	if err != nil {
		return backend.ExtendResult{}, err
	}
	return backend.ExtendResult{Extended: true, Record: rec}, nil
}

// FromProclaimResponse decodes the answer to a Proclaim of req.Key: a
// proclaimed grant must carry the value proclaimed.
func FromProclaimResponse(resp *backendv1.ProclaimResponse, req backend.ProclaimRequest) (backend.ProclaimResult, error) {
	if !resp.GetProclaimed() {
		return backend.ProclaimResult{}, nil
	}
	rec, err := fromRecord("Proclaim", resp.GetRecord(), req.Key)
	if err != nil {
		return backend.ProclaimResult{}, err
	}
	if rec.Value != req.Value {
		return backend.ProclaimResult{}, errMalformed("Proclaim", "the record carries the value %q, not the one proclaimed", rec.Value)
	}
	return backend.ProclaimResult{Proclaimed: true, Record: rec}, nil
}

// FromGetResponse decodes the answer to a Get of key.
func FromGetResponse(resp *backendv1.GetResponse, key string) (backend.Record, bool, error) {
	if !resp.GetFound() {
		rec, _, err := fromDelayRecord("Get", resp.GetRecord(), key)
		return rec, false, err
	}
	rec, err := fromRecord("Get", resp.GetRecord(), key)
	if err != nil {
		return backend.Record{}, false, err
	}
	return rec, true, nil
}

// FromListResponse decodes the answer to the List req.
func FromListResponse(resp *backendv1.ListResponse, req backend.ListRequest) (backend.ListPage, error) {
	if n := len(resp.GetRecords()); n > req.PageSize {
		return backend.ListPage{}, errMalformed("List", "%d records for a page of %d", n, req.PageSize)
	}
	page := backend.ListPage{NextPageToken: resp.GetNextPageToken(), Records: make([]backend.Record, len(resp.GetRecords()))}
	for i, p := range resp.GetRecords() {
		rec, err := fromRecord("List", p, "")
		if err != nil {
			return backend.ListPage{}, err
		}
		if !strings.HasPrefix(rec.Key, req.Prefix) {
			return backend.ListPage{}, errMalformed("List", "key %q is not under the prefix %q", rec.Key, req.Prefix)
		}
		page.Records[i] = rec
	}
	return page, nil
}

// FromWatchResponse decodes one event of a Watch of prefix.
func FromWatchResponse(resp *backendv1.WatchResponse, prefix string) (backend.Event, error) {
	return fromEvent("Watch", resp, prefix)
}

// fromEvent decodes an event of op's stream (Watch or Follow), whose key
// must be under prefix.
func fromEvent(op string, resp *backendv1.WatchResponse, prefix string) (backend.Event, error) {
	ev := backend.Event{Type: fromEventType(resp.GetType())}
	switch ev.Type {
	case 0:
		return backend.Event{}, errMalformed(op, "event of unknown type %v", resp.GetType())
	case backend.EventSynced:
		return ev, nil
	}
	rec, err := fromRecord(op, resp.GetRecord(), "")
	if err != nil {
		return backend.Event{}, err
	}
	if !strings.HasPrefix(rec.Key, prefix) {
		return backend.Event{}, errMalformed(op, "key %q is not under the prefix %q", rec.Key, prefix)
	}
	ev.Record = rec
	return ev, nil
}

// FromInfoResponse decodes the answer to Info.
func FromInfoResponse(p *backendv1.InfoResponse) (backend.Info, error) {
	info := backend.Info{
		Name:       p.GetName(),
		Version:    p.GetVersion(),
		Shared:     p.GetShared(),
		Durable:    p.GetDurable(),
		Fair:       p.GetFair(),
		MaxKeys:    int(min(max(p.GetMaxKeys(), 1), maxWireKeys)),
		RequestIDs: p.GetRequestIds(),
	}
	// Kinds this side does not know (a newer plugin's) are left out: the
	// engine never asks for them.
	for _, w := range p.GetKinds() {
		if k, ok := FromKind(w); ok && k != backend.KindMutex && !slices.Contains(info.Kinds, k) {
			info.Kinds = append(info.Kinds, k)
		}
	}
	slices.Sort(info.Kinds)
	var err error
	if info.MaxLockDelay, err = duration("max_lock_delay", p.GetMaxLockDelay()); err != nil {
		return backend.Info{}, err
	}
	if info.TTLGranularity, err = duration("ttl_granularity", p.GetTtlGranularity()); err != nil {
		return backend.Info{}, err
	}
	if info.MinTTL, err = duration("min_ttl", p.GetMinTtl()); err != nil {
		return backend.Info{}, err
	}
	if info.MaxTTL, err = duration("max_ttl", p.GetMaxTtl()); err != nil {
		return backend.Info{}, err
	}
	if info.MaxTTL > 0 && info.MinTTL > info.MaxTTL {
		return backend.Info{}, errMalformed("Info", "min_ttl %s above max_ttl %s", info.MinTTL, info.MaxTTL)
	}
	return info, nil
}

// duration converts a non-negative duration of Info (unset is zero).
func duration(field string, d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, errMalformed("Info", "%s: %v", field, err)
	}
	if d.AsDuration() < 0 {
		return 0, errMalformed("Info", "%s: %s is negative", field, d.AsDuration())
	}
	return d.AsDuration(), nil
}
