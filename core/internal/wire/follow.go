package wire

import (
	"github.com/holdfast/holdfast/core/backend"
	backendv1 "github.com/holdfast/holdfast/proto/holdfast/backend/v1"
)

// Follow: the host sends backend.FollowChanges, each with a seq when it
// waits for its Applied; the plugin answers events and, for a seq, the
// ack that the change is in force. Applied itself is a callback and does
// not cross the wire: the seq stands for it.

// ToFollowRequest encodes a change; seq 0 asks for no ack.
func ToFollowRequest(c backend.FollowChange, seq uint64) *backendv1.FollowRequest {
	return &backendv1.FollowRequest{
		Keys:         c.Keys,
		Prefixes:     c.Prefixes,
		DropKeys:     c.DropKeys,
		DropPrefixes: c.DropPrefixes,
		Seq:          seq,
	}
}

// FromFollowRequest decodes a change (its Applied unset) and the seq to
// ack once it is in force (0: none).
func FromFollowRequest(p *backendv1.FollowRequest) (backend.FollowChange, uint64) {
	return backend.FollowChange{
		Keys:         p.GetKeys(),
		Prefixes:     p.GetPrefixes(),
		DropKeys:     p.GetDropKeys(),
		DropPrefixes: p.GetDropPrefixes(),
	}, p.GetSeq()
}

// ToFollowEvent encodes an event of a Follow.
func ToFollowEvent(ev backend.Event) *backendv1.FollowResponse {
	return &backendv1.FollowResponse{Kind: &backendv1.FollowResponse_Event{Event: ToWatchResponse(ev)}}
}

// ToFollowApplied encodes the ack of the change numbered seq.
func ToFollowApplied(seq uint64) *backendv1.FollowResponse {
	return &backendv1.FollowResponse{Kind: &backendv1.FollowResponse_Applied{Applied: seq}}
}

// FromFollowResponse decodes one message of a Follow: an event (applied
// 0), or the ack of the change numbered applied. A message with neither, or
// an ack of seq 0 (which asks for none), is malformed.
func FromFollowResponse(resp *backendv1.FollowResponse) (ev backend.Event, applied uint64, err error) {
	switch k := resp.GetKind().(type) {
	case *backendv1.FollowResponse_Event:
		if k.Event == nil {
			return backend.Event{}, 0, errMalformed("Follow", "an event message without its event")
		}
		ev, err := fromEvent("Follow", k.Event, "")
		return ev, 0, err
	case *backendv1.FollowResponse_Applied:
		if k.Applied == 0 {
			return backend.Event{}, 0, errMalformed("Follow", "an ack of seq 0")
		}
		return backend.Event{}, k.Applied, nil
	}
	return backend.Event{}, 0, errMalformed("Follow", "neither an event nor an ack")
}
