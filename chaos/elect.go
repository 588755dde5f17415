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

// PrimElection is the primitive of a leader election key (KIND_ELECTION):
// limit 1, the one lease is the leadership, its fencing token the term.
const PrimElection = "election"

// Proclaim is a leader's replacement of its value (the Proclaim RPC) with
// the term (Fence) of the leadership it was sent under. OK: proclaimed;
// Rejected: proclaimed=false (the token did not lead); Unknown: errored.
const Proclaim Kind = "proclaim"

// ElectionModel is the porcupine model of one election key together with
// the fenced resource its leaders write to; histories are partitioned by
// key. An election is a mutex whose lease is a leadership and whose fencing
// token is the term, so a campaign is an Acquire, a resignation a Release,
// and a leader's writes carry its term: every rule of LockModel holds —
//
//   - a leadership (Acquire ok(T)) is legal only with a term above every
//     earlier one on the key (T > LastFence), including across restarts and
//     kills of the backend, and only when no other leader is certainly still
//     valid (at most one leader whose leadership has not possibly expired,
//     by its campaign's call + TTL);
//   - a resignation answered true ends the leader it names, and only that
//     one; a leadership is never lost before its TTL;
//   - writes fenced by term are accepted in non-decreasing term order;
//
// — and Proclaim adds:
//
//   - Proclaim ok(T): T is the current leader (Holder == T). A proclaim by a
//     deposed leader (another leader since, a resignation, a reset) that the
//     server accepted cannot be linearized. The model does not require T to
//     be certainly valid (it may have expired without anyone noticing: the
//     store decides), which keeps it permissive.
//   - Proclaim rejected(T): T is not the current leader, or may have expired
//     (Return >= MinExpiry) — a leader is not told it lost before its TTL;
//     then T's leadership is over.
//   - Proclaim unknown: no change (a proclaim changes only the value).
//
// Values are not in the state: what observers saw is checked by
// CheckObservations, against the campaigns and proclaims of this history.
var ElectionModel = porcupine.Model{
	Partition: LockModel.Partition,
	Init:      LockModel.Init,
	Step: func(state, input, _ any) (bool, any) {
		ok, next := electionStep(state.(lockState), input.(stepIn).op)
		return ok, next
	},
	Equal:             LockModel.Equal,
	DescribeOperation: func(input, _ any) string { return describeElection(input.(stepIn).op) },
	DescribeState: func(state any) string {
		s := state.(lockState)
		return fmt.Sprintf("leader term=%d (valid until ≥%s) last term=%d watermark=%d",
			s.Holder, clock(s.MinExpiry), s.LastFence, s.Watermark)
	},
}

func electionStep(s lockState, o *Op) (bool, lockState) {
	if o.Kind != Proclaim {
		return step(s, o)
	}
	switch o.Outcome {
	case OK:
		return s.Holder != 0 && s.Holder == o.Fence, s
	case Rejected:
		if s.Holder == o.Fence {
			if o.Return < s.MinExpiry {
				return false, s // told it lost before its TTL
			}
			s.Holder, s.MinExpiry = 0, 0
		}
	}
	return true, s
}

func describeElection(o *Op) string {
	switch o.Kind {
	case Acquire:
		if o.Outcome == OK {
			return fmt.Sprintf("c%d campaign(%q, ttl=%s) → term %d", o.Client, o.Value, time.Duration(o.TTL), o.Fence)
		}
		return fmt.Sprintf("c%d campaign(%q, ttl=%s) → %s", o.Client, o.Value, time.Duration(o.TTL), o.Outcome)
	case Release:
		return fmt.Sprintf("c%d resign(term %d) → %s", o.Client, o.Fence, o.Outcome)
	case Proclaim:
		return fmt.Sprintf("c%d proclaim(term %d, %q) → %s", o.Client, o.Fence, o.Value, o.Outcome)
	}
	return describe(o)
}

// Observation is one message of an Observe stream as a client received it:
// the leader it names (None: no leader) and when it arrived.
type Observation struct {
	Client int `json:"client"`
	// Stream numbers a client's streams (a stream that ends, on a fault, is
	// opened again under the next number); ordering is promised per stream.
	Stream int    `json:"stream"`
	Key    string `json:"key"`
	At     int64  `json:"at"` // Unix ns when the client received it
	None   bool   `json:"none,omitempty"`
	Term   uint64 `json:"term,omitempty"`
	Value  string `json:"value,omitempty"`
	Holder string `json:"holder,omitempty"`
}

// ElectionValue is the value client c proclaims as the n-th of its
// campaign seq (n = 0: the campaign's own value). Every value of a run is
// unique, so an observed value names the operation that set it.
func ElectionValue(client, seq, n int) string {
	return fmt.Sprintf("c%d.s%d.v%d", client, seq, n)
}

// CheckObservations checks what Observe streams saw against the election
// ops of the history (Prim PrimElection) and returns every violation found
// (none: the observations are legal). Each message of a stream names a
// state of the key at some instant after the stream opened and before the
// message arrived; without a lower bound in time such a read cannot be
// placed by porcupine, so the rules are checked directly:
//
//   - on one stream, terms never go back (a message naming no leader may
//     come between; a later leader's term is never below an earlier one's);
//   - every value seen was set under the term it is seen with: the
//     campaign that answered that term, or a proclaim sent under that term;
//     a campaign whose outcome is unknown may have got any term no answered
//     campaign got, and so may a campaign that waited and was answered busy:
//     the engine gives back at once a lease won after its caller's wait ran
//     out, and for that instant the key had a leader nobody was told of;
//   - no value is seen whose operation could not have set it: a campaign
//     answered busy without waiting (one attempt), a proclaim answered
//     proclaimed=false, or any operation before it was called;
//   - within one term, a stream never goes back to a value whose proclaim
//     had answered before the one it saw was sent.
func CheckObservations(history []Op, obs []Observation) []string {
	byValue := map[string]*Op{}
	termOwner := map[uint64]string{} // term -> the value its answered campaign set
	for i := range history {
		o := &history[i]
		if o.Prim != PrimElection || (o.Kind != Acquire && o.Kind != Proclaim) || o.Value == "" {
			continue
		}
		byValue[o.Value] = o
		if o.Kind == Acquire && o.Outcome == OK {
			termOwner[o.Fence] = o.Value
		}
	}
	var bad []string
	report := func(ob Observation, format string, args ...any) {
		bad = append(bad, fmt.Sprintf("c%d stream %d at %s: ", ob.Client, ob.Stream, clock(ob.At))+fmt.Sprintf(format, args...))
	}
	type streamID struct{ client, stream int }
	sorted := slices.Clone(obs)
	slices.SortStableFunc(sorted, func(a, b Observation) int {
		return cmp.Or(cmp.Compare(a.Client, b.Client), cmp.Compare(a.Stream, b.Stream), cmp.Compare(a.At, b.At))
	})
	type seen struct {
		term uint64
		op   *Op // the op whose value the stream saw last under term
	}
	last := map[streamID]seen{}
	for _, ob := range sorted {
		if ob.None {
			continue
		}
		id := streamID{ob.Client, ob.Stream}
		prev := last[id]
		if ob.Term < prev.term {
			report(ob, "term went back: %d after %d", ob.Term, prev.term)
		}
		o, ok := byValue[ob.Value]
		if !ok {
			report(ob, "term %d with value %q, which no campaign or proclaim of the run set", ob.Term, ob.Value)
			continue
		}
		switch {
		case ob.At < o.Call:
			report(ob, "value %q before its %s was called (%s)", ob.Value, o.Kind, clock(o.Call))
		case o.Kind == Acquire && o.Outcome == Busy && o.Wait == 0:
			report(ob, "value %q of a one-attempt campaign answered busy, as leader with term %d", ob.Value, ob.Term)
		case o.Kind == Proclaim && o.Outcome == Rejected:
			report(ob, "value %q of a proclaim answered proclaimed=false, under term %d", ob.Value, ob.Term)
		case o.Kind == Acquire && o.Outcome != OK:
			if owner, taken := termOwner[ob.Term]; taken {
				report(ob, "value %q of a campaign answered %s under term %d, which campaign %q got", ob.Value, o.Outcome, ob.Term, owner)
			}
		case o.Kind == Acquire && ob.Term < o.Fence && ob.At <= o.Return:
			// An earlier attempt of this campaign, seen while the call was
			// still under way: its grant, with the campaign's value, was
			// won after that attempt's caller had gone (a dropped
			// connection, a re-sent Acquire) and given back at once by the
			// engine, so the call went on and won o.Fence. Legal unless
			// another campaign was answered that term.
			if owner, taken := termOwner[ob.Term]; taken {
				report(ob, "value %q of a campaign that got term %d, under term %d, which campaign %q got", ob.Value, o.Fence, ob.Term, owner)
			}
		case o.Fence != ob.Term:
			report(ob, "value %q set under term %d seen with term %d", ob.Value, o.Fence, ob.Term)
		}
		if prev.term == ob.Term && prev.op != nil && o.Outcome == OK && o.Return < prev.op.Call {
			// Both set under this term: o answered before the one seen
			// earlier was sent, so it took effect first; seeing it after
			// is going back in time.
			report(ob, "value went back under term %d: %q after %q", ob.Term, o.Value, prev.op.Value)
		}
		last[id] = seen{term: ob.Term, op: o}
	}
	return bad
}

// SaveObservations writes the election ops of history and the observations,
// in time order, as JSON lines to path (for a run whose observations
// CheckObservations refused).
func SaveObservations(history []Op, obs []Observation, path string) error {
	type line struct {
		at int64
		v  any
	}
	var lines []line
	for _, o := range history {
		if o.Prim == PrimElection {
			lines = append(lines, line{o.Call, o})
		}
	}
	for _, ob := range obs {
		lines = append(lines, line{ob.At, ob})
	}
	slices.SortStableFunc(lines, func(a, b line) int { return cmp.Compare(a.at, b.at) })
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, l := range lines {
		if err := enc.Encode(l.v); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}
