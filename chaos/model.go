package chaos

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
)

// Kind is what an operation in a history did.
type Kind string

const (
	// Acquire is a lock acquisition (TryLock or a waiting Lock) by one client.
	Acquire Kind = "acquire"
	// Release is a release of the lease with Fence by the client that got it.
	Release Kind = "release"
	// Write is a write to the fenced resource carrying Fence, decided by the
	// resource at one instant (Call == Return).
	Write Kind = "write"
	// Reset is a fault that loses every lock of a non-durable backend (the
	// memory plugin killed, a server with its plugin killed): from Call to
	// Return the locks may vanish. Fencing must still increase across it.
	Reset Kind = "reset"
)

// Outcome is what an operation answered.
type Outcome string

const (
	// OK: acquired, released, or a write accepted by the fence.
	OK Outcome = "ok"
	// Busy: an acquire answered "not acquired" (someone else holds).
	Busy Outcome = "busy"
	// Rejected: the server said the owner token no longer holds (release or
	// a renewal answered false), or the fence refused a write.
	Rejected Outcome = "rejected"
	// Unknown: the call errored or timed out; it may or may not have taken
	// effect. Its return time is infinite (math.MaxInt64) in the history.
	Unknown Outcome = "unknown"
)

// Op is one recorded operation. Times are Unix nanoseconds on the host's
// wall clock, shared by every process of a run (all run on one machine).
type Op struct {
	Kind   Kind   `json:"kind"`
	Key    string `json:"key"`
	Client int    `json:"client"`
	Call   int64  `json:"call"`
	Return int64  `json:"return"` // math.MaxInt64 when Outcome is Unknown
	TTL    int64  `json:"ttl_ns,omitempty"`
	// Wait: an acquire's wait (0: one attempt).
	Wait    int64   `json:"wait_ns,omitempty"`
	Fence   uint64  `json:"fence,omitempty"` // acquire: the token granted; release/write: the token used
	Outcome Outcome `json:"outcome"`
	Note    string  `json:"note,omitempty"`
	// Set: the keys of the multi-key lease this acquire or release belongs
	// to (its other keys have ops of their own: histories are checked per
	// key).
	Set []string `json:"set,omitempty"`
	// Prim is the primitive of Key: PrimMutex (""), PrimSemaphore,
	// PrimRWLock or PrimElection. Each primitive's ops are checked with its
	// own model.
	Prim string `json:"prim,omitempty"`
	// Limit and Permits: a semaphore's or read-write lock's limit, and the
	// permits of this grant (acquire) or of the writer (write).
	Limit   int `json:"limit,omitempty"`
	Permits int `json:"permits,omitempty"`
	// Occupants: for a write to a semaphore or read-write lock key, the
	// grants writing to the key at that instant, this one included.
	Occupants []Occupant `json:"occupants,omitempty"`
	// Value: an election's campaign value (Acquire) or proclaimed value
	// (Proclaim); unique in a run (ElectionValue).
	Value string `json:"value,omitempty"`
}

// Occupant is one grant writing to a semaphore or read-write lock key.
type Occupant struct {
	Fence   uint64 `json:"fence"`
	Permits int    `json:"permits"`
}

// lockState is the model's state for one key. It is a comparable value so
// porcupine can memoise on it.
type lockState struct {
	// Holder is the fencing token of the lease the model knows to be held,
	// 0 when free (or when only a lease nobody knows the token of may exist).
	Holder uint64
	// MinExpiry is the earliest instant Holder's lease may end: the call time
	// of its acquire plus its TTL. The backend starts counting the TTL at or
	// after the call, so until then the lease is certainly valid.
	MinExpiry int64
	// LastFence is the largest fencing token granted so far.
	LastFence uint64
	// Watermark is the fenced resource's watermark: the largest token it
	// accepted a write from.
	Watermark uint64
}

// stepIn is what porcupine passes as the input of an operation.
type stepIn struct{ op *Op }

// LockModel is the porcupine model of one holdfast key together with the
// fenced resource it protects; histories are partitioned by key.
//
// The model sidesteps wall-clock expiry instead of simulating it: a lease is
// certainly valid from its acquire's call until MinExpiry = call + TTL and may
// have expired at any instant after that. An operation can only have taken
// effect before its own return, so a transition that needs "the holder's
// lease has expired" is allowed iff the operation returned at or after
// MinExpiry (expiry is a nondeterministic event the model allows once it is
// possible). Renewals by the SDK watchdog are not recorded: they only make a
// lease valid for longer, so ignoring them makes the model more permissive,
// never stricter than the truth — every violation it reports is real.
//
// A multi-key lease (Op.Set) is recorded as one acquire, and one release, per
// key, each with that key's fencing token and the lease's call and return
// times; every key's history must then be linearizable on its own, so two
// overlapping sets, or a set and a single-key lease, never both hold a key,
// and each key's tokens keep increasing through sets and faults.
//
// Transitions (illegal ones make the history non-linearizable):
//
//   - Acquire ok(f): f > LastFence (strictly increasing fencing) and
//     (Holder == 0 or the holder may have expired: Return >= MinExpiry) —
//     at most one valid holder. Then Holder = f, MinExpiry = Call + TTL.
//   - Acquire busy / unknown: no change (a lease granted to a call that
//     errored is held by nobody and only expires; it raises the real
//     fencing counter, which the strict-increase check tolerates).
//   - Release ok(f): Holder == f; then Holder = 0. A release that frees
//     someone else's lock cannot be linearized.
//   - Release rejected(f): Holder != f, or Holder == f may have expired
//     (Return >= MinExpiry) — a lease is never lost before its TTL; a stale
//     token's release changes nothing.
//   - Release unknown(f): Holder = 0 if Holder == f, else no change.
//   - Write ok(f): 0 < f <= LastFence (a granted token) and f >= Watermark;
//     then Watermark = f.
//   - Write rejected(f): f < Watermark, and not while f's lease is certainly
//     valid (Holder == f and the write's instant < MinExpiry): that would mean
//     a newer holder wrote while this one certainly held.
//   - Reset: Holder = 0 (a non-durable backend lost its locks); LastFence
//     and Watermark stay, so fencing must still increase across it.
var LockModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, o := range history {
			k := o.Input.(stepIn).op.Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], o)
		}
		slices.Sort(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return lockState{} },
	Step: func(state, input, _ any) (bool, any) {
		s := state.(lockState)
		ok, next := step(s, input.(stepIn).op)
		return ok, next
	},
	Equal: func(a, b any) bool { return a.(lockState) == b.(lockState) },
	DescribeOperation: func(input, _ any) string {
		return describe(input.(stepIn).op)
	},
	DescribeState: func(state any) string {
		s := state.(lockState)
		return fmt.Sprintf("holder=%d (valid until ≥%s) last=%d watermark=%d",
			s.Holder, clock(s.MinExpiry), s.LastFence, s.Watermark)
	},
}

func step(s lockState, o *Op) (bool, lockState) {
	mayHaveExpired := func(at int64) bool { return s.Holder == 0 || at >= s.MinExpiry }
	switch o.Kind {
	case Acquire:
		if o.Outcome != OK {
			return true, s
		}
		if o.Fence <= s.LastFence || !mayHaveExpired(o.Return) {
			return false, s
		}
		s.Holder, s.MinExpiry, s.LastFence = o.Fence, o.Call+o.TTL, o.Fence
		return true, s
	case Release:
		switch o.Outcome {
		case OK:
			if s.Holder != o.Fence {
				return false, s
			}
			s.Holder, s.MinExpiry = 0, 0
		case Rejected:
			if s.Holder == o.Fence {
				if !mayHaveExpired(o.Return) {
					return false, s
				}
				s.Holder, s.MinExpiry = 0, 0
			}
		default:
			if s.Holder == o.Fence {
				s.Holder, s.MinExpiry = 0, 0
			}
		}
		return true, s
	case Write:
		switch o.Outcome {
		case OK:
			if o.Fence == 0 || o.Fence > s.LastFence || o.Fence < s.Watermark {
				return false, s
			}
			s.Watermark = o.Fence
		case Rejected:
			if o.Fence >= s.Watermark || (s.Holder == o.Fence && o.Call < s.MinExpiry) {
				return false, s
			}
		}
		return true, s
	case Reset:
		s.Holder, s.MinExpiry = 0, 0
		return true, s
	}
	return false, s
}

func describe(o *Op) string {
	switch o.Kind {
	case Acquire:
		set := ""
		if len(o.Set) > 0 {
			set = fmt.Sprintf(", one lease with %v", o.Set)
		}
		if o.Outcome == OK {
			return fmt.Sprintf("c%d acquire(ttl=%s%s) → %d", o.Client, time.Duration(o.TTL), set, o.Fence)
		}
		return fmt.Sprintf("c%d acquire(ttl=%s%s) → %s", o.Client, time.Duration(o.TTL), set, o.Outcome)
	case Release:
		return fmt.Sprintf("c%d release(%d) → %s", o.Client, o.Fence, o.Outcome)
	case Write:
		return fmt.Sprintf("c%d write(%d) → %s", o.Client, o.Fence, o.Outcome)
	case Reset:
		return "reset: " + o.Note
	}
	return string(o.Kind)
}

func clock(ns int64) string {
	if ns == 0 {
		return "-"
	}
	return time.Unix(0, ns).UTC().Format("15:04:05.000000")
}

// Result is the verdict on a history.
type Result struct {
	// Result is porcupine's verdict: Ok, Illegal, or Unknown (timed out).
	Result porcupine.CheckResult
	// Info is what porcupine found, for visualisation.
	Info porcupine.LinearizationInfo
	// Ops is the number of operations checked, by kind.
	Ops map[Kind]int
	// Grants is the number of acquires that answered "acquired".
	Grants int
	// Took is how long porcupine ran.
	Took time.Duration
	// Prim is the primitive checked (its model draws the visualisation).
	Prim string
}

// Check checks the mutex ops of a history (Prim "") with porcupine against
// LockModel, giving up after timeout (then Result is porcupine.Unknown).
func Check(history []Op, timeout time.Duration) Result {
	return CheckPrimitive(history, PrimMutex, timeout)
}

// Save writes the history as JSON lines to path+".jsonl" and porcupine's
// HTML visualisation of res to path+".html"; it returns the two paths.
func Save(history []Op, res Result, path string) (jsonl, html string, err error) {
	return SaveWithFaults(history, nil, res, path)
}

// SaveWithFaults is Save with the injected faults drawn as annotations on a
// "faults" line of the visualisation (and listed first in the JSON lines).
func SaveWithFaults(history []Op, faults []Fault, res Result, path string) (jsonl, html string, err error) {
	jsonl, html = path+".jsonl", path+".html"
	f, err := os.Create(jsonl)
	if err != nil {
		return "", "", err
	}
	enc := json.NewEncoder(f)
	for _, fl := range faults {
		if err := enc.Encode(fl); err != nil {
			f.Close()
			return "", "", err
		}
	}
	sorted := slices.Clone(history)
	slices.SortStableFunc(sorted, func(a, b Op) int { return cmp.Compare(a.Call, b.Call) })
	for _, o := range sorted {
		if err := enc.Encode(o); err != nil {
			f.Close()
			return "", "", err
		}
	}
	if err := f.Close(); err != nil {
		return "", "", err
	}
	var notes []porcupine.Annotation
	for _, fl := range faults {
		notes = append(notes, porcupine.Annotation{Tag: "faults", Start: fl.Start, End: fl.End,
			Description: fl.Kind, Details: fl.Detail, BackgroundColor: "#fde2e2"})
	}
	res.Info.AddAnnotations(notes)
	if err := porcupine.VisualizePath(ModelFor(res.Prim), res.Info, html); err != nil {
		return "", "", fmt.Errorf("visualise: %w", err)
	}
	return jsonl, html, nil
}
