// Command chaos-client is one lock client of the chaos harness, run as its
// own process so the harness can SIGSTOP it while it holds a lease (the
// GC-pause case). It reads commands from stdin and writes events to stdout,
// one JSON object a line; diagnostics go to stderr.
//
// For each command it acquires the key, or the set of keys (Key and More,
// one lease), or a semaphore's permits or a read-write lock's shared or
// exclusive grant, through sdk-go (TryLock, or Lock with a wait), reports the
// outcome for each key, waits for the harness's "go" line (the harness may
// pause the process first), writes to the fenced resource under each key
// with that key's fencing token from the acquisition — as a naive client
// would after a pause — then (a semaphore's or read-write lock's grant) tells
// the resource it is done writing, unlocks and reports that outcome for each
// key. Times are Unix nanoseconds on the wall clock, which every process of a
// run shares.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	holdfast "github.com/holdfast/holdfast/sdk-go"
)

// Command is one lock cycle to run.
type Command struct {
	Seq int    `json:"seq"`
	Key string `json:"key"`
	// More: the other keys of a multi-key lease.
	More   []string `json:"more,omitempty"`
	TTLms  int64    `json:"ttl_ms"`
	WaitMs int64    `json:"wait_ms"`
	WorkMs int64    `json:"work_ms"`
	Writes int      `json:"writes"`
	// Prim: "" for a lock, "semaphore" (Limit, Permits) or "rwlock"
	// (Writer: an exclusive grant, else a shared one).
	Prim    string `json:"prim,omitempty"`
	Limit   int    `json:"limit,omitempty"`
	Permits int    `json:"permits,omitempty"`
	Writer  bool   `json:"writer,omitempty"`
}

// Event reports one finished operation, or "done" for the end of a cycle.
type Event struct {
	Seq     int    `json:"seq"`
	Op      string `json:"op"` // acquire, release, done
	Key     string `json:"key,omitempty"`
	Call    int64  `json:"call,omitempty"`
	Return  int64  `json:"return,omitempty"`
	Outcome string `json:"outcome,omitempty"` // ok, busy, rejected, unknown
	Fence   uint64 `json:"fence,omitempty"`
	Err     string `json:"err,omitempty"`
	// Holding: the client holds a guard and waits for the harness's "go".
	Holding bool `json:"holding,omitempty"`
	// Writes the resource accepted and refused in this cycle; LostBefore is
	// how many of them the SDK already knew to be after the lease's loss.
	Accepted   int `json:"accepted,omitempty"`
	Refused    int `json:"refused,omitempty"`
	LostBefore int `json:"lost_before,omitempty"`
}

func main() {
	server := flag.String("server", "", "holdfast server base URL")
	resource := flag.String("resource", "", "fenced resource base URL")
	id := flag.Int("id", 0, "client id")
	flag.Parse()
	if err := run(*server, *resource, *id); err != nil {
		fmt.Fprintln(os.Stderr, "chaos-client:", err)
		os.Exit(1)
	}
}

func run(server, resource string, id int) error {
	// Our own transport, to see Release attempts that failed in transit.
	tr := &watchTransport{base: http.DefaultTransport.(*http.Transport).Clone()}
	defer tr.base.CloseIdleConnections()
	c, err := holdfast.Dial(server, holdfast.WithHolder(fmt.Sprintf("chaos-client-%d", id)),
		holdfast.WithHTTPClient(&http.Client{Transport: tr}),
		holdfast.WithBackoff(holdfast.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond, Multiplier: 2}))
	if err != nil {
		return err
	}
	defer c.Close()
	hc := &http.Client{Timeout: 5 * time.Second}
	in := bufio.NewScanner(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var cmd Command
		if err := json.Unmarshal(in.Bytes(), &cmd); err != nil {
			return fmt.Errorf("command %q: %w", in.Text(), err)
		}
		if err := cycle(c, tr, hc, resource, id, cmd, in, out); err != nil {
			return err
		}
	}
	return in.Err()
}

func now() int64 { return time.Now().UnixNano() }

func cycle(c *holdfast.Client, tr *watchTransport, hc *http.Client, resource string, id int, cmd Command, in *bufio.Scanner, out *json.Encoder) error {
	ttl := time.Duration(cmd.TTLms) * time.Millisecond
	wait := time.Duration(cmd.WaitMs) * time.Millisecond
	keys := append([]string{cmd.Key}, cmd.More...)
	var l holdfast.Lock
	switch cmd.Prim {
	case "semaphore":
		l = c.Semaphore(cmd.Key, cmd.Limit).Permits(cmd.Permits)
	case "rwlock":
		if cmd.Writer {
			l = c.RWLock(cmd.Key).Write()
		} else {
			l = c.RWLock(cmd.Key).Read()
		}
	default:
		l = c.Lock(cmd.Key, cmd.More...)
	}
	l = l.TTL(ttl).Wait(wait)
	ctx, cancel := context.WithTimeout(context.Background(), wait+5*time.Second)
	call := now()
	var g *holdfast.Guard
	var err error
	if wait > 0 {
		g, err = l.Lock(ctx)
	} else {
		g, err = l.TryLock(ctx)
	}
	ret := now()
	cancel()
	// One acquire event per key: the history is checked per key.
	fences := make([]uint64, len(keys))
	for i, k := range keys {
		ev := Event{Seq: cmd.Seq, Op: "acquire", Key: k, Call: call, Return: ret}
		switch {
		case err == nil:
			ev.Outcome = "ok"
			var ferr error
			if fences[i], ferr = g.FencingTokenFor(k); ferr != nil {
				// Lost between the answer and now: the lease was granted
				// but its token is unknown here; an unknown outcome.
				ev.Outcome, ev.Err = "unknown", ferr.Error()
			}
			ev.Fence = fences[i]
		case errors.Is(err, holdfast.ErrNotAcquired):
			ev.Outcome, ev.Err = "busy", err.Error()
		default:
			ev.Outcome, ev.Err = "unknown", err.Error()
		}
		ev.Holding = g != nil && i == len(keys)-1 // the harness answers the last one
		if err := out.Encode(ev); err != nil {
			return err
		}
	}
	if g == nil {
		return out.Encode(Event{Seq: cmd.Seq, Op: "done"})
	}
	// The harness answers "go" — after pausing this process, when it chose to.
	if !in.Scan() {
		return fmt.Errorf("stdin closed while holding %q", keys)
	}
	res := Event{Seq: cmd.Seq, Op: "release"}
	for i := range cmd.Writes {
		if i > 0 && cmd.WorkMs > 0 {
			// Simulated work between writes (not synchronisation).
			time.Sleep(time.Duration(cmd.WorkMs/int64(cmd.Writes)) * time.Millisecond)
		}
		for j, k := range keys {
			if fences[j] == 0 {
				continue
			}
			lost := g.Err() != nil
			acc, err := write(hc, resource, "/write", WriteRequest{Key: k, Fence: fences[j], Client: id,
				Prim: cmd.Prim, Limit: cmd.Limit, Permits: cmd.Permits})
			switch {
			case err != nil:
				fmt.Fprintln(os.Stderr, "chaos-client: write:", err)
			case acc:
				res.Accepted++
			default:
				res.Refused++
			}
			if lost {
				res.LostBefore++
			}
		}
	}
	if cmd.Prim != "" && cmd.Writes > 0 && fences[0] != 0 {
		// Done writing: the resource stops counting this grant among the
		// key's writers before the grant is released.
		if _, err := write(hc, resource, "/leave", WriteRequest{Key: cmd.Key, Fence: fences[0], Client: id}); err != nil {
			fmt.Fprintln(os.Stderr, "chaos-client: leave:", err)
		}
	}
	uctx, ucancel := context.WithTimeout(context.Background(), 5*time.Second)
	troubleBefore := tr.releaseTrouble.Load()
	res.Call = now()
	err = g.Unlock(uctx)
	res.Return = now()
	retried := tr.releaseTrouble.Load() != troubleBefore
	ucancel()
	var lost *holdfast.LeaseLostError
	switch {
	case err == nil:
		res.Outcome = "ok"
	case errors.As(err, &lost) && lost.Reason == holdfast.LossRejected && !retried:
		res.Outcome, res.Err = "rejected", err.Error()
	case retried:
		// Unlock retried a Release that failed in transit: the first attempt
		// may have released the lease, so a later released=false proves
		// nothing.
		res.Outcome, res.Err = "unknown", fmt.Sprintf("release retried after a failed attempt: %v", err)
	default:
		res.Outcome, res.Err = "unknown", err.Error()
	}
	// One release event per key; the write counts go with the first.
	for j, k := range keys {
		ev := res
		ev.Key, ev.Fence = k, fences[j]
		if j > 0 {
			ev.Accepted, ev.Refused, ev.LostBefore = 0, 0, 0
		}
		if err := out.Encode(ev); err != nil {
			return err
		}
	}
	return out.Encode(Event{Seq: cmd.Seq, Op: "done"})
}

// watchTransport counts Release calls whose answer was lost: a transport
// error, a non-200 status, or a body cut off.
type watchTransport struct {
	base           *http.Transport
	releaseTrouble atomic.Int64
}

func (w *watchTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := w.base.RoundTrip(r)
	if !strings.HasSuffix(r.URL.Path, "/Release") {
		return resp, err
	}
	if err != nil || resp.StatusCode != http.StatusOK {
		w.releaseTrouble.Add(1)
		return resp, err
	}
	resp.Body = &watchBody{ReadCloser: resp.Body, w: w}
	return resp, nil
}

type watchBody struct {
	io.ReadCloser
	w *watchTransport
}

func (b *watchBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		b.w.releaseTrouble.Add(1)
	}
	return n, err
}

// WriteRequest mirrors chaos.WriteRequest (the command stays free of the
// test package).
type WriteRequest struct {
	Key    string `json:"key"`
	Fence  uint64 `json:"fence"`
	Client int    `json:"client"`
	// A semaphore's or read-write lock's writes name the primitive, its
	// limit and the grant's permits.
	Prim    string `json:"prim,omitempty"`
	Limit   int    `json:"limit,omitempty"`
	Permits int    `json:"permits,omitempty"`
}

// write posts wr to the resource's path (/write, or /leave when a grant is
// done writing) and says whether the resource accepted it.
func write(hc *http.Client, resource, path string, wr WriteRequest) (bool, error) {
	body, _ := json.Marshal(wr)
	resp, err := hc.Post(resource+path, "application/json", bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("write: HTTP %d", resp.StatusCode)
	}
	var r struct {
		Accepted bool `json:"accepted"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return false, err
	}
	return r.Accepted, nil
}
