// Package wire converts between the plain types of core/backend and the
// messages of holdfast.backend.v1, in both directions: the plugin side
// (backendserver) decodes the host's requests and encodes its backend's
// answers; the host side (pluginhost) encodes requests and decodes, and
// checks, the plugin's answers. Stamps, events and errors are converted here
// and nowhere else, so both ends of the plugin protocol agree by
// construction.
package wire

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/proto/hlc"
	backendv1 "github.com/holdfast/holdfast/proto/holdfast/backend/v1"
)

// ToStamp encodes an HLC stamp; the zero stamp is left unset.
func ToStamp(t hlc.Timestamp) *backendv1.Stamp {
	if t.IsZero() {
		return nil
	}
	return &backendv1.Stamp{WallTimeNs: t.WallTime, Logical: t.Logical}
}

// FromStamp decodes an HLC stamp; unset is the zero stamp.
func FromStamp(p *backendv1.Stamp) hlc.Timestamp {
	if p == nil {
		return hlc.Timestamp{}
	}
	return hlc.Timestamp{WallTime: p.GetWallTimeNs(), Logical: p.GetLogical()}
}

func toEventType(t backend.EventType) backendv1.EventType {
	switch t {
	case backend.EventSynced:
		return backendv1.EventType_EVENT_TYPE_SYNCED
	case backend.EventAcquired:
		return backendv1.EventType_EVENT_TYPE_ACQUIRED
	case backend.EventReleased:
		return backendv1.EventType_EVENT_TYPE_RELEASED
	case backend.EventExpired:
		return backendv1.EventType_EVENT_TYPE_EXPIRED
	case backend.EventProclaimed:
		return backendv1.EventType_EVENT_TYPE_PROCLAIMED
	}
	return backendv1.EventType_EVENT_TYPE_UNSPECIFIED
}

// fromEventType is 0 for a type this side does not know.
func fromEventType(t backendv1.EventType) backend.EventType {
	switch t {
	case backendv1.EventType_EVENT_TYPE_SYNCED:
		return backend.EventSynced
	case backendv1.EventType_EVENT_TYPE_ACQUIRED:
		return backend.EventAcquired
	case backendv1.EventType_EVENT_TYPE_RELEASED:
		return backend.EventReleased
	case backendv1.EventType_EVENT_TYPE_EXPIRED:
		return backend.EventExpired
	case backendv1.EventType_EVENT_TYPE_PROCLAIMED:
		return backend.EventProclaimed
	}
	return 0
}

// ToKind encodes a kind; a mutex is left unset (as every record and request
// before kinds), so a mutex's messages are what they always were.
func ToKind(k backend.Kind) backendv1.Kind {
	switch k {
	case backend.KindSemaphore:
		return backendv1.Kind_KIND_SEMAPHORE
	case backend.KindRWLock:
		return backendv1.Kind_KIND_RWLOCK
	case backend.KindElection:
		return backendv1.Kind_KIND_ELECTION
	}
	return backendv1.Kind_KIND_UNSPECIFIED
}

// FromKind decodes a kind: unset and KIND_MUTEX are a mutex; ok is false for
// a kind this side does not know.
func FromKind(k backendv1.Kind) (kind backend.Kind, ok bool) {
	switch k {
	case backendv1.Kind_KIND_UNSPECIFIED, backendv1.Kind_KIND_MUTEX:
		return backend.KindMutex, true
	case backendv1.Kind_KIND_SEMAPHORE:
		return backend.KindSemaphore, true
	case backendv1.Kind_KIND_RWLOCK:
		return backend.KindRWLock, true
	case backendv1.Kind_KIND_ELECTION:
		return backend.KindElection, true
	}
	return 0, false
}

// maxWireKeys bounds the keys of one set call either side accepts: far above
// what the engine asks for, so a plugin cannot make the host allocate for
// more.
const maxWireKeys = 1024

// ToStatus maps an error from a Backend to the gRPC status FromStatus maps
// back: ErrInvalidArgument to InvalidArgument, ErrRequestConflict to
// AlreadyExists, ErrFailedPrecondition to FailedPrecondition, context errors
// to Canceled and DeadlineExceeded, everything else (ErrUnavailable
// included) to Unavailable. The message is the error's text.
func ToStatus(err error) error {
	var code codes.Code
	switch {
	case errors.Is(err, backend.ErrInvalidArgument):
		code = codes.InvalidArgument
	case errors.Is(err, backend.ErrRequestConflict):
		code = codes.AlreadyExists
	case errors.Is(err, backend.ErrFailedPrecondition):
		code = codes.FailedPrecondition
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	default:
		code = codes.Unavailable
	}
	return status.Error(code, err.Error())
}

// FromStatus maps a plugin's error status to the sentinel its code stands
// for: InvalidArgument, AlreadyExists and FailedPrecondition to
// backend.ErrInvalidArgument, ErrRequestConflict and ErrFailedPrecondition,
// with the plugin's message as it wrote it (it names the field and the
// limit); anything else
// to backend.ErrUnavailable, with the message after "plugin NAME: ". The
// caller decides first what its own context and deadlines explain.
func FromStatus(st *status.Status, plugin string) error {
	switch st.Code() {
	case codes.InvalidArgument:
		return &remoteError{sentinel: backend.ErrInvalidArgument, msg: st.Message()}
	case codes.AlreadyExists:
		return &remoteError{sentinel: backend.ErrRequestConflict, msg: st.Message()}
	case codes.FailedPrecondition:
		return &remoteError{sentinel: backend.ErrFailedPrecondition, msg: st.Message()}
	}
	return &remoteError{sentinel: backend.ErrUnavailable, msg: fmt.Sprintf("plugin %s: %s", plugin, st.Message())}
}

// remoteError is an error the plugin returned: its message as the plugin
// wrote it, and the sentinel its gRPC code maps to.
type remoteError struct {
	sentinel error
	msg      string
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.sentinel }
