package wire

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/core/backend"
	backendv1 "github.com/holdfast/holdfast/proto/holdfast/backend/v1"
)

// Batches (backend.BatchBackend): each item travels as its single call's
// message, each outcome as its single call's response or an ItemError.

// toItemError encodes one item's error (nil for none).
func toItemError(err error) *backendv1.ItemError {
	if err == nil {
		return nil
	}
	code := backendv1.ItemErrorCode_ITEM_ERROR_CODE_UNAVAILABLE
	switch {
	case errors.Is(err, backend.ErrInvalidArgument):
		code = backendv1.ItemErrorCode_ITEM_ERROR_CODE_INVALID_ARGUMENT
	case errors.Is(err, backend.ErrRequestConflict):
		code = backendv1.ItemErrorCode_ITEM_ERROR_CODE_REQUEST_CONFLICT
	case errors.Is(err, backend.ErrFailedPrecondition):
		code = backendv1.ItemErrorCode_ITEM_ERROR_CODE_FAILED_PRECONDITION
	}
	return &backendv1.ItemError{Code: code, Message: err.Error()}
}

// fromItemError decodes one item's error, as FromStatus would the single
// call's: invalid_argument, a request conflict and failed_precondition with
// the plugin's message, anything else unavailable.
func fromItemError(p *backendv1.ItemError, plugin string) error {
	switch p.GetCode() {
	case backendv1.ItemErrorCode_ITEM_ERROR_CODE_INVALID_ARGUMENT:
		return &remoteError{sentinel: backend.ErrInvalidArgument, msg: p.GetMessage()}
	case backendv1.ItemErrorCode_ITEM_ERROR_CODE_REQUEST_CONFLICT:
		return &remoteError{sentinel: backend.ErrRequestConflict, msg: p.GetMessage()}
	case backendv1.ItemErrorCode_ITEM_ERROR_CODE_FAILED_PRECONDITION:
		return &remoteError{sentinel: backend.ErrFailedPrecondition, msg: p.GetMessage()}
	}
	return &remoteError{sentinel: backend.ErrUnavailable, msg: fmt.Sprintf("plugin %s: %s", plugin, p.GetMessage())}
}

// ToAcquireBatchRequest encodes an AcquireBatch.
func ToAcquireBatchRequest(reqs []backend.AcquireRequest) *backendv1.AcquireBatchRequest {
	out := &backendv1.AcquireBatchRequest{Items: make([]*backendv1.AcquireRequest, len(reqs))}
	for i, r := range reqs {
		out.Items[i] = ToAcquireRequest(r)
	}
	return out
}

// FromAcquireBatchRequest decodes an AcquireBatch.
func FromAcquireBatchRequest(p *backendv1.AcquireBatchRequest) []backend.AcquireRequest {
	out := make([]backend.AcquireRequest, len(p.GetItems()))
	for i, r := range p.GetItems() {
		out[i] = FromAcquireRequest(r)
	}
	return out
}

// ToAcquireBatchResponse encodes an AcquireBatch's outcomes.
func ToAcquireBatchResponse(outs []backend.Outcome[backend.AcquireResult]) *backendv1.AcquireBatchResponse {
	resp := &backendv1.AcquireBatchResponse{Items: make([]*backendv1.AcquireOutcome, len(outs))}
	for i, o := range outs {
		item := &backendv1.AcquireOutcome{Error: toItemError(o.Err)}
		if o.Err == nil {
			item.Result = ToAcquireResponse(o.Value)
		}
		resp.Items[i] = item
	}
	return resp
}

// FromAcquireBatchResponse decodes and checks the answer to reqs: one
// outcome per request, each checked as FromAcquireResponse checks the
// single answer.
func FromAcquireBatchResponse(resp *backendv1.AcquireBatchResponse, reqs []backend.AcquireRequest, plugin string) ([]backend.Outcome[backend.AcquireResult], error) {
	if err := checkCount("AcquireBatch", len(resp.GetItems()), len(reqs)); err != nil {
		return nil, err
	}
	out := make([]backend.Outcome[backend.AcquireResult], len(reqs))
	for i, item := range resp.GetItems() {
		if item.GetError() != nil {
			out[i].Err = fromItemError(item.GetError(), plugin)
			continue
		}
		if item.GetResult() == nil {
			return nil, errMalformed("AcquireBatch", "item %d has neither a result nor an error", i)
		}
		res, err := FromAcquireResponse(item.GetResult(), reqs[i].Key)
		if err != nil {
			return nil, err
		}
		out[i].Value = res
	}
	return out, nil
}

// ToReleaseBatchRequest encodes a ReleaseBatch.
func ToReleaseBatchRequest(reqs []backend.ReleaseRequest) *backendv1.ReleaseBatchRequest {
	out := &backendv1.ReleaseBatchRequest{Items: make([]*backendv1.ReleaseRequest, len(reqs))}
	for i, r := range reqs {
		out.Items[i] = ToReleaseRequest(r)
	}
	return out
}

// FromReleaseBatchRequest decodes a ReleaseBatch.
func FromReleaseBatchRequest(p *backendv1.ReleaseBatchRequest) []backend.ReleaseRequest {
	out := make([]backend.ReleaseRequest, len(p.GetItems()))
	for i, r := range p.GetItems() {
		out[i] = FromReleaseRequest(r)
	}
	return out
}

// ToReleaseBatchResponse encodes a ReleaseBatch's outcomes.
func ToReleaseBatchResponse(outs []backend.Outcome[bool]) *backendv1.ReleaseBatchResponse {
	resp := &backendv1.ReleaseBatchResponse{Items: make([]*backendv1.ReleaseOutcome, len(outs))}
	for i, o := range outs {
		resp.Items[i] = &backendv1.ReleaseOutcome{Released: o.Err == nil && o.Value, Error: toItemError(o.Err)}
	}
	return resp
}

// FromReleaseBatchResponse decodes and checks the answer to reqs.
func FromReleaseBatchResponse(resp *backendv1.ReleaseBatchResponse, reqs []backend.ReleaseRequest, plugin string) ([]backend.Outcome[bool], error) {
	if err := checkCount("ReleaseBatch", len(resp.GetItems()), len(reqs)); err != nil {
		return nil, err
	}
	out := make([]backend.Outcome[bool], len(reqs))
	for i, item := range resp.GetItems() {
		if item.GetError() != nil {
			out[i].Err = fromItemError(item.GetError(), plugin)
			continue
		}
		out[i].Value = item.GetReleased()
	}
	return out, nil
}

// ToExtendBatchRequest encodes an ExtendBatch. Its messages are allocated
// together, and items with the stamp of the item before share its message:
// a watchdog's batch renews hundreds of leases.
func ToExtendBatchRequest(reqs []backend.ExtendRequest) *backendv1.ExtendBatchRequest {
	out := &backendv1.ExtendBatchRequest{Items: make([]*backendv1.ExtendRequest, len(reqs))}
	items := make([]backendv1.ExtendRequest, len(reqs))
	ttls := make([]durationpb.Duration, len(reqs))
	var stamp *backendv1.Stamp
	var idents []backendv1.RequestIdentity // a renewal's items carry one each
	for i, r := range reqs {
		p := &items[i]
		p.Key, p.OwnerToken = r.Key, r.OwnerToken
		ttls[i].Seconds, ttls[i].Nanos = durationParts(r.TTL)
		p.Ttl = &ttls[i]
		if i == 0 || r.Stamp != reqs[i-1].Stamp {
			stamp = ToStamp(r.Stamp)
		}
		p.Stamp = stamp
		if r.Request != (backend.Request{}) {
			if idents == nil {
				idents = make([]backendv1.RequestIdentity, len(reqs))
			}
			idents[i].Id, idents[i].Fingerprint = r.Request.ID, r.Request.Fingerprint
			p.Request = &idents[i]
		}
		out.Items[i] = p
	}
	return out
}

// FromExtendBatchRequest decodes an ExtendBatch.
func FromExtendBatchRequest(p *backendv1.ExtendBatchRequest) []backend.ExtendRequest {
	out := make([]backend.ExtendRequest, len(p.GetItems()))
	for i, r := range p.GetItems() {
		out[i] = FromExtendRequest(r)
	}
	return out
}

// ToExtendBatchResponse encodes an ExtendBatch's outcomes, their messages
// allocated together.
func ToExtendBatchResponse(outs []backend.Outcome[backend.ExtendResult]) *backendv1.ExtendBatchResponse {
	resp := &backendv1.ExtendBatchResponse{Items: make([]*backendv1.ExtendOutcome, len(outs))}
	items := make([]backendv1.ExtendOutcome, len(outs))
	results := make([]backendv1.ExtendResponse, len(outs))
	var records []recordParts
	for i, o := range outs {
		item := &items[i]
		resp.Items[i] = item
		if o.Err != nil {
			item.Error = toItemError(o.Err)
			continue
		}
		res := &results[i]
		item.Result = res
		if res.Extended = o.Value.Extended; res.Extended {
			if records == nil {
				records = make([]recordParts, len(outs))
			}
			res.Record = records[i].fill(o.Value.Record)
		}
	}
	return resp
}

// FromExtendBatchResponse decodes and checks the answer to reqs.
func FromExtendBatchResponse(resp *backendv1.ExtendBatchResponse, reqs []backend.ExtendRequest, plugin string) ([]backend.Outcome[backend.ExtendResult], error) {
	if err := checkCount("ExtendBatch", len(resp.GetItems()), len(reqs)); err != nil {
		return nil, err
	}
	out := make([]backend.Outcome[backend.ExtendResult], len(reqs))
	for i, item := range resp.GetItems() {
		if item.GetError() != nil {
			out[i].Err = fromItemError(item.GetError(), plugin)
			continue
		}
		if item.GetResult() == nil {
			return nil, errMalformed("ExtendBatch", "item %d has neither a result nor an error", i)
		}
		res, err := FromExtendResponse(item.GetResult(), reqs[i].Key)
		if err != nil {
			return nil, err
		}
		out[i].Value = res
	}
	return out, nil
}

func checkCount(op string, got, want int) error {
	if got != want {
		return errMalformed(op, "%d outcomes for %d requests", got, want)
	}
	return nil
}
