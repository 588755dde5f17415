package etcd

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/proto/hlc"
)

// stampSuffix marks a key's stamp key: P "locks/" K "\x00". Keys never hold
// NUL (the engine refuses them), so the stamp key sorts right after its lock
// key and before every other key that has K as a prefix.
const stampSuffix = "\x00"

func (b *Backend) lockKey(key string) string  { return b.locks + key }
func (b *Backend) ownerKey(key string) string { return b.owners + key }
func (b *Backend) stampKey(key string) string { return b.locks + key + stampSuffix }

// recordValue is the lock record stored at the lock key. The fencing token is
// not in it: it is the key's CreateRevision.
type recordValue struct {
	Holder    string `json:"holder,omitempty"`
	StampWall int64  `json:"stamp_wall"`
	StampLog  uint32 `json:"stamp_logical,omitempty"`
	// ExpiresNs is the plugin's wall clock when it asked for the lease plus
	// the granted TTL (informational; etcd decides expiry).
	ExpiresNs int64 `json:"expires_ns"`
	// LeaseTTL is the lease's TTL in seconds, so that whoever detaches the
	// lease (Release, Extend) can pool it for reuse.
	LeaseTTL int64 `json:"lease_ttl_s,omitempty"`
	// Set: the record is one key of a set, whose records share one lease;
	// only the set's own Release or Extend detaches that lease.
	Set bool `json:"set,omitempty"`
	// SharedLease: the record shares its lease with the other records a
	// batch stored or moved (batch.go); no Release or Extend of one key
	// pools or revokes that lease, which etcd ends at its TTL.
	SharedLease bool `json:"shared_lease,omitempty"`
	// The request identity of the last Acquire or Extend applied to the
	// lock, its Acquire's replay, and whether a replay was answered
	// (Claimed): see requests.go.
	ReqID   string `json:"req_id,omitempty"`
	ReqFP   string `json:"req_fp,omitempty"`
	Replay  string `json:"replay,omitempty"`
	Claimed bool   `json:"claimed,omitempty"`
	// LockDelayMs: the lock-delay that follows the lock if it expires
	// (delays.go).
	LockDelayMs int64 `json:"lock_delay_ms,omitempty"`
	// A grant's (grants.go): its permits, and its key's kind and limit.
	Permits int    `json:"permits,omitempty"`
	Kind    string `json:"kind,omitempty"`
	Limit   int    `json:"limit,omitempty"`
	// An election's grant (elections.go): its value, and how many times
	// Proclaim replaced it (so Watch tells a proclaim's put from others).
	Value     string `json:"value,omitempty"`
	Proclaims int64  `json:"proclaims,omitempty"`
}

// encode is the record's value with the lease's expiry and TTL.
func (v recordValue) encode(expires time.Time, leaseTTL time.Duration) string {
	v.ExpiresNs, v.LeaseTTL = expires.UnixNano(), int64(leaseTTL/time.Second)
	out, _ := json.Marshal(v)
	return string(out)
}

// newRecord is the record of a lock taken now.
func newRecord(holder string, stamp hlc.Timestamp, set bool, req backend.Request, replay string, lockDelay time.Duration) recordValue {
	return recordValue{Holder: holder, StampWall: stamp.WallTime, StampLog: stamp.Logical, Set: set,
		ReqID: req.ID, ReqFP: req.Fingerprint, Replay: replay, LockDelayMs: lockDelay.Milliseconds()}
}

// sharesLease reports a record whose lease other records use too: one
// stored by AcquireSet or ExtendSet, or by a batch.
func sharesLease(kv *mvccpb.KeyValue) bool {
	v, err := decodeValue(kv)
	return err == nil && (v.Set || v.SharedLease)
}

// decodeValue reads the lock key's value.
func decodeValue(kv *mvccpb.KeyValue) (recordValue, error) {
	var v recordValue
	if kv == nil {
		return v, fmt.Errorf("etcd: no lock record: %w", backend.ErrUnavailable)
	}
	if err := json.Unmarshal(kv.Value, &v); err != nil {
		return v, fmt.Errorf("etcd: lock record %q is not holdfast's: %w: %w", kv.Key, backend.ErrUnavailable, err)
	}
	return v, nil
}

// detachedLease describes the lease of a lock record that was just detached
// from it (the record deleted by Release, or moved by Extend): its ID, TTL
// seconds, and when it was last renewed, estimated from the record (another
// plugin's wall clock; the pool renews a lease before use, so a wrong
// estimate costs a grant, never a lock).
func detachedLease(kv *mvccpb.KeyValue) (id int64, secs int64, renewed time.Time, ok bool) {
	var v recordValue
	if kv == nil || kv.Lease == 0 || json.Unmarshal(kv.Value, &v) != nil || v.LeaseTTL <= 0 {
		return 0, 0, time.Time{}, false
	}
	renewed = time.Now().Add(time.Until(time.Unix(0, v.ExpiresNs)) - time.Duration(v.LeaseTTL)*time.Second)
	return kv.Lease, v.LeaseTTL, renewed, true
}

// decodeRecord turns the lock key's kv into a Record for key.
func decodeRecord(key string, kv *mvccpb.KeyValue) (backend.Record, error) {
	var v recordValue
	if err := json.Unmarshal(kv.Value, &v); err != nil {
		return backend.Record{}, fmt.Errorf("etcd: lock record of %q is not holdfast's: %w: %w", key, backend.ErrUnavailable, err)
	}
	expires := time.Unix(0, v.ExpiresNs)
	rec := backend.Record{
		Key:          key,
		FencingToken: uint64(kv.CreateRevision),
		Holder:       v.Holder,
		ExpiresAt:    expires,
		Remaining:    max(0, time.Until(expires)),
		Stamp:        hlc.Timestamp{WallTime: v.StampWall, Logical: v.StampLog},
		LockDelay:    time.Duration(v.LockDelayMs) * time.Millisecond,
	}
	if kind, ok := kindByName(v.Kind); ok { // a grant
		rec.Kind, rec.Limit, rec.Permits, rec.Value = kind, v.Limit, v.Permits, v.Value
	}
	return rec, nil
}

// encodeStamp is 12 bytes whose byte order is the stamps' order: the wall
// time with its sign bit flipped, then the logical counter, both big-endian.
// etcd compares values byte-wise, so a transaction can test "stored stamp <
// this stamp" without reading it first.
func encodeStamp(t hlc.Timestamp) string {
	var buf [12]byte
	binary.BigEndian.PutUint64(buf[:8], uint64(t.WallTime)^(1<<63))
	binary.BigEndian.PutUint32(buf[8:], t.Logical)
	return string(buf[:])
}

func decodeStamp(v []byte) (hlc.Timestamp, error) {
	if len(v) != 12 {
		return hlc.Timestamp{}, fmt.Errorf("etcd: stamp value of %d bytes, want 12: %w", len(v), backend.ErrUnavailable)
	}
	return hlc.Timestamp{
		WallTime: int64(binary.BigEndian.Uint64(v[:8]) ^ (1 << 63)),
		Logical:  binary.BigEndian.Uint32(v[8:]),
	}, nil
}

// ttlSeconds rounds a TTL up to etcd's whole seconds.
func ttlSeconds(ttl time.Duration) int64 {
	return int64((ttl + time.Second - 1) / time.Second)
}
