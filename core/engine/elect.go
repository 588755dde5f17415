package engine

import (
	"context"

	"github.com/holdfast/holdfast/core/backend"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// Leader election is a fourth kind over the same model, not a primitive
// of its own: an election key has limit 1 and every grant 1 permit, so the
// stores' one grant rule decides who leads, the grant's fencing token is
// the term (strictly increasing per key, as every fencing token), waiting
// campaigners queue like waiting lockers, resigning is Release and staying
// leader is Extend (the SDKs' watchdog, unchanged). What an election adds
// is a value kept with the grant and Proclaim, which replaces that value
// only while the caller's token still holds the grant, in one atomic step
// of the store: a compare-and-set on the owner token, like Extend, so a
// leader that lost its term can never overwrite the next leader's value.
// Observe (the server's) is Inspect followed by Watch of the key.

// Proclaim replaces the value of req.Key's leader if req.OwnerToken holds
// the key's leadership now; otherwise it answers proclaimed=false and
// changes nothing. The term, the TTL and the grant's stamp stay as they
// are.
func (e *Engine) Proclaim(ctx context.Context, req *lockv1.ProclaimRequest) (*lockv1.ProclaimResponse, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	if err := checkKey("key", req.GetKey()); err != nil {
		return nil, err
	}
	token := req.GetOwnerToken()
	if err := checkToken(token); err != nil {
		return nil, err
	}
	if err := checkValue(backend.KindElection, req.GetValue()); err != nil {
		return nil, err
	}
	eb, err := e.elections()
	if err != nil {
		return nil, err
	}
	if err := e.merge(req.GetClientStamp()); err != nil {
		return nil, err
	}
	res, err := eb.Proclaim(ctx, backend.ProclaimRequest{Key: req.GetKey(), OwnerToken: token, Value: req.GetValue(), Stamp: e.clock.Now()})
	if err != nil {
		return nil, backendErr(ctx, "proclaim", err)
	}
	e.cfg.Observer.ProclaimDone(res.Proclaimed)
	resp := &lockv1.ProclaimResponse{Proclaimed: res.Proclaimed}
	if res.Proclaimed {
		e.clock.Observe(res.Record.Stamp)
		l := lease(singleKey(req.GetKey()), []backend.Record{res.Record}, token, 0)
		l.Ttl = nil // Proclaim renews nothing: the lease's length is its Acquire's or last Extend's
		resp.Lease = l
	}
	resp.ServerStamp = e.stamp()
	return resp, nil
}

// elections is the backend's Proclaim, or unimplemented naming the backend
// when it keeps no election keys.
func (e *Engine) elections() (backend.ElectionBackend, error) {
	eb, ok := e.b.(backend.ElectionBackend)
	if !ok || !e.Info().Keeps(backend.KindElection) {
		return nil, newErr(ErrUnimplemented, "kind: the backend %q keeps no election keys (BackendInfo.kinds)", e.Info().Name)
	}
	return eb, nil
}
