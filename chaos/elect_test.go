package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// Hand-made election histories: key "e", 1s leaderships, values named by
// ElectionValue(client, seq, n).
func camp(client int, call, ret int64, term uint64, seq int) Op {
	return Op{Kind: Acquire, Prim: PrimElection, Key: "e", Client: client, Call: call, Return: ret, TTL: ttl,
		Fence: term, Outcome: OK, Value: ElectionValue(client, seq, 0)}
}

func campOut(client int, call, ret int64, seq int, out Outcome) Op {
	o := camp(client, call, ret, 0, seq)
	o.Outcome = out
	return o
}

func procl(client int, call, ret int64, term uint64, seq, n int, out Outcome) Op {
	return Op{Kind: Proclaim, Prim: PrimElection, Key: "e", Client: client, Call: call, Return: ret, Fence: term,
		Outcome: out, Value: ElectionValue(client, seq, n)}
}

func resign(client int, call, ret int64, term uint64, out Outcome) Op {
	return Op{Kind: Release, Prim: PrimElection, Key: "e", Client: client, Call: call, Return: ret, Fence: term, Outcome: out}
}

func ewr(client int, at int64, term uint64, out Outcome) Op {
	return Op{Kind: Write, Prim: PrimElection, Key: "e", Client: client, Call: at, Return: at + 1, Fence: term, Outcome: out}
}

func checkElection(t *testing.T, h []Op) porcupine.CheckResult {
	t.Helper()
	return CheckPrimitive(h, PrimElection, 10*time.Second).Result
}

func TestElectionModelAcceptsCorrectHistories(t *testing.T) {
	cases := map[string][]Op{
		"campaign, proclaim, resign, next leader": {
			camp(0, 0, 1*ms, 10, 0), procl(0, 2*ms, 3*ms, 10, 0, 1, OK), ewr(0, 4*ms, 10, OK),
			procl(0, 5*ms, 6*ms, 10, 0, 2, OK), resign(0, 7*ms, 8*ms, 10, OK),
			camp(1, 1*ms, 9*ms, 11, 0), procl(1, 10*ms, 11*ms, 11, 0, 1, OK), resign(1, 12*ms, 13*ms, 11, OK),
		},
		// Leader 0 is frozen past its TTL; 1 is elected; 0 wakes up, its
		// proclaim is refused and its write fenced off.
		"a frozen leader deposed: its proclaim refused": {
			camp(0, 0, 1*ms, 10, 0),
			camp(1, 2*ms, 1100*ms, 11, 0), ewr(1, 1101*ms, 11, OK),
			procl(0, 1200*ms, 1201*ms, 10, 0, 1, Rejected), ewr(0, 1202*ms, 10, Rejected),
			resign(0, 1203*ms, 1204*ms, 10, Rejected),
			procl(1, 1205*ms, 1206*ms, 11, 0, 1, OK),
		},
		"an expired leader's proclaim refused with nobody elected since": {
			camp(0, 0, 1*ms, 10, 0), procl(0, 1100*ms, 1101*ms, 10, 0, 1, Rejected),
			camp(1, 1102*ms, 1103*ms, 11, 0),
		},
		"unknown proclaim and unknown resign": {
			camp(0, 0, 1*ms, 10, 0), procl(0, 2*ms, 0, 10, 0, 1, Unknown), resign(0, 3*ms, 0, 10, Unknown),
			camp(1, 4*ms, 5*ms, 11, 0),
		},
		"a campaign with an unknown outcome raises the term": {
			campOut(0, 0, 0, 0, Unknown), camp(1, 1*ms, 2*ms, 12, 0),
		},
		"a non-durable backend's reset ends the leadership; terms still increase": {
			camp(0, 0, 1*ms, 10, 0),
			{Kind: Reset, Prim: PrimElection, Key: "e", Client: 9, Call: 2 * ms, Return: 3 * ms, Outcome: OK},
			camp(1, 4*ms, 5*ms, 11, 0), procl(0, 6*ms, 7*ms, 10, 0, 1, Rejected),
		},
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			if res := checkElection(t, h); res != porcupine.Ok {
				t.Fatalf("a legal history was judged %s", res)
			}
		})
	}
}

func TestElectionModelCatchesViolations(t *testing.T) {
	cases := map[string][]Op{
		"two leaders at once": {
			camp(0, 0, 1*ms, 10, 0), camp(1, 2*ms, 3*ms, 11, 0),
		},
		"a term going back": {
			camp(0, 0, 1*ms, 10, 0), resign(0, 2*ms, 3*ms, 10, OK), camp(1, 4*ms, 5*ms, 9, 0),
		},
		"a term reused": {
			camp(0, 0, 1*ms, 10, 0), resign(0, 2*ms, 3*ms, 10, OK), camp(1, 4*ms, 5*ms, 10, 0),
		},
		"a term going back across a reset": {
			camp(0, 0, 1*ms, 10, 0),
			{Kind: Reset, Prim: PrimElection, Key: "e", Client: 9, Call: 2 * ms, Return: 3 * ms, Outcome: OK},
			camp(1, 4*ms, 5*ms, 3, 0),
		},
		"a deposed leader's proclaim accepted": {
			camp(0, 0, 1*ms, 10, 0), camp(1, 2*ms, 1100*ms, 11, 0),
			procl(0, 1200*ms, 1201*ms, 10, 0, 1, OK),
		},
		"a resigned leader's proclaim accepted": {
			camp(0, 0, 1*ms, 10, 0), resign(0, 2*ms, 3*ms, 10, OK), procl(0, 4*ms, 5*ms, 10, 0, 1, OK),
		},
		"a proclaim accepted after a reset lost the leadership": {
			camp(0, 0, 1*ms, 10, 0),
			{Kind: Reset, Prim: PrimElection, Key: "e", Client: 9, Call: 2 * ms, Return: 3 * ms, Outcome: OK},
			procl(0, 4*ms, 5*ms, 10, 0, 1, OK),
		},
		"a leader refused before its TTL": {
			camp(0, 0, 1*ms, 10, 0), procl(0, 2*ms, 3*ms, 10, 0, 1, Rejected),
		},
		"a resign that deposed the next leader": {
			camp(0, 0, 1*ms, 10, 0), camp(1, 2*ms, 1100*ms, 11, 0),
			resign(0, 1200*ms, 1201*ms, 10, OK),
		},
		"a stale leader's write accepted after the new leader's": {
			camp(0, 0, 1*ms, 10, 0), camp(1, 2*ms, 1100*ms, 11, 0),
			ewr(1, 1101*ms, 11, OK), ewr(0, 1102*ms, 10, OK),
		},
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			if res := checkElection(t, h); res != porcupine.Illegal {
				t.Fatalf("an illegal history was judged %s", res)
			}
		})
	}
}

func obsOf(client, stream int, at int64, term uint64, value string) Observation {
	return Observation{Client: client, Stream: stream, Key: "e", At: at, Term: term, Value: value}
}

func noLeader(client, stream int, at int64) Observation {
	return Observation{Client: client, Stream: stream, Key: "e", At: at, None: true}
}

// A history for the observation checks: leader 0 (term 10) proclaims v1
// (ok), v2 (refused: it was deposed by then, in this made-up history) and
// resigns; 1 is elected with term 11 and proclaims v1 with an unknown
// outcome; 2's campaign is busy, 3's unknown.
var observedHistory = []Op{
	camp(0, 0, 1*ms, 10, 0), procl(0, 2*ms, 3*ms, 10, 0, 1, OK), procl(0, 4*ms, 5*ms, 10, 0, 2, Rejected),
	resign(0, 6*ms, 7*ms, 10, OK),
	camp(1, 8*ms, 9*ms, 11, 0), procl(1, 10*ms, 0, 11, 0, 1, Unknown), resign(1, 12*ms, 13*ms, 11, OK),
	campOut(2, 1*ms, 2*ms, 0, Busy), campOut(3, 14*ms, 0, 0, Unknown),
	waitedBusy(4, 15*ms, 30*ms, 10*ms),
	// A campaign answered term 21 whose earlier attempt won term 20 and
	// was given back while the call went on.
	camp(7, 40*ms, 50*ms, 21, 0),
}

// waitedBusy is a campaign that waited up to wait and was answered busy.
func waitedBusy(client int, call, ret, wait int64) Op {
	o := campOut(client, call, ret, 0, Busy)
	o.Wait = wait
	return o
}

func TestObservationsAcceptCorrectStreams(t *testing.T) {
	obs := []Observation{
		noLeader(5, 0, 0),
		obsOf(5, 0, 2*ms, 10, ElectionValue(0, 0, 0)), obsOf(5, 0, 4*ms, 10, ElectionValue(0, 0, 1)),
		noLeader(5, 0, 8*ms), obsOf(5, 0, 10*ms, 11, ElectionValue(1, 0, 0)),
		obsOf(5, 0, 12*ms, 11, ElectionValue(1, 0, 1)), // the unknown proclaim took effect
		noLeader(5, 0, 14*ms),
		// The unknown campaign got a term nobody answered.
		obsOf(5, 0, 20*ms, 13, ElectionValue(3, 0, 0)),
		// The waiting campaign won as its wait ran out and the server gave
		// the lease back at once: a leader for an instant.
		obsOf(5, 0, 25*ms, 14, ElectionValue(4, 0, 0)),
		// The earlier attempt of campaign 7, seen before its call returned.
		obsOf(5, 0, 45*ms, 20, ElectionValue(7, 0, 0)), obsOf(5, 0, 50*ms, 21, ElectionValue(7, 0, 0)),
		// Another stream, opened late: starts from the current state.
		obsOf(6, 1, 11*ms, 11, ElectionValue(1, 0, 0)),
		// A stream opened again after a fault may start below where the
		// previous one ended: ordering is per stream.
		obsOf(6, 0, 3*ms, 10, ElectionValue(0, 0, 1)), obsOf(6, 2, 3*ms+1, 10, ElectionValue(0, 0, 0)),
	}
	if bad := CheckObservations(observedHistory, obs); len(bad) > 0 {
		t.Fatalf("legal observations judged illegal:\n%s", strings.Join(bad, "\n"))
	}
}

func TestObservationsCatchViolations(t *testing.T) {
	cases := map[string]struct {
		obs  []Observation
		want string
	}{
		"a term going back on one stream": {[]Observation{
			obsOf(5, 0, 10*ms, 11, ElectionValue(1, 0, 0)), obsOf(5, 0, 11*ms, 10, ElectionValue(0, 0, 1)),
		}, "term went back"},
		"a term going back across a no-leader message": {[]Observation{
			obsOf(5, 0, 10*ms, 11, ElectionValue(1, 0, 0)), noLeader(5, 0, 11*ms), obsOf(5, 0, 12*ms, 10, ElectionValue(0, 0, 0)),
		}, "term went back"},
		"a value nobody proclaimed": {[]Observation{
			obsOf(5, 0, 10*ms, 11, "not-a-proclaimed-value"),
		}, "no campaign or proclaim"},
		"a value the leader proclaimed later, under a term it never had": {[]Observation{
			obsOf(5, 0, 10*ms, 11, ElectionValue(0, 0, 1)),
		}, "seen with term 11"},
		"a refused proclaim's value": {[]Observation{
			obsOf(5, 0, 6*ms, 10, ElectionValue(0, 0, 2)),
		}, "proclaimed=false"},
		"a busy campaign's value": {[]Observation{
			obsOf(5, 0, 3*ms, 7, ElectionValue(2, 0, 0)),
		}, "one-attempt campaign answered busy"},
		"a waiting busy campaign's value under a term another campaign got": {[]Observation{
			obsOf(5, 0, 25*ms, 11, ElectionValue(4, 0, 0)),
		}, "which campaign"},
		"a value before its proclaim was sent": {[]Observation{
			obsOf(5, 0, 1*ms+500, 10, ElectionValue(0, 0, 1)),
		}, "before its proclaim was called"},
		"an unknown campaign's value under a term another campaign got": {[]Observation{
			obsOf(5, 0, 20*ms, 11, ElectionValue(3, 0, 0)),
		}, "which campaign"},
		"a campaign's value under an earlier term after its call returned": {[]Observation{
			obsOf(5, 0, 51*ms, 20, ElectionValue(7, 0, 0)),
		}, "seen with term 20"},
		"a campaign's value under an earlier term another campaign got": {[]Observation{
			obsOf(5, 0, 45*ms, 11, ElectionValue(7, 0, 0)),
		}, "which campaign"},
		"a value going back within a term": {[]Observation{
			obsOf(5, 0, 4*ms, 10, ElectionValue(0, 0, 1)), obsOf(5, 0, 5*ms, 10, ElectionValue(0, 0, 0)),
		}, "value went back"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			bad := CheckObservations(observedHistory, c.obs)
			if len(bad) == 0 {
				t.Fatal("illegal observations judged legal")
			}
			if !strings.Contains(strings.Join(bad, "\n"), c.want) {
				t.Fatalf("violations %q do not name %q", bad, c.want)
			}
		})
	}
}
