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
)

// EventLeaseLost is the event an adapter emits when a guard is poisoned.
const EventLeaseLost = "lease_lost"

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
}

// Error is a failed command's answer.
type Error struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return fmt.Sprintf("adapter: %s: %s", e.Kind, e.Message) }

// Is lets errors.Is(err, &Error{Kind: k}) match on the kind alone.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Kind == e.Kind && (t.Message == "" || t.Message == e.Message)
}

// KindOf is the error kind of err ("" for nil, KindInternal for an error
// that is not an adapter's answer).
func KindOf(err error) string {
	if err == nil {
		return ""
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Kind
	}
	return KindInternal
}

// U64 is a uint64 carried as a decimal string, so that JavaScript adapters
// do not round it.
type U64 uint64

// MarshalJSON writes the decimal string.
func (u U64) MarshalJSON() ([]byte, error) { return json.Marshal(strconv.FormatUint(uint64(u), 10)) }

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
}

// ConnectArgs asks for a client of the server at Addr (connect).
type ConnectArgs struct {
	Addr     string `json:"addr"`
	Protocol string `json:"protocol,omitempty"`
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
	TTLMs  int64  `json:"ttl_ms"`
	WaitMs int64  `json:"wait_ms,omitempty"`
	Holder string `json:"holder,omitempty"`
	Try    bool   `json:"try,omitempty"`
}

// LockResult is the guard lock made, with its fencing token and stamp.
type LockResult struct {
	Guard        string `json:"guard"`
	FencingToken U64    `json:"fencing_token"`
	Stamp        Stamp  `json:"stamp"`
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
	FencingToken U64    `json:"fencing_token"`
	Holder       string `json:"holder"`
	Stamp        Stamp  `json:"stamp"`
	Waiters      uint32 `json:"waiters"`
}

// InspectResult answers inspect.
type InspectResult struct {
	Held  bool       `json:"held"`
	State *LockState `json:"state,omitempty"`
}

// Empty is the result of commands that answer nothing but success.
type Empty struct{}
