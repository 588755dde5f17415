package holdfast

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"maps"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/proto/hlc"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
	"github.com/holdfast/holdfast/proto/holdfast/lock/v1/lockv1connect"
)

// fakePeer is a scripted network peer for the SDK's failure paths: a
// server that can be told to reject renewals, to answer `unavailable`, or to
// hang. It is not a lock backend (it grants every Acquire it is told to) and
// no test uses it for lock semantics: those run against the real server in
// integration_test.go.
type fakePeer struct {
	lockv1connect.UnimplementedLockServiceHandler

	clock  *hlc.Clock
	unhang chan struct{} // closed at cleanup: hung handlers return

	mu          sync.Mutex
	extendMode  peerMode
	releaseMode peerMode
	acquireMode peerMode
	// failN: in modeFailN, answer `unavailable` this many more times, then
	// behave as modeOK.
	failN        int
	acquireDelay time.Duration
	fencing      uint64
	acquireRecv  []time.Time
	extendRecv   []time.Time // every Extend received
	extendOK     []time.Time // Extends answered extended=true
	extendTTLs   []time.Duration
	releases     int
	headers      []http.Header
	clientStamps []hlc.Timestamp
	current      *lockv1.LockState
	errCode      connect.Code

	// ExtendBatch: served only when batch is set (else unimplemented, as an
	// older server answers); batchMode applies to the whole call, rejectKeys
	// answer extended=false and itemErrKeys an item error (while their count
	// is above zero; -1: always).
	batch       bool
	batchMode   peerMode
	batchSizes  []int
	rejectKeys  map[string]bool
	itemErrKeys map[string]int
	// renewIDs are the request ids of every Extend and ExtendBatch item
	// received, per key, in order.
	renewIDs map[string][]string
}

type peerMode int

const (
	modeOK peerMode = iota
	modeReject
	modeHang
	modeUnavailable
	modeFailN
	modeError // answer with errCode
	// modeFailNThenReject: like modeFailN, then answer as modeReject (a
	// release whose first attempts were lost in transit).
	modeFailNThenReject
)

func newFakePeer(t *testing.T) (*fakePeer, string) {
	t.Helper()
	return newFakePeerServer(t, false)
}

// newFakePeerServer serves the peer; h2c makes it speak HTTP/2 without TLS
// too, for the gRPC protocol.
func newFakePeerServer(t *testing.T, h2c bool) (*fakePeer, string) {
	t.Helper()
	p := &fakePeer{clock: hlc.NewClock(nil, -1), unhang: make(chan struct{})}
	mux := http.NewServeMux()
	mux.Handle(lockv1connect.NewLockServiceHandler(p))
	ts := httptest.NewUnstartedServer(mux)
	if h2c {
		protos := new(http.Protocols)
		protos.SetHTTP1(true)
		protos.SetUnencryptedHTTP2(true)
		ts.Config.Protocols = protos
	}
	ts.Start()
	t.Cleanup(func() {
		close(p.unhang)
		ts.Close()
	})
	return p, ts.URL
}

func (p *fakePeer) set(f func(p *fakePeer)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(p)
}

func (p *fakePeer) snapshot() fakePeer {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fakePeer{
		acquireRecv: append([]time.Time(nil), p.acquireRecv...),
		extendRecv:  append([]time.Time(nil), p.extendRecv...),
		extendOK:    append([]time.Time(nil), p.extendOK...),
		extendTTLs:  append([]time.Duration(nil), p.extendTTLs...),
		releases:    p.releases,
		batchSizes:  append([]int(nil), p.batchSizes...),
		renewIDs:    maps.Clone(p.renewIDs),
	}
}

// behave applies mode for one call; it returns (handled, err): when handled
// the caller returns err (possibly nil after a hang ended by the client).
func (p *fakePeer) behave(ctx context.Context, mode peerMode) (bool, error) {
	switch mode {
	case modeHang:
		select {
		case <-ctx.Done():
			return true, ctx.Err()
		case <-p.unhang:
			return true, connect.NewError(connect.CodeUnavailable, errString("shutting down"))
		}
	case modeUnavailable:
		return true, connect.NewError(connect.CodeUnavailable, errString("backend restarting"))
	case modeFailN, modeFailNThenReject:
		p.mu.Lock()
		fail := p.failN > 0
		if fail {
			p.failN--
		}
		p.mu.Unlock()
		if fail {
			return true, connect.NewError(connect.CodeUnavailable, errString("backend restarting"))
		}
	case modeError:
		p.mu.Lock()
		code := p.errCode
		p.mu.Unlock()
		return true, connect.NewError(code, errString("key: scripted failure"))
	}
	return false, nil
}

type errString string

func (e errString) Error() string { return string(e) }

func (p *fakePeer) record(h http.Header, s *lockv1.HlcTimestamp) {
	p.headers = append(p.headers, h.Clone())
	p.clientStamps = append(p.clientStamps, hlc.FromProto(s))
}

func token() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (p *fakePeer) Acquire(ctx context.Context, req *lockv1.AcquireRequest) (*lockv1.AcquireResponse, error) {
	p.mu.Lock()
	p.acquireRecv = append(p.acquireRecv, time.Now())
	p.record(callHeader(ctx), req.GetClientStamp())
	mode, delay, current := p.acquireMode, p.acquireDelay, p.current
	p.mu.Unlock()
	if handled, err := p.behave(ctx, mode); handled {
		return nil, err
	}
	if delay > 0 {
		// The peer's answer to a long server-side wait comes late.
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if mode == modeReject {
		return &lockv1.AcquireResponse{Current: current, ServerStamp: p.clock.Now().ToProto()}, nil
	}
	p.mu.Lock()
	p.fencing++
	f := p.fencing
	p.mu.Unlock()
	stamp := p.clock.Now().ToProto()
	return &lockv1.AcquireResponse{
		Acquired: true,
		Lease: &lockv1.Lease{
			Key: req.GetKey(), OwnerToken: token(), FencingToken: f,
			Ttl: req.GetTtl(), Stamp: stamp,
		},
		ServerStamp: stamp,
	}, nil
}

func (p *fakePeer) Extend(ctx context.Context, req *lockv1.ExtendRequest) (*lockv1.ExtendResponse, error) {
	p.mu.Lock()
	p.extendRecv = append(p.extendRecv, time.Now())
	p.renewed(req.GetKey(), req.GetRequestId())
	p.record(callHeader(ctx), req.GetClientStamp())
	mode := p.extendMode
	p.mu.Unlock()
	if handled, err := p.behave(ctx, mode); handled {
		return nil, err
	}
	if mode == modeReject {
		return &lockv1.ExtendResponse{ServerStamp: p.clock.Now().ToProto()}, nil
	}
	p.mu.Lock()
	p.extendOK = append(p.extendOK, time.Now())
	p.extendTTLs = append(p.extendTTLs, req.GetTtl().AsDuration())
	p.mu.Unlock()
	return &lockv1.ExtendResponse{
		Extended:    true,
		Lease:       &lockv1.Lease{Key: req.GetKey(), OwnerToken: req.GetOwnerToken(), Ttl: req.GetTtl()},
		ServerStamp: p.clock.Now().ToProto(),
	}, nil
}

func (p *fakePeer) ExtendBatch(ctx context.Context, req *lockv1.ExtendBatchRequest) (*lockv1.ExtendBatchResponse, error) {
	p.mu.Lock()
	if !p.batch {
		p.mu.Unlock()
		return nil, connect.NewError(connect.CodeUnimplemented, errString("an older server"))
	}
	p.batchSizes = append(p.batchSizes, len(req.GetItems()))
	for _, it := range req.GetItems() {
		p.renewed(it.GetKey(), it.GetRequestId())
	}
	p.record(callHeader(ctx), req.GetClientStamp())
	mode := p.batchMode
	p.mu.Unlock()
	if handled, err := p.behave(ctx, mode); handled {
		return nil, err
	}
	resp := &lockv1.ExtendBatchResponse{ServerStamp: p.clock.Now().ToProto()}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, it := range req.GetItems() {
		var r *lockv1.ExtendBatchResult
		switch n := p.itemErrKeys[it.GetKey()]; {
		case p.rejectKeys[it.GetKey()]:
			r = &lockv1.ExtendBatchResult{}
		case n != 0:
			if n > 0 {
				p.itemErrKeys[it.GetKey()] = n - 1
			}
			r = &lockv1.ExtendBatchResult{Error: &lockv1.ItemError{Code: "unavailable", Message: "that part of the store is down"}}
		default:
			p.extendOK = append(p.extendOK, time.Now())
			r = &lockv1.ExtendBatchResult{Extended: true, Lease: &lockv1.Lease{Key: it.GetKey(), OwnerToken: it.GetOwnerToken(), Ttl: it.GetTtl()}}
		}
		resp.Results = append(resp.Results, r)
	}
	return resp, nil
}

// renewed records a renewal's request id. p.mu must be held.
func (p *fakePeer) renewed(key, id string) {
	if p.renewIDs == nil {
		p.renewIDs = map[string][]string{}
	}
	p.renewIDs[key] = append(p.renewIDs[key], id)
}

func (p *fakePeer) Release(ctx context.Context, req *lockv1.ReleaseRequest) (*lockv1.ReleaseResponse, error) {
	p.mu.Lock()
	p.releases++
	p.record(callHeader(ctx), req.GetClientStamp())
	mode := p.releaseMode
	p.mu.Unlock()
	if handled, err := p.behave(ctx, mode); handled {
		return nil, err
	}
	released := mode != modeReject && mode != modeFailNThenReject
	return &lockv1.ReleaseResponse{Released: released, ServerStamp: p.clock.Now().ToProto()}, nil
}

func (p *fakePeer) GetServerInfo(ctx context.Context, _ *lockv1.GetServerInfoRequest) (*lockv1.GetServerInfoResponse, error) {
	p.mu.Lock()
	p.record(callHeader(ctx), nil)
	p.mu.Unlock()
	return &lockv1.GetServerInfoResponse{
		Version:        "fake",
		Backend:        &lockv1.BackendInfo{Name: "fake-peer", MinTtl: durationpb.New(time.Millisecond)},
		ServerStamp:    p.clock.Now().ToProto(),
		MaxClockOffset: durationpb.New(hlc.DefaultMaxOffset),
	}, nil
}

// callHeader digs the request headers out of a simple-style handler's ctx.
func callHeader(ctx context.Context) http.Header {
	if ci, ok := connect.CallInfoForHandlerContext(ctx); ok {
		return ci.RequestHeader()
	}
	return http.Header{}
}
