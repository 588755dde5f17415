package holdfast

import (
	"container/heap"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/holdfast/holdfast/proto/hlc"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// The client's watchdog: one renewer for every guard of a Client, so that
// renewing costs RPCs in proportion to the clients, not to the leases
// (docs/sdk-behaviour.md, "The watchdog"). Each guard is due TTL/3 after its
// last successful renewal was sent. Its first renewal comes a little sooner:
// each client draws a phase f in [0,1) once, when it is created, and every
// guard's first renewal is due at sent + TTL/3 - f·TTL/6 (sent: when its
// acquisition was sent), the same shift for all the client's guards. Clients
// whose guards were acquired at the same moments (a fleet started together)
// so spread their renewals over a sixth of the TTL, and stay spread, instead
// of all sending at the same instant and queueing on the server; renewing
// earlier is always safe, as a lease counts from the send time. When the
// renewer sends for a due guard,
// it takes every other guard due within the next TTL/6 along, in one
// ExtendBatch (a single guard goes as a plain Extend), so guards that were
// renewed together stay together. Each guard keeps its own outcome and its
// own loss semantics (promise 5): extended=false poisons that guard alone,
// an item the server could not decide is a failed renewal of that guard,
// retried with the backoff like a failed call. Every renewal carries one
// request id, the same on each of its retries, so a retried renewal is not
// applied twice. A multi-key guard is renewed by its own Extend (an
// ExtendBatch item is one key), at the same moment as the others.

// Bounds of one renewal call.
const (
	// maxBatchItems is the most leases one ExtendBatch carries; the server
	// accepts 1000.
	maxBatchItems = 500
	// renewEarly divides a guard's TTL into how early it may be renewed
	// to go with another guard's renewal: TTL/6 before it is due.
	renewEarly = 6
	// phaseSpread divides a guard's TTL into the span over which the
	// clients' first renewals are spread: a client's phase f brings every
	// first renewal of its guards f·TTL/6 forward.
	phaseSpread = 6
	// busyRetry is when to look again at a guard whose lease RPC slot was
	// taken (an explicit Extend or the release).
	busyRetry = 10 * time.Millisecond
)

// renewer is the client's one watchdog goroutine and the RPCs it sends.
// The goroutine runs while some guard is scheduled and exits when none is
// (start again by the next add); Client.Close waits for it and for every
// renewal RPC in flight.
type renewer struct {
	c *Client

	mu      sync.Mutex
	due     renewHeap // the guards waiting for their next renewal
	running bool      // the goroutine runs
	closed  bool      // Client.Close began: no more guards
	wake    chan struct{}
	rpcs    sync.WaitGroup // the loop and its RPCs
	// single: the server does not serve ExtendBatch (an older server
	// answered unimplemented): every renewal is a plain Extend.
	single bool
	// phase is the client's renewal phase, drawn once in [0,1): first
	// renewals are due phase·TTL/6 before TTL/3 (see the file's comment).
	phase float64
}

// Renewal state of one guard, kept by the renewer under its mutex.
type renewal struct {
	next     time.Time // when the guard is due
	attempt  int       // failed renewals in a row
	idx      int       // in the heap; -1 when not in it
	inFlight bool      // in a renewal RPC, holding the guard's RPC slot
	removed  bool      // stopped (Unlock, Close): never renewed again
	rid      string    // the request id of the renewal under way; "" between renewals
}

func newRenewer(c *Client) *renewer {
	return &renewer{c: c, wake: make(chan struct{}, 1), phase: rand.Float64()}
}

// firstRenewal is how long after its acquisition was sent a guard of the
// given TTL is first due, for a client of the given phase: TTL/3 brought
// forward by phase·TTL/6.
func firstRenewal(ttl time.Duration, phase float64) time.Duration {
	return ttl/3 - time.Duration(phase*float64(ttl/phaseSpread))
}

// add schedules g's first renewal; false once the client is closing.
func (r *renewer) add(g *Guard) bool {
	g.mu.Lock()
	next := g.lastSent.Add(firstRenewal(g.ttl, r.phase))
	g.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	g.ren = renewal{next: next, idx: -1}
	if r.closed {
		g.ren.removed = true
		return false
	}
	heap.Push(&r.due, g)
	r.poke()
	return true
}

// poke wakes the loop, starting it if it is not running. r.mu must be held.
func (r *renewer) poke() {
	if !r.running {
		r.running = true
		r.rpcs.Add(1)
		go r.loop()
		return
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// remove stops renewing g: it leaves the schedule, and a renewal in flight
// lets go of it (the guard's RPC slot is given back now; that renewal's
// answer is then ignored), so the release that follows does not wait for
// someone else's renewal.
func (r *renewer) remove(g *Guard) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if g.ren.removed {
		return
	}
	g.ren.removed = true
	if g.ren.idx >= 0 {
		heap.Remove(&r.due, g.ren.idx)
	}
	if g.ren.inFlight {
		g.ren.inFlight = false
		g.releaseSem()
	}
	if len(r.due) == 0 && r.running {
		// Let the loop see the empty schedule and exit now, not at its
		// timer.
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// reschedule moves g's next renewal to TTL/3 after its last successful one
// (after an explicit Extend).
func (r *renewer) reschedule(g *Guard) {
	g.mu.Lock()
	next := g.lastSent.Add(firstRenewal(g.ttl, r.phase))
	g.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if g.ren.removed || g.ren.idx < 0 {
		return
	}
	g.ren.next = next
	g.ren.attempt, g.ren.rid = 0, ""
	heap.Fix(&r.due, g.ren.idx)
	r.poke()
}

// close refuses new guards and waits for the loop and every renewal RPC to
// end (Client.Close, after every guard was removed and the client's closing
// context, which bounds the renewals in flight, was cancelled).
func (r *renewer) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.rpcs.Wait()
}

// loop sends the renewals as they come due, until no guard is scheduled.
func (r *renewer) loop() {
	defer r.rpcs.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		r.mu.Lock()
		if len(r.due) == 0 {
			r.running = false
			r.mu.Unlock()
			return
		}
		now := time.Now()
		var batch []*Guard
		if !r.due[0].ren.next.After(now) {
			batch = r.take(now)
		}
		empty := len(r.due) == 0
		wait := time.Hour
		if !empty {
			wait = time.Until(r.due[0].ren.next)
		}
		r.mu.Unlock()
		for c := range slices.Chunk(batch, maxBatchItems) {
			r.rpcs.Add(1)
			go func() {
				defer r.rpcs.Done()
				r.renew(c)
			}()
		}
		if len(batch) > 0 || empty {
			continue // a guard may have come due meanwhile; or exit
		}
		timer.Reset(max(wait, 0))
		select {
		case <-r.wake:
		case <-timer.C:
		}
	}
}

// take removes from the schedule the guards to renew now: the first due
// one and every guard due by the end of its own renew-early window (a sixth
// of its TTL) that falls within the first one's, whose RPC slot is free; it
// marks them in flight. A guard whose slot is taken (an explicit Extend,
// its release) is looked at again shortly; one that ended leaves. r.mu must
// be held and the first guard due.
func (r *renewer) take(now time.Time) []*Guard {
	horizon := now.Add(r.due[0].TTL() / renewEarly)
	var batch, back, fresh []*Guard // fresh: need a request id
	for len(r.due) > 0 && !r.due[0].ren.next.After(horizon) {
		g := heap.Pop(&r.due).(*Guard)
		g.mu.Lock()
		// A retry scheduled at the local expiry (the backoff cut to the
		// time left) finds the lease ended on our clock, even when the loss
		// timer has not run yet: it is lost, not renewed once more, and never
		// retried in a loop until that timer runs.
		ttl, ended := g.ttl, g.checkLocked() != nil
		g.mu.Unlock()
		switch {
		case ended:
			g.ren.removed = true
			continue
		case g.ren.next.After(now.Add(ttl / renewEarly)):
			back = append(back, g) // not within its own window yet
			continue
		}
		select {
		case g.sem <- struct{}{}:
			g.ren.inFlight = true
			if g.ren.rid == "" {
				fresh = append(fresh, g)
			}
			batch = append(batch, g)
		default:
			g.ren.next = now.Add(busyRetry)
			back = append(back, g)
		}
	}
	for _, g := range back {
		heap.Push(&r.due, g)
	}
	if len(fresh) > 0 {
		for i, id := range newRequestIDs(len(fresh)) {
			fresh[i].ren.rid = id // kept by its retries (failed)
		}
	}
	return batch
}

// renew sends one renewal for the guards of batch (each holds its RPC
// slot) and applies each one's outcome: the single-key guards in one
// ExtendBatch, each multi-key guard (and a single-key guard alone, or every
// guard on a server without ExtendBatch) in its own Extend, all at once.
func (r *renewer) renew(batch []*Guard) {
	ttls := make([]time.Duration, len(batch))
	// Each attempt is bounded by the lease with the least time left and
	// by a third of its TTL, so that a hung connection leaves every guard
	// time for another attempt, and by the request timeout.
	bound := r.c.opts.requestTimeout
	r.mu.Lock()
	rids := make([]string, len(batch))
	for i, g := range batch {
		rids[i] = g.ren.rid
	}
	single := r.single
	r.mu.Unlock()
	var inBatch, alone []int
	for i, g := range batch {
		g.mu.Lock()
		ttls[i] = g.ttl
		bound = min(bound, max(min(time.Until(g.expiry), g.ttl/3), time.Millisecond))
		g.mu.Unlock()
		if g.keys != nil {
			alone = append(alone, i)
			continue
		}
		inBatch = append(inBatch, i)
	}
	if single || len(inBatch) == 1 {
		alone, inBatch = append(alone, inBatch...), nil
	}
	ren := &renewalCall{batch: batch, ttls: ttls, rids: rids}
	ctx, cancel := context.WithTimeout(r.c.closing, bound)
	defer cancel()
	ren.sent = time.Now()
	var wg sync.WaitGroup
	wg.Go(func() { r.renewEach(ctx, ren, alone) })
	if len(inBatch) > 0 {
		r.renewBatch(ctx, ren, inBatch)
	}
	wg.Wait()
}

// renewalCall is one renewal of the guards batch: each one's ttl and
// request id, and when it was sent.
type renewalCall struct {
	batch []*Guard
	ttls  []time.Duration
	rids  []string
	sent  time.Time
}

// items are the ExtendBatch items of the guards batch[i] for i in idx
// (items of one ttl share its message: a batch carries hundreds).
func (c *renewalCall) items(idx []int) []*lockv1.ExtendBatchItem {
	items := make([]*lockv1.ExtendBatchItem, len(idx))
	slab := make([]lockv1.ExtendBatchItem, len(idx))
	var ttl *durationpb.Duration
	for j, i := range idx {
		if j == 0 || c.ttls[i] != c.ttls[idx[j-1]] {
			ttl = durationpb.New(c.ttls[i])
		}
		it := &slab[j]
		it.Key, it.OwnerToken, it.Ttl, it.RequestId = c.batch[i].key, c.batch[i].owner, ttl, c.rids[i]
		items[j] = it
	}
	return items
}

// renewBatch renews the guards ren.batch[i] for i in idx in one
// ExtendBatch (an older server's unimplemented: each by its own Extend,
// and every renewal after it).
func (r *renewer) renewBatch(ctx context.Context, ren *renewalCall, idx []int) {
	items := ren.items(idx)
	resp, err := r.c.rpc.ExtendBatch(ctx, &lockv1.ExtendBatchRequest{Items: items, ClientStamp: r.c.stamp()})
	if connect.CodeOf(err) == connect.CodeUnimplemented {
		r.mu.Lock()
		r.single = true
		r.mu.Unlock()
		ren.sent = time.Now()
		r.renewEach(ctx, ren, idx)
		return
	}
	if err == nil && len(resp.GetResults()) != len(items) {
		err = &rpcError{op: "ExtendBatch", code: "internal", message: "answered a different number of results than leases sent", kind: ErrServer}
	}
	if err != nil {
		_, mapped := attemptError(r.c.closing, ctx, "ExtendBatch", err)
		for _, i := range idx {
			r.failed(ren.batch[i], mapped)
		}
		return
	}
	// One merge of the latest stamp the answer carries: merging each
	// lease's in turn moves the clock to the same place.
	latest := hlc.FromProto(resp.GetServerStamp())
	for _, res := range resp.GetResults() {
		latest = hlc.Max(latest, hlc.FromProto(res.GetLease().GetStamp()))
	}
	r.c.merge(latest.ToProto())
	for j, i := range idx {
		res := resp.GetResults()[j]
		if e := res.GetError(); e != nil {
			r.failed(ren.batch[i], &rpcError{op: "ExtendBatch", code: e.GetCode(), message: e.GetMessage(), kind: codeKind(e.GetCode())})
			continue
		}
		r.answered(ren.batch[i], ren.sent, ren.ttls[i], res.GetExtended())
	}
}

// renewEach renews each guard ren.batch[i] for i in idx with its own
// Extend, at once.
func (r *renewer) renewEach(ctx context.Context, ren *renewalCall, idx []int) {
	var wg sync.WaitGroup
	for _, i := range idx {
		wg.Go(func() {
			g := ren.batch[i]
			resp, err := r.c.rpc.Extend(ctx, g.extendRequest(ren.ttls[i], ren.rids[i]))
			if err != nil {
				_, mapped := attemptError(r.c.closing, ctx, "Extend", err)
				r.failed(g, mapped)
				return
			}
			r.c.merge(resp.GetServerStamp(), resp.GetLease().GetStamp())
			r.answered(g, ren.sent, ren.ttls[i], resp.GetExtended())
		})
	}
	wg.Wait()
}

// testHookRenewalAnswered, when set (tests only), runs when a renewal's
// answer arrives, before it is applied.
var testHookRenewalAnswered atomic.Pointer[func(*Guard)]

// holding reports whether g's renewal still holds its RPC slot: false when
// g was removed while in flight (the slot was given back then, and the
// answer is ignored).
func (r *renewer) holding(g *Guard) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return g.ren.inFlight
}

// settle takes g out of flight and gives its RPC slot back, unless remove
// did so meanwhile. A renewal's outcome is applied (and g scheduled again)
// before its slot is given back: an explicit Extend waiting for the slot
// must come after it, or the renewal's older answer would overwrite the
// Extend's newer one (its TTL and expiry: the guard would believe in a
// lease the server had shortened, and renew with a TTL the caller had
// replaced).
func (r *renewer) settle(g *Guard) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if g.ren.inFlight {
		g.ren.inFlight = false
		g.releaseSem()
	}
}

// answered applies a renewal the server answered. The event goes out once
// the slot is back: a listener may call Extend.
func (r *renewer) answered(g *Guard, sent time.Time, ttl time.Duration, extended bool) {
	if !r.holding(g) {
		return
	}
	if h := testHookRenewalAnswered.Load(); h != nil {
		(*h)(g)
	}
	if !extended {
		g.mu.Lock()
		g.poisonLocked(LossRejected)
		g.mu.Unlock()
		r.settle(g)
		return
	}
	if !g.renewed(sent, ttl) {
		r.settle(g)
		return // ended meanwhile: the loss stands
	}
	r.schedule(g, sent.Add(ttl/3), 0)
	r.settle(g)
	g.c.emit(LeaseEvent{Type: LeaseRenewed, Key: g.key, Keys: g.keys, FencingToken: g.fencing, TTL: ttl, Renewals: g.Renewals(), Latency: time.Since(sent)})
}

// failed applies a renewal that did not get an answer for g: it is
// retried with the backoff, until the local expiry poisons the guard (a
// transient error never ends a lease that is still valid).
func (r *renewer) failed(g *Guard, err error) {
	if !r.holding(g) {
		return
	}
	g.mu.Lock()
	if g.err != nil {
		g.mu.Unlock()
		r.settle(g)
		return
	}
	// An attempt that the lease's own expiry cut short says only that time
	// ran out: keep what the attempts before it learned (say, unavailable),
	// which is what a LossExpired loss should report.
	if !errors.Is(err, context.DeadlineExceeded) || time.Now().Before(g.expiry) || g.lastErr == nil {
		g.lastErr = err
	}
	expiry := g.expiry
	g.mu.Unlock()
	r.mu.Lock()
	attempt := g.ren.attempt
	r.mu.Unlock()
	r.schedule(g, earliest(time.Now().Add(g.c.opts.backoff.delay(attempt)), expiry), attempt+1)
	r.settle(g)
	if left := time.Until(expiry); left > 0 {
		g.c.emit(LeaseEvent{Type: LeaseRenewalFailed, Key: g.key, Keys: g.keys, FencingToken: g.fencing, Err: err, Remaining: left})
	}
}

// schedule puts g back in the schedule for next, unless it was removed.
func (r *renewer) schedule(g *Guard, next time.Time, attempt int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if g.ren.removed {
		return
	}
	g.ren.next, g.ren.attempt = next, attempt
	if attempt == 0 {
		g.ren.rid = "" // answered: the next renewal is a new request
	}
	heap.Push(&r.due, g)
	r.poke()
}

// codeKind is the sentinel of a Connect code name in an item's error.
func codeKind(code string) error {
	if code == CodeUnavailable {
		return ErrUnavailable
	}
	return ErrServer
}

// renewHeap orders guards by their next renewal.
type renewHeap []*Guard

func (h renewHeap) Len() int           { return len(h) }
func (h renewHeap) Less(i, j int) bool { return h[i].ren.next.Before(h[j].ren.next) }
func (h renewHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].ren.idx, h[j].ren.idx = i, j
}
func (h *renewHeap) Push(x any) {
	g := x.(*Guard)
	g.ren.idx = len(*h)
	*h = append(*h, g)
}
func (h *renewHeap) Pop() any {
	old := *h
	g := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	g.ren.idx = -1
	return g
}
