package chaos

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

const ms = int64(time.Millisecond)

// The base of hand-made histories: 1s leases.
var ttl = int64(time.Second)

func acq(client int, call, ret int64, fence uint64) Op {
	return Op{Kind: Acquire, Key: "k", Client: client, Call: call, Return: ret, TTL: ttl, Fence: fence, Outcome: OK}
}

func rel(client int, call, ret int64, fence uint64, out Outcome) Op {
	return Op{Kind: Release, Key: "k", Client: client, Call: call, Return: ret, Fence: fence, Outcome: out}
}

func wr(client int, at int64, fence uint64, out Outcome) Op {
	return Op{Kind: Write, Key: "k", Client: client, Call: at, Return: at + 1, Fence: fence, Outcome: out}
}

func TestModelAcceptsCorrectHistories(t *testing.T) {
	cases := map[string][]Op{
		"handover": {
			acq(0, 0, 1*ms, 10), wr(0, 2*ms, 10, OK), wr(0, 3*ms, 10, OK), rel(0, 4*ms, 5*ms, 10, OK),
			acq(1, 1*ms, 6*ms, 11), wr(1, 7*ms, 11, OK), rel(1, 8*ms, 9*ms, 11, OK),
		},
		// The GC pause: client 0 stalls past its TTL, client 1 takes over,
		// writes; client 0 wakes up, its write is refused and its release
		// changes nothing.
		"paused holder fenced off": {
			acq(0, 0, 1*ms, 10),
			acq(1, 2*ms, 1100*ms, 11), wr(1, 1101*ms, 11, OK),
			wr(0, 1200*ms, 10, Rejected), rel(0, 1201*ms, 1202*ms, 10, Rejected),
			acq(2, 1203*ms, 1500*ms, 12), wr(2, 1501*ms, 12, OK),
			rel(1, 1300*ms, 1301*ms, 11, Rejected),
		},
		// Fencing only refuses tokens older than what the resource has seen:
		// a stale holder writing before its successor does is accepted.
		"stale write before the successor's": {
			acq(0, 0, 1*ms, 10), acq(1, 2*ms, 1100*ms, 11),
			wr(0, 1150*ms, 10, OK), wr(1, 1160*ms, 11, OK),
		},
		"unknown release may have freed the key": {
			acq(0, 0, 1*ms, 10), rel(0, 2*ms, 0, 10, Unknown), acq(1, 3*ms, 4*ms, 11),
		},
		"unknown acquire raises the counter": {
			acq(0, 0, 1*ms, 10), rel(0, 2*ms, 3*ms, 10, OK),
			{Kind: Acquire, Key: "k", Client: 1, Call: 4 * ms, Outcome: Unknown, TTL: ttl},
			acq(2, 5*ms, 6*ms, 12),
		},
		"a non-durable backend's reset frees the key": {
			acq(0, 0, 1*ms, 10),
			{Kind: Reset, Key: "k", Client: 9, Call: 2 * ms, Return: 50 * ms, Outcome: OK, Note: "plugin killed"},
			acq(1, 60*ms, 61*ms, 11), rel(0, 70*ms, 71*ms, 10, Rejected),
		},
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			if res := Check(h, 10*time.Second); res.Result != porcupine.Ok {
				t.Fatalf("result %s, want Ok", res.Result)
			}
		})
	}
}

// TestModelCatchesViolations proves the checker can fail: each history breaks
// one promise, and Check must call it illegal.
func TestModelCatchesViolations(t *testing.T) {
	cases := map[string][]Op{
		"two valid holders at once": {
			acq(0, 0, 1*ms, 10), acq(1, 2*ms, 3*ms, 11),
		},
		"fencing token reused": {
			acq(0, 0, 1*ms, 10), rel(0, 2*ms, 3*ms, 10, OK), acq(1, 4*ms, 5*ms, 10),
		},
		"fencing token goes back": {
			acq(0, 0, 1*ms, 10), rel(0, 2*ms, 3*ms, 10, OK), acq(1, 4*ms, 5*ms, 9),
		},
		"stale release frees the successor": {
			acq(0, 0, 1*ms, 10), acq(1, 1100*ms, 1101*ms, 11),
			rel(0, 1200*ms, 1201*ms, 10, OK),
		},
		"stale release that answered false still freed the successor": {
			acq(0, 0, 1*ms, 10), acq(1, 1100*ms, 1101*ms, 11),
			rel(0, 1200*ms, 1201*ms, 10, Rejected),
			acq(2, 1300*ms, 1301*ms, 12),
		},
		"lease lost before its TTL": {
			acq(0, 0, 1*ms, 10), rel(0, 500*ms, 501*ms, 10, Rejected),
		},
		"stale write accepted": {
			acq(0, 0, 1*ms, 10), acq(1, 1100*ms, 1101*ms, 11),
			wr(1, 1102*ms, 11, OK), wr(0, 1103*ms, 10, OK),
		},
		"write with a token never granted": {
			acq(0, 0, 1*ms, 10), wr(0, 2*ms, 11, OK),
		},
		"durable backend forgot a holder": {
			acq(0, 0, 1*ms, 10), acq(1, 100*ms, 101*ms, 11),
		},
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			res := Check(h, 10*time.Second)
			if res.Result != porcupine.Illegal {
				t.Fatalf("result %s, want Illegal", res.Result)
			}
			base := filepath.Join(t.TempDir(), "history")
			jsonl, html, err := Save(h, res, base)
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
