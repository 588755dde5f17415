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
//	2 × echo p50 + max(hop row p50 − in-process row p50, 0) + peer p50
//
// with two peers, so two floors: the peer run back to back (the store kept
// busy), and the peer paced (paced.go): its two calls each after a pause of
// half the rest of the floor, as the holdfast path's store calls come, with
// only the calls timed. The paced floor is the one the c1 target is judged
// on; the back-to-back one charges holdfast for the store idling through a
// pause that its client RPC and plugin hop cannot avoid.
//
// Above concurrency 1 the floor is a throughput: the parts share the
// machine's cores, so their times per operation add up (the store is seldom
// idle with many callers, so there is no paced floor):
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
	// FloorPacedP50 is the concurrency-1 floor with the paced peer
	// (PeerPaced, each store call after PauseUs), OverPaced the row over
	// it. Memory has no store call to pace: its paced floor is its floor.
	PeerPaced     string  `json:"peer_paced,omitempty"`
	PauseUs       float64 `json:"pause_us,omitempty"`
	FloorPacedP50 float64 `json:"floor_paced_p50_us,omitempty"`
	OverPaced     float64 `json:"over_floor_paced,omitempty"`
}

// Names of the rows the floors are computed from.
const (
	echoRow       = "connect-go echo (floor)"
	inprocRow     = "engine+memory in-process (no RPC)"
	hopRow        = "engine+memory plugin (plugin hop, unbatched)"
	hopBatchRow   = "engine+memory plugin (batched)"
	etcdNewRow    = "etcd concurrency.Mutex, new session per lock"
	etcdReuseRow  = "etcd concurrency.Mutex, session reused"
	redisPeerRow  = "bsm/redislock Obtain+Release"
	pgPeerRow     = "pg_try_advisory_lock+unlock"
	pacedSuffix   = ", paced"
	etcdPacedRow  = etcdReuseRow + pacedSuffix
	redisPacedRow = redisPeerRow + pacedSuffix
	pgPacedRow    = pgPeerRow + pacedSuffix
)

// peerRows is each backend's peer for its floor; pacedPeerRows the same
// peer paced, for the c1 paced floor.
var (
	peerRows      = map[string]string{"etcd": etcdReuseRow, "redis": redisPeerRow, "postgres": pgPeerRow}
	pacedPeerRows = map[string]string{"etcd": etcdPacedRow, "redis": redisPacedRow, "postgres": pgPacedRow}
)

func findRow(rows []throughput, name string, conc int) *throughput {
	for i := range rows {
		if rows[i].Name == name && rows[i].Concurrency == conc {
			return &rows[i]
		}
	}
	return nil
}

// pathFloorP50 is the part of a concurrency-c latency floor that is not the
// peer: two client RPCs and two plugin hops.
func pathFloorP50(rows []throughput, c int) (float64, bool) {
	echo, inproc, hop := findRow(rows, echoRow, c), findRow(rows, inprocRow, c), findRow(rows, hopRow, c)
	if echo == nil || inproc == nil || hop == nil {
		return 0, false
	}
	return 2*echo.P50 + max(hop.P50-inproc.P50, 0), true
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
		echo, hop := findRow(rows, echoRow, c), findRow(rows, hopRow, c)
		path, ok := pathFloorP50(rows, c)
		if !ok || r.OpsPerSec == 0 {
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
			f.FloorP50 = path
			if peer != nil {
				f.FloorP50 += peer.P50
			}
			f.Over = r.P50 / f.FloorP50
			f.pace(rows, path)
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

// pace fills in f's paced floor from the paced peer's row; it stays empty
// when a store backend's paced row is missing.
func (f *floorRow) pace(rows []throughput, path float64) {
	name, ok := pacedPeerRows[f.Backend]
	if !ok {
		f.FloorPacedP50, f.OverPaced = f.FloorP50, f.Over
		return
	}
	p := findRow(rows, name, 1)
	if p == nil || p.Ops == 0 {
		return
	}
	f.PeerPaced, f.PauseUs = name, p.PauseUs
	f.FloorPacedP50 = path + p.P50
	f.OverPaced = f.P50 / f.FloorPacedP50
}

func printFloors(fs []floorRow) {
	if len(fs) == 0 {
		return
	}
	fmt.Println("\nFloors: two client RPCs (echo) + two plugin hops (unbatched hop row) + the peer's own operation, from this run's rows")
	fmt.Println("(concurrency 1: p50 against the parts' p50s added up, with the peer back to back and paced; above: ops/s against")
	fmt.Println(" the parts' times per operation added up; over floor below 1.00× is better than the floor, which only batching")
	fmt.Println(" across callers can do)")
	for _, f := range fs {
		if f.PauseUs > 0 {
			fmt.Printf("paced: the peer's two store calls each after a %.0f µs pause (-pace %s; half of 2 × echo + hop), only the calls timed\n", f.PauseUs, *paceMode)
			break
		}
	}
	w := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "backend\tconc\tholdfast\tfloor, back to back\tover\tfloor, paced\tover\tpeer in the floor\t")
	for _, f := range fs {
		got, floor := fmt.Sprintf("%.0f µs p50", f.P50), fmt.Sprintf("%.0f µs p50", f.FloorP50)
		paced, overPaced := "", ""
		if f.FloorPacedP50 > 0 {
			paced, overPaced = fmt.Sprintf("%.0f µs p50", f.FloorPacedP50), fmt.Sprintf("%.2f×", f.OverPaced)
		}
		if f.Concurrency > 1 {
			got, floor = fmt.Sprintf("%.0f ops/s", f.OpsPerSec), fmt.Sprintf("%.0f ops/s", f.FloorOps)
		}
		peer := f.Peer
		if peer == "" {
			peer = "(none)"
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%.2f×\t%s\t%s\t%s\t\n", f.Backend, f.Concurrency, got, floor, f.Over, paced, overPaced, peer)
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
