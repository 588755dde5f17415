package main

import (
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
)

// A holdfast row's floor is what the architecture cannot avoid, computed
// from rows of the same run: the two client RPCs of an Acquire+Release (the
// echo row, a connect-go call that does nothing), the two plugin hops (the
// engine calling the memory plugin process, without batching, against the
// engine on the memory backend in process), and the peer's own operation on
// the same store (etcd: concurrency.Mutex with a reused session; Redis:
// redislock; PostgreSQL: advisory locks; memory: nothing).
//
// At concurrency 1 the floor is a latency, the parts' p50s added up:
//
//	2 × echo p50 + (hop row p50 − in-process row p50) + peer p50
//
// Above it the floor is a throughput: the parts share the machine's cores,
// so their times per operation add up:
//
//	1 / (2 / echo ops/s + 1 / hop row ops/s + 1 / peer ops/s)
//
// A row at its floor has "over floor" 1.00×; batching across callers is what
// lets a row above concurrency 1 beat it (over floor below 1).
type floorRow struct {
	Backend     string  `json:"backend"`
	Concurrency int     `json:"concurrency"`
	Peer        string  `json:"peer,omitempty"`
	P50         float64 `json:"p50_us"`
	OpsPerSec   float64 `json:"ops_per_sec"`
	// FloorP50 (concurrency 1) or FloorOps (above) is the floor.
	FloorP50 float64 `json:"floor_p50_us,omitempty"`
	FloorOps float64 `json:"floor_ops_per_sec,omitempty"`
	// Over is the row over its floor: p50 / floor p50 at concurrency 1,
	// floor ops/s / ops/s above (both: below 1 is better than the floor).
	Over float64 `json:"over_floor"`
}

// Names of the rows the floors are computed from.
const (
	echoRow      = "connect-go echo (floor)"
	inprocRow    = "engine+memory in-process (no RPC)"
	hopRow       = "engine+memory plugin (plugin hop, unbatched)"
	hopBatchRow  = "engine+memory plugin (batched)"
	etcdNewRow   = "etcd concurrency.Mutex, new session per lock"
	etcdReuseRow = "etcd concurrency.Mutex, session reused"
	redisPeerRow = "bsm/redislock Obtain+Release"
	pgPeerRow    = "pg_try_advisory_lock+unlock"
)

// peerRows is each backend's peer for its floor.
var peerRows = map[string]string{"etcd": etcdReuseRow, "redis": redisPeerRow, "postgres": pgPeerRow}

func findRow(rows []throughput, name string, conc int) *throughput {
	for i := range rows {
		if rows[i].Name == name && rows[i].Concurrency == conc {
			return &rows[i]
		}
	}
	return nil
}

// floors computes every holdfast row's floor from the same run's rows.
func floors(rows []throughput) []floorRow {
	var out []floorRow
	for _, r := range rows {
		b, ok := strings.CutPrefix(r.Name, "holdfast/")
		if !ok {
			continue
		}
		b, _, _ = strings.Cut(b, " ")
		c := r.Concurrency
		echo, inproc, hop := findRow(rows, echoRow, c), findRow(rows, inprocRow, c), findRow(rows, hopRow, c)
		if echo == nil || inproc == nil || hop == nil || r.OpsPerSec == 0 {
			continue
		}
		f := floorRow{Backend: b, Concurrency: c, P50: r.P50, OpsPerSec: r.OpsPerSec}
		var peer *throughput
		if name, ok := peerRows[b]; ok {
			if peer = findRow(rows, name, c); peer == nil || peer.OpsPerSec == 0 {
				continue
			}
			f.Peer = name
		}
		if c == 1 {
			f.FloorP50 = 2*echo.P50 + max(hop.P50-inproc.P50, 0)
			if peer != nil {
				f.FloorP50 += peer.P50
			}
			f.Over = r.P50 / f.FloorP50
		} else {
			perOp := 2/echo.OpsPerSec + 1/hop.OpsPerSec
			if peer != nil {
				perOp += 1 / peer.OpsPerSec
			}
			f.FloorOps = 1 / perOp
			f.Over = f.FloorOps / r.OpsPerSec
		}
		out = append(out, f)
	}
	return out
}

func printFloors(fs []floorRow) {
	if len(fs) == 0 {
		return
	}
	fmt.Println("\nFloors: two client RPCs (echo) + two plugin hops (unbatched hop row) + the peer's own operation, from this run's rows")
	fmt.Println("(concurrency 1: p50 against the parts' p50s added up; above: ops/s against the parts' times per operation added up;")
	fmt.Println(" over floor below 1.00× is better than the floor, which only batching across callers can do)")
	w := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "backend\tconc\tholdfast\tfloor\tover floor\tpeer in the floor\t")
	for _, f := range fs {
		got, floor := fmt.Sprintf("%.0f µs p50", f.P50), fmt.Sprintf("%.0f µs p50", f.FloorP50)
		if f.Concurrency > 1 {
			got, floor = fmt.Sprintf("%.0f ops/s", f.OpsPerSec), fmt.Sprintf("%.0f ops/s", f.FloorOps)
		}
		peer := f.Peer
		if peer == "" {
			peer = "(none)"
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%.2f×\t%s\t\n", f.Backend, f.Concurrency, got, floor, f.Over, peer)
	}
	_ = w.Flush()
}

// printEtcdMutex prints the etcd rows against both concurrency.Mutex
// variants.
func printEtcdMutex(rows []throughput) {
	var lines []string
	for _, r := range rows {
		if r.Name != "holdfast/etcd Acquire+Release" {
			continue
		}
		n, u := findRow(rows, etcdNewRow, r.Concurrency), findRow(rows, etcdReuseRow, r.Concurrency)
		if n == nil || u == nil || n.OpsPerSec == 0 || u.OpsPerSec == 0 {
			continue
		}
		lines = append(lines, fmt.Sprintf("%d\t%.0f\t%.0f\t%.2f×\t%.0f\t%.2f×\t", r.Concurrency, r.OpsPerSec,
			n.OpsPerSec, r.OpsPerSec/n.OpsPerSec, u.OpsPerSec, r.OpsPerSec/u.OpsPerSec))
	}
	if len(lines) == 0 {
		return
	}
	fmt.Println("\netcd: holdfast against both concurrency.Mutex variants (ops/s)")
	w := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "conc\tholdfast\tnew session per lock\tratio\tsession reused\tratio\t")
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	_ = w.Flush()
}
