package holdfast

import (
	"encoding/base64"
	"fmt"
	"slices"
	"testing"
	"time"
)

// The client's watchdog renews its guards together: RPCs per renewal
// period in proportion to the client, not to its leases; each guard keeps
// its own outcome (watchdog_test.go has the one-guard failure paths).

// lockMany takes n guards on one client, keys k0..k(n-1).
func lockMany(t *testing.T, c *Client, n int, ttl time.Duration) []*Guard {
	t.Helper()
	gs := make([]*Guard, n)
	for i := range gs {
		g, err := c.Lock(fmt.Sprint("k", i)).TTL(ttl).TryLock(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		gs[i] = g
	}
	return gs
}

func TestWatchdogRenewsAClientsGuardsInFewCalls(t *testing.T) {
	peer, url := newFakePeer(t)
	peer.set(func(p *fakePeer) { p.batch = true })
	c := dialPeer(t, url)
	const n, ttl = 40, 900 * time.Millisecond
	start := time.Now()
	gs := lockMany(t, c, n, ttl)
	// Count the renewals only: an acquire answered after TTL/3 (a loaded
	// machine) confirms its lease with one plain Extend of its own before
	// TryLock returns (Guard.confirm), as the TS and Python tests allow.
	confirms := len(peer.snapshot().extendRecv)
	// Every guard renewed twice: two renewal periods (TTL/3 each) or a few
	// more on a loaded machine; polling, not a fixed window, so a slow
	// scheduler lengthens the wait instead of failing it.
	awaitRenewals(t, gs, 2, 3*ttl)
	periods := int(time.Since(start)/(ttl/3)) + 1
	snap := peer.snapshot()
	if plain := len(snap.extendRecv) - confirms; plain != 0 {
		t.Fatalf("%d plain Extends after the acquires: a server that batches should get none", plain)
	}
	calls, items := len(snap.batchSizes), 0
	for _, s := range snap.batchSizes {
		items += s
	}
	// The guards were taken one after the other, so their first renewals
	// are spread a little; renewing up to TTL/6 early brings them together.
	// Per-lock renewals would be 40 calls a period; allow four a period.
	if calls > 4*periods || items < 2*n {
		t.Fatalf("%d ExtendBatch calls carrying %d renewals (sizes %v) for %d guards over %d periods", calls, items, snap.batchSizes, n, periods)
	}
	for _, g := range gs {
		if err := g.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWatchdogBatchAnswerRejectsOnlyItsOwnGuard(t *testing.T) {
	peer, url := newFakePeer(t)
	peer.set(func(p *fakePeer) { p.batch = true; p.rejectKeys = map[string]bool{"k3": true} })
	c := dialPeer(t, url)
	const ttl = 600 * time.Millisecond
	gs := lockMany(t, c, 6, ttl)
	waitDone(t, gs[3], ttl/3+slack)
	if lost := lossOf(t, gs[3]); lost.Reason != LossRejected {
		t.Fatalf("k3: %v, want LossRejected", lost)
	}
	// The others go on: two more periods, still held and renewed.
	others := append(slices.Clone(gs[:3]), gs[4:]...)
	awaitRenewals(t, others, 2, 2*ttl/3+slack)
}

// awaitRenewals polls until every guard of gs has been renewed at least n
// times, failing at once when one is lost and at the end of within.
func awaitRenewals(t *testing.T, gs []*Guard, n int, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(5 * time.Millisecond) {
		done := true
		for _, g := range gs {
			if err := g.Err(); err != nil {
				t.Fatalf("guard %s lost while renewals succeed: %v after %d renewals", g.Key(), err, g.Renewals())
			}
			done = done && g.Renewals() >= n
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			for _, g := range gs {
				if g.Renewals() < n {
					t.Fatalf("guard %s renewed %d times in %s, want at least %d", g.Key(), g.Renewals(), within, n)
				}
			}
		}
	}
}

func TestWatchdogBatchItemErrorIsAFailedRenewalRetried(t *testing.T) {
	peer, url := newFakePeer(t)
	peer.set(func(p *fakePeer) { p.batch = true; p.itemErrKeys = map[string]int{"k1": 1} })
	var failed []LeaseEvent
	events := make(chan LeaseEvent, 64)
	c := dialPeer(t, url, WithLeaseEvents(func(e LeaseEvent) { events <- e }))
	const ttl = 900 * time.Millisecond
	gs := lockMany(t, c, 3, ttl)
	deadline := time.After(ttl + slack)
	for renewed := false; !renewed; {
		select {
		case e := <-events:
			switch {
			case e.Type == LeaseRenewalFailed && e.Key == "k1":
				failed = append(failed, e)
			case e.Type == LeaseRenewed && e.Key == "k1":
				renewed = true
			case e.Type == LeaseLost:
				t.Fatalf("guard %s lost: %v", e.Key, e.Err)
			}
		case <-deadline:
			t.Fatalf("k1 not renewed after its item errors (%d failures)", len(failed))
		}
	}
	// The retry of k1 alone (its backoff ends before the others are due)
	// goes as a plain Extend, which the peer answers.
	if len(failed) != 1 {
		t.Fatalf("k1: %d renewal_failed events, want one for its item error", len(failed))
	}
	// The retry is the same renewal: it carries the failed item's request
	// id, so a server that applied the item but lost its answer does not
	// apply it twice.
	if ids := peer.snapshot().renewIDs["k1"]; len(ids) < 2 || ids[0] == "" || ids[1] != ids[0] {
		t.Fatalf("k1's renewal request ids %q: want the failed item's id sent again on its retry", ids)
	}
	if err := gs[1].Err(); err != nil {
		t.Fatal(err)
	}
}

func TestWatchdogOnAServerWithoutExtendBatchRenewsEachGuard(t *testing.T) {
	peer, url := newFakePeer(t) // batch unset: ExtendBatch is unimplemented
	c := dialPeer(t, url)
	const ttl = 600 * time.Millisecond
	gs := lockMany(t, c, 5, ttl)
	awaitRenewals(t, gs, 1, ttl/3+ttl/2+slack)
	if snap := peer.snapshot(); len(snap.extendOK) < 5 {
		t.Fatalf("%d Extends answered, want every guard renewed by its own", len(snap.extendOK))
	}
}

// A guard's Unlock does not wait for a renewal of its lease that hangs in a
// batch with the client's other guards.
func TestUnlockDoesNotWaitForAHungBatch(t *testing.T) {
	peer, url := newFakePeer(t)
	peer.set(func(p *fakePeer) { p.batch = true })
	c := dialPeer(t, url)
	const ttl = 3 * time.Second
	gs := lockMany(t, c, 2, ttl)
	peer.set(func(p *fakePeer) { p.batchMode = modeHang })
	deadline := time.Now().Add(ttl/3 + slack)
	for len(peer.snapshot().batchSizes) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no renewal sent")
		}
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	if err := gs[0].Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > slack {
		t.Fatalf("Unlock took %s beside a hung renewal", took)
	}
}

// A client's phase brings the first renewal of each of its guards forward
// by phase·TTL/6: two clients whose guards were acquired at the same moment
// renew them apart, each at sent + TTL/3 - phase·TTL/6.
func TestWatchdogFirstRenewalFollowsTheClientsPhase(t *testing.T) {
	_, url := newFakePeer(t)
	const ttl = 6 * time.Second
	cases := []struct {
		phase float64
		due   time.Duration // TTL/3 - phase·TTL/6 after the acquisition was sent
	}{{0, 2 * time.Second}, {0.9, 1100 * time.Millisecond}}
	guards := make([]*Guard, len(cases))
	renewed := make([]chan struct{}, len(cases))
	for i, tc := range cases {
		ch := make(chan struct{}, 1)
		c := dialPeer(t, url, WithLeaseEvents(func(e LeaseEvent) {
			if e.Type == LeaseRenewed {
				select {
				case ch <- struct{}{}:
				default:
				}
			}
		}))
		c.renewer.phase = tc.phase // before any guard: what Dial drew at random
		g, err := c.Lock(fmt.Sprint("phase", i)).TTL(ttl).TryLock(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		guards[i], renewed[i] = g, ch
	}
	sentAt := func(g *Guard) time.Time {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.lastSent
	}
	acquired := []time.Time{sentAt(guards[0]), sentAt(guards[1])}
	for i, tc := range cases {
		select {
		case <-renewed[i]:
		case <-time.After(ttl):
			t.Fatalf("phase %v: no renewal within the TTL", tc.phase)
		}
		// Never before it is due (the renewer sends once the time has
		// come); later only by the timer's and the machine's delay.
		if d := sentAt(guards[i]).Sub(acquired[i]); d < tc.due || d > tc.due+slack {
			t.Fatalf("phase %v: first renewal sent %s after the acquisition, want %s (+ %s slack)", tc.phase, d, tc.due, slack)
		}
		if n := guards[i].Renewals(); n != 1 {
			t.Fatalf("phase %v: %d renewals, want the first one", tc.phase, n)
		}
	}
	for _, g := range guards {
		if err := g.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

// Each renewal of each guard carries a request id of its own, drawn for
// the whole batch at once: 128 random bits, base64url, never the same for
// two guards or two renewals.
func TestWatchdogGivesEveryRenewalItsOwnRequestID(t *testing.T) {
	peer, url := newFakePeer(t)
	peer.set(func(p *fakePeer) { p.batch = true })
	c := dialPeer(t, url)
	const n, ttl = 12, 1500 * time.Millisecond
	gs := lockMany(t, c, n, ttl)
	awaitRenewals(t, gs, 2, 2*ttl/3+ttl/2+slack)
	seen := map[string]string{}
	for key, ids := range peer.snapshot().renewIDs {
		for _, id := range ids {
			raw, err := base64.RawURLEncoding.DecodeString(id)
			if err != nil || len(raw) != 16 {
				t.Fatalf("%s: request id %q is not 16 bytes of base64url (%v)", key, id, err)
			}
			if other, dup := seen[id]; dup {
				t.Fatalf("request id %q sent for %s and again for %s", id, other, key)
			}
			seen[id] = key
		}
	}
	if len(seen) < 2*n {
		t.Fatalf("%d renewals seen, want at least two per guard", len(seen))
	}
	for _, g := range gs {
		if err := g.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}
