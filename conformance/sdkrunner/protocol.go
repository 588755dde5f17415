// Package sdkrunner is the suite's side of the SDK runner protocol: it starts
// a per-language adapter process (any command line), sends it JSON-lines
// commands on stdin and reads JSON-lines results and events from its stdout.
// The commands map to an SDK's ergonomic layer (lock, unlock, extend, fencing
// token, guard state, HLC clock), so the SDK-level specs are written once in
// Go and checked against every language. PROTOCOL.md beside this file is the
// specification an adapter author follows; the types here are its Go form,
// which the Go adapter also uses.
package sdkrunner

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// Version is the protocol version this package speaks. An adapter answers
// hello with the version it speaks; a different one ends the run.
const Version = 1

// Command names (PROTOCOL.md lists their arguments and results).
const (
	CmdHello         = "hello"
	CmdConnect       = "connect"
	CmdLock          = "lock"
	CmdUnlock        = "unlock"
	CmdExtend        = "extend"
	CmdFencingToken  = "fencing_token"
	CmdGuardState    = "guard_state"
	CmdValidateWrite = "validate_write"
	CmdClockNow      = "clock_now"
	CmdClockUpdate   = "clock_update"
	CmdInspect       = "inspect"
	CmdClose         = "close"
	CmdRunIfFree     = "run_if_free"
	CmdRunFinish     = "run_finish"
	CmdCancel        = "cancel"
	CmdList          = "list"
	CmdServerInfo    = "server_info"
	CmdLockMany      = "lock_many"
	// Leader election (capability CapElection).
	CmdCampaign    = "campaign"
	CmdProclaim    = "proclaim"
	CmdResign      = "resign"
	CmdLeader      = "leader"
	CmdObserve     = "observe"
	CmdObserveStop = "observe_stop"
)

// Error kinds: the language-neutral names an adapter maps its SDK's errors
// to.
const (
	KindNotAcquired     = "not_acquired"
	KindLeaseLost       = "lease_lost"
	KindReleased        = "released"
	KindInvalidArgument = "invalid_argument"
	KindUnavailable     = "unavailable"
	KindStaleToken      = "stale_token"
	KindClientClosed    = "client_closed"
	KindCanceled        = "canceled"
	KindUnauthenticated = "unauthenticated"
	KindPermission      = "permission_denied"
	KindBadCommand      = "bad_command"
	KindUnsupported     = "unsupported"
	KindInternal        = "internal"
)

// Loss reasons in guard_state and lease_lost events.
const (
	ReasonExpired            = "expired"
	ReasonRejected           = "rejected"
	ReasonClientClosed       = "client_closed"
	ReasonReleaseUnconfirmed = "release_unconfirmed"
)

// Guard states in guard_state.
const (
	StateHeld     = "held"
	StateLost     = "lost"
	StateReleased = "released"
)

// Capabilities an adapter may claim in its hello answer; specs that need one
// the adapter does not claim are reported as not applicable.
const (
	CapProtocolConnect = "protocol:connect"
	CapProtocolGRPC    = "protocol:grpc"
	CapProtocolGRPCWeb = "protocol:grpc-web"
	CapClockUpdate     = "clock_update"
	CapLeaseLostEvent  = "event:lease_lost"
	// CapRequestIDs: the SDK sends a request id on every Acquire, Extend
	// and Release, the same on each retry of one call.
	CapRequestIDs = "request_ids"
	// CapSemaphore: lock takes kind "semaphore" with limit and permits.
	CapSemaphore = "semaphore"
	// CapRWLock: lock takes kind "rwlock" with mode.
	CapRWLock = "rwlock"
	// CapElection: campaign, proclaim, resign, leader, observe and
	// observe_stop are implemented.
	CapElection = "election"
)

// Lock kinds (lock's kind argument, the kind lock answers).
const (
	LockKindMutex     = "mutex"
	LockKindSemaphore = "semaphore"
	LockKindRWLock    = "rwlock"
	LockKindElection  = "election"
)

// Grant modes (lock's mode argument for an rwlock, the mode lock answers).
const (
	ModeShared    = "shared"
	ModeExclusive = "exclusive"
)

// Events an adapter emits: lease_lost when a guard is poisoned, lease_event
// for each event of a lease-event listener (clients connected with
// lease_events), run_started when run_if_free's function starts.
const (
	EventLeaseLost  = "lease_lost"
	EventLease      = "lease_event"
	EventRunStarted = "run_started"
	// EventObserved: one message of an observe command's stream.
	EventObserved = "observed"
)

// Lease event types in lease_event events.
const (
	LeaseRenewed       = "renewed"
	LeaseRenewalFailed = "renewal_failed"
	LeaseLost          = "lost"
	LeaseReleased      = "released"
)

// Duration units an adapter may declare in hello (duration_unit).
const (
	UnitNanoseconds  = "ns"
	UnitMilliseconds = "ms"
	UnitSeconds      = "s"
)

// Request is one line the suite writes.
type Request struct {
	ID   uint64          `json:"id"`
	Cmd  string          `json:"cmd"`
	Args json.RawMessage `json:"args,omitempty"`
}

// Message is one line an adapter writes: a response (ID set, Result or Error)
// or an event (Event set, no ID).
type Message struct {
	ID     uint64          `json:"id,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *Error          `json:"error,omitempty"`

	Event  string `json:"event,omitempty"`
	Guard  string `json:"guard,omitempty"`
	Reason string `json:"reason,omitempty"`
	// lease_event fields (Reason too).
	Type         string `json:"type,omitempty"`
	Key          string `json:"key,omitempty"`
	FencingToken U64    `json:"fencing_token,omitempty"`
	Renewals     int    `json:"renewals,omitempty"`
	ErrorCode    string `json:"error_code,omitempty"`
	// run_started (FencingToken too).
	Run string `json:"run,omitempty"`
	// observed: the observe command's id and the leader (nil: none).
	Observe string  `json:"observe,omitempty"`
	Leader  *Leader `json:"leader,omitempty"`
}

// Error is a failed command's answer.
type Error struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
	// Code is the SDK's own error code, verbatim ("" when it has none).
	Code string `json:"code,omitempty"`
	// Reason is the loss reason of a lease_lost error.
	Reason string `json:"reason,omitempty"`
	// CauseCode is the SDK's code of a lease_lost error's cause.
	CauseCode string `json:"cause_code,omitempty"`
	// Current is the holder's state a not_acquired error of an acquire
	// carries.
	Current *LockState `json:"current,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("adapter: %s: %s", e.Kind, e.Message) }

// Is lets errors.Is(err, &Error{Kind: k}) match on the kind alone.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Kind == e.Kind && (t.Message == "" || t.Message == e.Message)
}

// ErrorOf is err as an adapter's answer, or nil.
func ErrorOf(err error) *Error {
	if e, ok := errors.AsType[*Error](err); ok {
		return e
	}
	return nil
}

// KindOf is the error kind of err ("" for nil, KindInternal for an error
// that is not an adapter's answer).
func KindOf(err error) string {
	if err == nil {
		return ""
	}
	if e := ErrorOf(err); e != nil {
		return e.Kind
	}
	return KindInternal
}

// U64 is a uint64 carried as a decimal string, so that JavaScript adapters
// do not round it.
type U64 uint64

// MarshalJSON writes the decimal string.
func (u U64) MarshalJSON() ([]byte, error) { return json.Marshal(strconv.FormatUint(uint64(u), 10)) }

func (u U64) String() string { return strconv.FormatUint(uint64(u), 10) }

// UnmarshalJSON accepts a decimal string (or, leniently, a JSON number).
func (u *U64) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n json.Number
		if err2 := json.Unmarshal(b, &n); err2 != nil {
			return fmt.Errorf("want a decimal string: %w", err)
		}
		s = n.String()
	}
	v, err := strconv.ParseUint(s, 10, 64)
	*u = U64(v)
	return err
}

// I64 is an int64 carried as a decimal string.
type I64 int64

// MarshalJSON writes the decimal string.
func (i I64) MarshalJSON() ([]byte, error) { return json.Marshal(strconv.FormatInt(int64(i), 10)) }

// UnmarshalJSON accepts a decimal string (or, leniently, a JSON number).
func (i *I64) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n json.Number
		if err2 := json.Unmarshal(b, &n); err2 != nil {
			return fmt.Errorf("want a decimal string: %w", err)
		}
		s = n.String()
	}
	v, err := strconv.ParseInt(s, 10, 64)
	*i = I64(v)
	return err
}

// Stamp is an HLC timestamp.
type Stamp struct {
	WallTimeNs I64    `json:"wall_time_ns"`
	Logical    uint32 `json:"logical"`
}

// Compare is -1, 0 or +1 as s is before, equal to or after t.
func (s Stamp) Compare(t Stamp) int {
	switch {
	case s.WallTimeNs != t.WallTimeNs:
		if s.WallTimeNs < t.WallTimeNs {
			return -1
		}
		return 1
	case s.Logical != t.Logical:
		if s.Logical < t.Logical {
			return -1
		}
		return 1
	}
	return 0
}

func (s Stamp) String() string { return fmt.Sprintf("%d.%d", s.WallTimeNs, s.Logical) }

// HelloArgs opens the handshake, always the first command.
type HelloArgs struct {
	ProtocolVersion int `json:"protocol_version"`
}

// HelloResult is the adapter's answer to hello.
type HelloResult struct {
	ProtocolVersion int `json:"protocol_version"`
	// SDK names the implementation ("go", "typescript", "python", ...).
	SDK string `json:"sdk"`
	// Version is the SDK's (or adapter's) version, informational.
	Version      string   `json:"version,omitempty"`
	Capabilities []string `json:"capabilities"`
	// DurationUnit is the unit of the SDK's bare-number durations
	// (UnitNanoseconds, UnitMilliseconds, UnitSeconds).
	DurationUnit string `json:"duration_unit,omitempty"`
}

// ConnectArgs asks for a client of the server at Addr (connect).
type ConnectArgs struct {
	Addr     string `json:"addr"`
	Protocol string `json:"protocol,omitempty"`
	// Client options; zero values leave the SDK's defaults.
	RetryBudgetMs    int64             `json:"retry_budget_ms,omitempty"`
	RequestTimeoutMs int64             `json:"request_timeout_ms,omitempty"`
	ExpiryMargin     *ExpiryMargin     `json:"expiry_margin,omitempty"`
	LeaseEvents      bool              `json:"lease_events,omitempty"`
	BearerToken      string            `json:"bearer_token,omitempty"`
	Headers          map[string]string `json:"headers,omitempty"`
	CAFile           string            `json:"ca_file,omitempty"`
	CertFile         string            `json:"cert_file,omitempty"`
	KeyFile          string            `json:"key_file,omitempty"`
}

// ExpiryMargin is connect's expiry_margin.
type ExpiryMargin struct {
	DriftFactor float64 `json:"drift_factor"`
	FixedMs     int64   `json:"fixed_ms"`
}

// ConnectResult names the client connect made.
type ConnectResult struct {
	Client string `json:"client"`
}

// LockArgs takes a lock with a client (lock): once when Try, else waiting
// up to WaitMs.
type LockArgs struct {
	Client string `json:"client"`
	Key    string `json:"key"`
	TTLMs  int64  `json:"ttl_ms,omitempty"`
	// TTLNative is a number in the SDK's own unit, or the string "inf";
	// when set TTLMs is ignored.
	TTLNative json.RawMessage `json:"ttl_native,omitempty"`
	WaitMs    int64           `json:"wait_ms,omitempty"`
	// WaitUnset: set no wait at all (the SDK's default); WaitMs is ignored.
	WaitUnset bool   `json:"wait_unset,omitempty"`
	Holder    string `json:"holder,omitempty"`
	Try       bool   `json:"try,omitempty"`
	// Kind is LockKindMutex (when empty), LockKindSemaphore or
	// LockKindRWLock: which of the SDK's builders takes the lock.
	Kind string `json:"kind,omitempty"`
	// Limit is a semaphore's limit, passed to the SDK as is (0 included:
	// the SDK must refuse it).
	Limit int `json:"limit,omitempty"`
	// Permits, when set, is passed to the SDK's permits setter as is; nil
	// leaves the SDK's default (1).
	Permits *int `json:"permits,omitempty"`
	// Mode is an rwlock grant's: ModeShared (read) or ModeExclusive
	// (write).
	Mode string `json:"mode,omitempty"`
}

// LockManyArgs takes a guard on each key at once (lock_many): one attempt
// each (wait 0), all started together, so the guards' renewals fall due
// together.
type LockManyArgs struct {
	Client string   `json:"client"`
	Keys   []string `json:"keys"`
	TTLMs  int64    `json:"ttl_ms,omitempty"`
}

// LockManyResult answers lock_many: one guard per key, in the keys' order.
type LockManyResult struct {
	Guards []LockResult `json:"guards"`
}

// RunIfFreeArgs runs a function under a lock only if the key is free (run_if_free).
type RunIfFreeArgs struct {
	Client string `json:"client"`
	Key    string `json:"key"`
	Run    string `json:"run"`
	TTLMs  int64  `json:"ttl_ms,omitempty"`
	WaitMs int64  `json:"wait_ms,omitempty"`
	Holder string `json:"holder,omitempty"`
}

// RunIfFreeResult says whether the function ran, and what it returned.
type RunIfFreeResult struct {
	Ran   bool   `json:"ran"`
	Value string `json:"value,omitempty"`
}

// RunFinishArgs lets a run_if_free function return (run_finish).
type RunFinishArgs struct {
	Run string `json:"run"`
}

// CancelArgs names the command to cancel (cancel).
type CancelArgs struct {
	ID uint64 `json:"id"`
}

// ListArgs lists the held locks under a prefix (list).
type ListArgs struct {
	Client string `json:"client"`
	Prefix string `json:"prefix"`
}

// ListResult is every held lock under the prefix.
type ListResult struct {
	Locks []LockState `json:"locks"`
}

// ServerInfoResult is what server_info answers.
type ServerInfoResult struct {
	Version string `json:"version"`
	Backend string `json:"backend"`
}

// LockResult is the guard lock made, with its fencing token and stamp.
type LockResult struct {
	Guard        string `json:"guard"`
	FencingToken U64    `json:"fencing_token"`
	Stamp        Stamp  `json:"stamp"`
	// What the guard's accessors say it holds (kind, limit, permits,
	// mode); an adapter that claims neither semaphore nor rwlock may leave
	// them out.
	Kind    string `json:"kind,omitempty"`
	Limit   int    `json:"limit,omitempty"`
	Permits int    `json:"permits,omitempty"`
	Mode    string `json:"mode,omitempty"`
}

// GuardArgs names a guard (unlock, extend, fencing_token, guard_state);
// TTLMs is extend's new TTL.
type GuardArgs struct {
	Guard string `json:"guard"`
	TTLMs int64  `json:"ttl_ms,omitempty"`
}

// FencingTokenResult answers fencing_token.
type FencingTokenResult struct {
	FencingToken U64 `json:"fencing_token"`
}

// GuardStateResult answers guard_state: the state and, once lost, why.
type GuardStateResult struct {
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
	// RemainingMs is the time left to the guard's local expiry.
	RemainingMs *float64 `json:"remaining_ms,omitempty"`
	// Renewals counts the guard's successful renewals.
	Renewals *int `json:"renewals,omitempty"`
}

// ValidateWriteResult is what validate_write answers.
type ValidateWriteResult struct {
	// Watermark is the new watermark the SDK returned.
	Watermark *U64 `json:"watermark,omitempty"`
}

// ValidateWriteArgs asks validate_write whether a write with Token passes
// a resource at Watermark.
type ValidateWriteArgs struct {
	Token     U64 `json:"token"`
	Watermark U64 `json:"watermark"`
}

// ClientArgs names a client (clock_now, close).
type ClientArgs struct {
	Client string `json:"client,omitempty"`
}

// ClockResult is a client's HLC stamp (clock_now, clock_update).
type ClockResult struct {
	Stamp Stamp `json:"stamp"`
}

// ClockUpdateArgs merges Stamp into a client's clock (clock_update).
type ClockUpdateArgs struct {
	Client string `json:"client"`
	Stamp  Stamp  `json:"stamp"`
}

// InspectArgs asks a client who holds Key (inspect).
type InspectArgs struct {
	Client string `json:"client"`
	Key    string `json:"key"`
}

// LockState is a held lock as inspect reports it.
type LockState struct {
	Key          string `json:"key,omitempty"`
	FencingToken U64    `json:"fencing_token"`
	Holder       string `json:"holder"`
	Stamp        Stamp  `json:"stamp"`
	Waiters      uint32 `json:"waiters"`
	// The key's kind and limit and the permits its holders hold, and every
	// lease held on it (adapters claiming semaphore or rwlock).
	Kind         string   `json:"kind,omitempty"`
	Limit        int      `json:"limit,omitempty"`
	PermitsInUse int      `json:"permits_in_use,omitempty"`
	Holders      []Holder `json:"holders,omitempty"`
}

// Holder is one lease held on a key (LockState.Holders).
type Holder struct {
	FencingToken U64    `json:"fencing_token"`
	Holder       string `json:"holder"`
	Permits      int    `json:"permits"`
	Mode         string `json:"mode"`
	Stamp        Stamp  `json:"stamp"`
	// Value is an election leader's value.
	Value string `json:"value,omitempty"`
}

// InspectResult answers inspect.
type InspectResult struct {
	Held  bool       `json:"held"`
	State *LockState `json:"state,omitempty"`
}

// CampaignArgs campaigns for an election's leadership (campaign): the
// lock command's TTL, wait and holder arguments, and the value.
type CampaignArgs struct {
	Client    string `json:"client"`
	Key       string `json:"key"`
	Value     string `json:"value"`
	TTLMs     int64  `json:"ttl_ms,omitempty"`
	WaitMs    int64  `json:"wait_ms,omitempty"`
	WaitUnset bool   `json:"wait_unset,omitempty"`
	Holder    string `json:"holder,omitempty"`
}

// CampaignResult is the leadership campaign won: a lock result (its guard
// works with every guard command) with the term and value the
// leadership's own accessors report.
type CampaignResult struct {
	LockResult
	Term  U64    `json:"term"`
	Value string `json:"value"`
}

// ProclaimArgs replaces a leadership's value (proclaim).
type ProclaimArgs struct {
	Guard string `json:"guard"`
	Value string `json:"value"`
}

// LeaderArgs names an election (leader).
type LeaderArgs struct {
	Client string `json:"client"`
	Key    string `json:"key"`
}

// Leader is an election's leader as the SDK reports it.
type Leader struct {
	Key    string `json:"key"`
	Term   U64    `json:"term"`
	Holder string `json:"holder"`
	Value  string `json:"value"`
	Stamp  Stamp  `json:"stamp"`
}

// LeaderResult answers leader: nil when nobody leads.
type LeaderResult struct {
	Leader *Leader `json:"leader,omitempty"`
}

// ObserveArgs starts observing an election (observe); Observe is the id
// its observed events carry and observe_stop names.
type ObserveArgs struct {
	Client  string `json:"client"`
	Key     string `json:"key"`
	Observe string `json:"observe"`
}

// ObserveResult answers observe once it was stopped: how many messages
// the SDK's stream yielded.
type ObserveResult struct {
	Messages int `json:"messages"`
}

// ObserveStopArgs ends an observe (observe_stop).
type ObserveStopArgs struct {
	Observe string `json:"observe"`
}

// Empty is the result of commands that answer nothing but success.
type Empty struct{}
