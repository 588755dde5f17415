package chaos

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Primitives of a history: each op's Prim says which kind of key it is on
// ("" for a mutex, checked with LockModel).
const (
	PrimMutex     = ""
	PrimSemaphore = "semaphore"
	PrimRWLock    = "rwlock"
)

// RWLockReaders is the reader capacity of a read-write lock: a reader's
// grant weighs one permit of it, a writer's all of them (docs/primitives.md).
const RWLockReaders = 1024

// grant is one lease of a semaphore or read-write lock key the model knows
// to be held: its fencing token, its permits, and the earliest instant its
// lease may end (the acquire's call plus its TTL).
type grant struct {
	Fence     uint64
	Permits   int
	MinExpiry int64
}

// grantState is the model's state for one semaphore or read-write lock key.
// Grants are kept sorted by fence so that equal states compare equal.
type grantState struct {
	Grants    []grant
	LastFence uint64
}

func (s grantState) find(f uint64) int {
	return slices.IndexFunc(s.Grants, func(g grant) bool { return g.Fence == f })
}

// without returns s without the grant at i; s is never changed in place
// (porcupine keeps earlier states).
func (s grantState) without(i int) grantState {
	s.Grants = slices.Delete(slices.Clone(s.Grants), i, i+1)
	return s
}

// validAt is the permits held at instant t by grants whose leases certainly
// have not ended (t < MinExpiry).
func (s grantState) validAt(t int64) int {
	n := 0
	for _, g := range s.Grants {
		if t < g.MinExpiry {
			n += g.Permits
		}
	}
	return n
}

// SemaphoreModel is the porcupine model of one semaphore key together with
// the resource its holders write to; histories are partitioned by key. It is
// LockModel with room for more than one holder: a key has a limit, each
// grant takes 1..limit permits and is a lease with its own fencing token.
//
// Expiry is handled as in LockModel: a grant is certainly valid from its
// acquire's call until MinExpiry = call + TTL and may have ended at any
// instant after. A grant that may have ended stays in the state (it may
// still be released by its owner), but its permits no longer count against
// the limit. That is permissive — a grant the model keeps may in truth have
// expired and been replaced — so every violation reported is real; the one
// thing it gives up is "a release that answered true after its grant expired
// and its permits were granted again", which LockModel still catches for
// mutexes. Unrecorded watchdog renewals only make leases longer, so
// ignoring them is permissive too. An acquire with an unknown outcome has an
// unknown token nobody can release: it is left out (its permits only
// expire), as in LockModel.
//
// Transitions (illegal ones make the history non-linearizable):
//
//   - Acquire ok(f, p): f > LastFence, 1 <= p <= Limit, and the permits of
//     grants certainly valid at the acquire's return plus p <= Limit. Then
//     the grant joins the state.
//   - Release ok(f): f is held (in the state); it leaves.
//   - Release rejected(f): f is not held, or may have ended (Return >=
//     MinExpiry); it leaves.
//   - Release unknown(f): f leaves if held (porcupine places the op anywhere
//     after its call, including never).
//   - Write(f, occupants): a write at the resource (see Resource) names the
//     grants writing to the key at that instant with their permits. Their
//     total may exceed Limit only if one of them may have ended — that is
//     the stale holder a fence exists for; if every one of them was
//     certainly valid, the lock granted more than Limit. f and every
//     occupant must have been granted (0 < fence <= LastFence).
//   - Reset: every grant goes (a non-durable backend lost its keys);
//     LastFence stays, so fencing must still increase across it.
var SemaphoreModel = grantModel(PrimSemaphore)

// RWLockModel is SemaphoreModel for a read-write lock: its limit is the
// reader capacity (RWLockReaders), a reader's grant weighs 1 and a writer's
// all of it, so a writer is alone and readers share. A grant of any other
// weight is illegal.
var RWLockModel = grantModel(PrimRWLock)

func grantModel(prim string) porcupine.Model {
	return porcupine.Model{
		Partition: LockModel.Partition,
		Init:      func() any { return grantState{} },
		Step: func(state, input, _ any) (bool, any) {
			ok, next := grantStep(prim, state.(grantState), input.(stepIn).op)
			return ok, next
		},
		Equal: func(a, b any) bool {
			x, y := a.(grantState), b.(grantState)
			return x.LastFence == y.LastFence && slices.Equal(x.Grants, y.Grants)
		},
		DescribeOperation: func(input, _ any) string { return describeGrant(input.(stepIn).op) },
		DescribeState: func(state any) string {
			s := state.(grantState)
			var b strings.Builder
			fmt.Fprintf(&b, "last=%d grants:", s.LastFence)
			for _, g := range s.Grants {
				fmt.Fprintf(&b, " %d×%d(valid until ≥%s)", g.Fence, g.Permits, clock(g.MinExpiry))
			}
			return b.String()
		},
	}
}

func grantStep(prim string, s grantState, o *Op) (bool, grantState) {
	switch o.Kind {
	case Acquire:
		if o.Outcome != OK {
			return true, s
		}
		if o.Fence <= s.LastFence || o.Permits < 1 || o.Permits > o.Limit {
			return false, s
		}
		if prim == PrimRWLock && (o.Limit != RWLockReaders || (o.Permits != 1 && o.Permits != RWLockReaders)) {
			return false, s
		}
		if s.validAt(o.Return)+o.Permits > o.Limit {
			return false, s
		}
		g := grant{Fence: o.Fence, Permits: o.Permits, MinExpiry: o.Call + o.TTL}
		s.Grants = append(slices.Clone(s.Grants), g) // fences only grow: stays sorted
		s.LastFence = o.Fence
		return true, s
	case Release:
		i := s.find(o.Fence)
		switch o.Outcome {
		case OK:
			if i < 0 {
				return false, s
			}
		case Rejected:
			if i >= 0 && o.Return < s.Grants[i].MinExpiry {
				return false, s // a lease is never lost before its TTL
			}
		}
		if i >= 0 {
			s = s.without(i)
		}
		return true, s
	case Write:
		if o.Outcome != OK {
			return true, s
		}
		if o.Fence == 0 || o.Fence > s.LastFence {
			return false, s
		}
		total, allValid := 0, true
		for _, oc := range o.Occupants {
			if oc.Fence == 0 || oc.Fence > s.LastFence {
				return false, s // a writer whose token was never granted
			}
			total += oc.Permits
			i := s.find(oc.Fence)
			if i < 0 || o.Call >= s.Grants[i].MinExpiry {
				allValid = false // released already, or may have ended: a stale writer
			}
		}
		if total > o.Limit && allValid {
			return false, s
		}
		return true, s
	case Reset:
		s.Grants = nil
		return true, s
	}
	return false, s
}

func describeGrant(o *Op) string {
	switch o.Kind {
	case Acquire:
		what := fmt.Sprintf("c%d acquire(%d of %d, ttl=%s)", o.Client, o.Permits, o.Limit, time.Duration(o.TTL))
		if o.Outcome == OK {
			return fmt.Sprintf("%s → %d", what, o.Fence)
		}
		return fmt.Sprintf("%s → %s", what, o.Outcome)
	case Write:
		var occ []string
		for _, oc := range o.Occupants {
			occ = append(occ, fmt.Sprintf("%d×%d", oc.Fence, oc.Permits))
		}
		return fmt.Sprintf("c%d write(%d) with [%s] of %d → %s", o.Client, o.Fence, strings.Join(occ, " "), o.Limit, o.Outcome)
	}
	return describe(o)
}

// ModelFor is the porcupine model that checks a primitive's ops.
func ModelFor(prim string) porcupine.Model {
	switch prim {
	case PrimSemaphore:
		return SemaphoreModel
	case PrimRWLock:
		return RWLockModel
	case PrimElection:
		return ElectionModel
	}
	return LockModel
}

// CheckPrimitive checks the ops of one primitive in history (those whose
// Prim is prim) against its model, giving up after timeout; Result.Took is
// how long porcupine ran.
func CheckPrimitive(history []Op, prim string, timeout time.Duration) Result {
	ops := make([]porcupine.Operation, 0, len(history))
	counts := map[Kind]int{}
	grants := 0
	for i := range history {
		o := &history[i]
		if o.Prim != prim {
			continue
		}
		counts[o.Kind]++
		if o.Kind == Acquire && o.Outcome != OK {
			continue // no effect on the model; leaving them out keeps the search small
		}
		if o.Kind == Acquire {
			grants++
		}
		ret := o.Return
		if o.Outcome == Unknown {
			ret = math.MaxInt64
		}
		ops = append(ops, porcupine.Operation{ClientId: o.Client, Input: stepIn{op: o}, Call: o.Call, Output: o.Outcome, Return: ret})
	}
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(ModelFor(prim), ops, timeout)
	return Result{Result: res, Info: info, Ops: counts, Grants: grants, Took: time.Since(start), Prim: prim}
}
