package chaos

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// Hand-made semaphore histories: key "s", limit 3, 1s leases.
func sacq(client int, call, ret int64, fence uint64, permits int) Op {
	return Op{Kind: Acquire, Prim: PrimSemaphore, Key: "s", Client: client, Call: call, Return: ret, TTL: ttl, Fence: fence, Limit: 3, Permits: permits, Outcome: OK}
}

func srel(client int, call, ret int64, fence uint64, out Outcome) Op {
	return Op{Kind: Release, Prim: PrimSemaphore, Key: "s", Client: client, Call: call, Return: ret, Fence: fence, Outcome: out}
}

// swr is a write at instant at by fence, with the grants writing then.
func swr(prim string, limit, client int, at int64, fence uint64, occ ...Occupant) Op {
	return Op{Kind: Write, Prim: prim, Key: "s", Client: client, Call: at, Return: at + 1, Fence: fence, Limit: limit, Occupants: occ, Outcome: OK}
}

// Read-write lock histories: key "s", readers weigh 1, a writer 1024.
func racq(client int, call, ret int64, fence uint64, writer bool) Op {
	p := 1
	if writer {
		p = RWLockReaders
	}
	return Op{Kind: Acquire, Prim: PrimRWLock, Key: "s", Client: client, Call: call, Return: ret, TTL: ttl, Fence: fence, Limit: RWLockReaders, Permits: p, Outcome: OK}
}

func rrel(client int, call, ret int64, fence uint64, out Outcome) Op {
	o := srel(client, call, ret, fence, out)
	o.Prim = PrimRWLock
	return o
}

func oc(fence uint64, permits int) Occupant { return Occupant{Fence: fence, Permits: permits} }

func TestGrantModelsAcceptCorrectHistories(t *testing.T) {
	cases := map[string]struct {
		prim string
		h    []Op
	}{
		"semaphore: 1+2 permits share the limit": {PrimSemaphore, []Op{
			sacq(0, 0, 1*ms, 10, 1), sacq(1, 2*ms, 3*ms, 11, 2),
			swr(PrimSemaphore, 3, 0, 4*ms, 10, oc(10, 1)), swr(PrimSemaphore, 3, 1, 5*ms, 11, oc(10, 1), oc(11, 2)),
			srel(0, 6*ms, 7*ms, 10, OK), sacq(2, 8*ms, 9*ms, 12, 1), srel(1, 10*ms, 11*ms, 11, OK),
			sacq(0, 12*ms, 13*ms, 13, 2),
		}},
		// Client 0 stalls past its TTL; its permits are granted again; it
		// wakes up and writes beside the new holders (the stale writer the
		// model excuses), and its release is refused.
		"semaphore: expired grant's permits granted again": {PrimSemaphore, []Op{
			sacq(0, 0, 1*ms, 10, 2), sacq(1, 2*ms, 3*ms, 11, 1),
			sacq(2, 1100*ms, 1101*ms, 12, 2),
			swr(PrimSemaphore, 3, 0, 1200*ms, 10, oc(10, 2), oc(11, 1), oc(12, 2)),
			srel(0, 1201*ms, 1202*ms, 10, Rejected),
		}},
		"semaphore: an unknown release may have freed its permits": {PrimSemaphore, []Op{
			sacq(0, 0, 1*ms, 10, 2), srel(0, 2*ms, 0, 10, Unknown), sacq(1, 3*ms, 4*ms, 11, 2),
		}},
		"semaphore: a reset frees every permit": {PrimSemaphore, []Op{
			sacq(0, 0, 1*ms, 10, 3),
			{Kind: Reset, Prim: PrimSemaphore, Key: "s", Client: 9, Call: 2 * ms, Return: 50 * ms, Outcome: OK},
			sacq(1, 60*ms, 61*ms, 11, 3),
		}},
		"rwlock: readers together, then a writer alone": {PrimRWLock, []Op{
			racq(0, 0, 1*ms, 10, false), racq(1, 2*ms, 3*ms, 11, false),
			swr(PrimRWLock, RWLockReaders, 1, 4*ms, 11, oc(10, 1), oc(11, 1)),
			rrel(0, 5*ms, 6*ms, 10, OK), rrel(1, 5*ms, 7*ms, 11, OK),
			racq(2, 5*ms, 8*ms, 12, true), swr(PrimRWLock, RWLockReaders, 2, 9*ms, 12, oc(12, RWLockReaders)),
			rrel(2, 10*ms, 11*ms, 12, OK), racq(0, 12*ms, 13*ms, 13, false),
		}},
		"rwlock: a writer takes over from a reader that stalled": {PrimRWLock, []Op{
			racq(0, 0, 1*ms, 10, false), racq(1, 1050*ms, 1100*ms, 11, true),
			rrel(0, 1200*ms, 1201*ms, 10, Rejected),
		}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if res := CheckPrimitive(c.h, c.prim, 10*time.Second); res.Result != porcupine.Ok {
				t.Fatalf("result %s, want Ok", res.Result)
			}
		})
	}
}

// TestGrantModelsCatchViolations proves the checkers can fail.
func TestGrantModelsCatchViolations(t *testing.T) {
	cases := map[string]struct {
		prim string
		h    []Op
	}{
		"semaphore: over-grant": {PrimSemaphore, []Op{
			sacq(0, 0, 1*ms, 10, 2), sacq(1, 2*ms, 3*ms, 11, 2),
		}},
		"semaphore: over-grant after a refused release": {PrimSemaphore, []Op{
			sacq(0, 0, 1*ms, 10, 2), srel(1, 2*ms, 3*ms, 99, Rejected), sacq(1, 4*ms, 5*ms, 11, 2),
		}},
		"semaphore: a writer whose token was never granted": {PrimSemaphore, []Op{
			sacq(0, 0, 1*ms, 10, 2), sacq(1, 2*ms, 3*ms, 11, 1),
			swr(PrimSemaphore, 3, 1, 4*ms, 11, oc(10, 2), oc(11, 1), oc(12, 1)),
		}},
		// The grants look fine only because the acquire of 11 may have
		// linearized after 10 expired (it returned late), but the resource
		// saw both write together while each was certainly valid.
		"semaphore: more writers than the limit, all valid": {PrimSemaphore, []Op{
			sacq(0, 900*ms, 901*ms, 10, 2), sacq(1, 950*ms, 1950*ms, 11, 2),
			swr(PrimSemaphore, 3, 1, 1700*ms, 11, oc(10, 2), oc(11, 2)),
		}},
		"semaphore: fencing token goes back": {PrimSemaphore, []Op{
			sacq(0, 0, 1*ms, 10, 1), sacq(1, 2*ms, 3*ms, 9, 1),
		}},
		"semaphore: release of a grant never made": {PrimSemaphore, []Op{
			sacq(0, 0, 1*ms, 10, 1), srel(1, 2*ms, 3*ms, 11, OK),
		}},
		"semaphore: grant lost before its TTL": {PrimSemaphore, []Op{
			sacq(0, 0, 1*ms, 10, 1), srel(0, 500*ms, 501*ms, 10, Rejected),
		}},
		"rwlock: a writer beside a reader": {PrimRWLock, []Op{
			racq(0, 0, 1*ms, 10, false), racq(1, 2*ms, 3*ms, 11, true),
		}},
		"rwlock: a reader beside a writer": {PrimRWLock, []Op{
			racq(0, 0, 1*ms, 10, true), racq(1, 2*ms, 3*ms, 11, false),
		}},
		"rwlock: two writers": {PrimRWLock, []Op{
			racq(0, 0, 1*ms, 10, true), rrel(0, 2*ms, 3*ms, 10, Unknown), racq(1, 2*ms, 3*ms, 11, true),
			racq(2, 4*ms, 5*ms, 12, true),
		}},
		"rwlock: a reader writes while the writer writes": {PrimRWLock, []Op{
			racq(0, 900*ms, 901*ms, 10, false), racq(1, 950*ms, 1950*ms, 11, true),
			swr(PrimRWLock, RWLockReaders, 1, 1700*ms, 11, oc(10, 1), oc(11, RWLockReaders)),
		}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			res := CheckPrimitive(c.h, c.prim, 10*time.Second)
			if res.Result != porcupine.Illegal {
				t.Fatalf("result %s, want Illegal", res.Result)
			}
			jsonl, html, err := Save(c.h, res, filepath.Join(t.TempDir(), "history"))
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{jsonl, html} {
				if fi, err := os.Stat(p); err != nil || fi.Size() == 0 {
					t.Fatalf("%s not written: %v", p, err)
				}
			}
		})
	}
}
