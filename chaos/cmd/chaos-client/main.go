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
// key. An election cycle campaigns instead (Election.Campaign with a value),
// and as leader proclaims a new value after each write, then resigns; with
// -observe the client also keeps an Observe stream of that key open for its
// whole life and reports every message it receives. Times are Unix
// nanoseconds on the wall clock, which every process of a run shares.
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
	"sync"
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
	// Prim: "" for a lock, "semaphore" (Limit, Permits), "rwlock"
	// (Writer: an exclusive grant, else a shared one) or "election".
	Prim    string `json:"prim,omitempty"`
	Limit   int    `json:"limit,omitempty"`
	Permits int    `json:"permits,omitempty"`
	Writer  bool   `json:"writer,omitempty"`
}

// Event reports one finished operation, or "done" for the end of a cycle.
type Event struct {
	Seq     int    `json:"seq"`
	Op      string `json:"op"` // acquire, proclaim, release, done; observed
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
	// Value: an election's campaign or proclaimed value; for "observed",
	// the leader's.
	Value string `json:"value,omitempty"`
	// "observed": one message of the Observe stream numbered Stream,
	// received at At: the leader's Term, Value and Holder, or None.
	Stream int    `json:"stream,omitempty"`
	At     int64  `json:"at,omitempty"`
	None   bool   `json:"none,omitempty"`
	Term   uint64 `json:"term,omitempty"`
	Holder string `json:"holder,omitempty"`
}

// encoder writes events from the cycle and from the observer, one whole
// line at a time.
type encoder struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (e *encoder) Encode(v any) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.enc.Encode(v)
}

func main() {
	server := flag.String("server", "", "holdfast server base URL")
	resource := flag.String("resource", "", "fenced resource base URL")
	id := flag.Int("id", 0, "client id")
	observe := flag.String("observe", "", "election key to observe for the client's whole life (none when empty)")
	flag.Parse()
	if err := run(*server, *resource, *id, *observe); err != nil {
		fmt.Fprintln(os.Stderr, "chaos-client:", err)
		os.Exit(1)
	}
}

func run(server, resource string, id int, observe string) error {
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
	out := &encoder{enc: json.NewEncoder(os.Stdout)}
	if observe != "" {
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			observeKey(ctx, c, observe, out)
		}()
		defer func() {
			stop()
			<-done
		}()
	}
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

// observeKey keeps an Observe stream of key open until ctx ends and reports
// each message; a stream that ends (a fault) is opened again under the next
// number, after a short pause so that a server down does not spin it.
func observeKey(ctx context.Context, c *holdfast.Client, key string, out *encoder) {
	e := c.Election(key)
	for stream := 0; ctx.Err() == nil; stream++ {
		for o, err := range e.Observe(ctx) {
			if err != nil {
				if ctx.Err() == nil {
					fmt.Fprintln(os.Stderr, "chaos-client: observe:", err)
				}
				break
			}
			ev := Event{Op: "observed", Key: key, Stream: stream, At: now(), None: o.Leader == nil}
			if l := o.Leader; l != nil {
				ev.Term, ev.Value, ev.Holder = l.Term, l.Value, l.Holder
			}
			if err := out.Encode(ev); err != nil {
				return
			}
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

func cycle(c *holdfast.Client, tr *watchTransport, hc *http.Client, resource string, id int, cmd Command, in *bufio.Scanner, out *encoder) error {
	if cmd.Prim == "election" {
		return electionCycle(c, tr, hc, resource, id, cmd, in, out)
	}
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
	unlock(tr, g.Unlock, &res)
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

// unlock releases a lease through release (Guard.Unlock, Leadership.Resign)
// and sets res's times and outcome.
func unlock(tr *watchTransport, release func(context.Context) error, res *Event) {
	uctx, ucancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer ucancel()
	_, troubleBefore := tr.release.load()
	res.Call = now()
	err := release(uctx)
	res.Return = now()
	_, trouble := tr.release.load()
	retried := trouble != troubleBefore
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
}

// electionCycle is one campaign: campaign with the value ElectionValue(id,
// seq, 0); as leader, wait for "go" (the harness may pause the process
// first), then for each write: write to the resource with the term, proclaim
// the next value; resign. A proclaim the SDK never sent (the leadership was
// already lost here) is not reported: it reached no server.
func electionCycle(c *holdfast.Client, tr *watchTransport, hc *http.Client, resource string, id int, cmd Command, in *bufio.Scanner, out *encoder) error {
	ttl := time.Duration(cmd.TTLms) * time.Millisecond
	wait := time.Duration(cmd.WaitMs) * time.Millisecond
	e := c.Election(cmd.Key).TTL(ttl).Wait(wait)
	value := electionValue(id, cmd.Seq, 0)
	ctx, cancel := context.WithTimeout(context.Background(), wait+5*time.Second)
	call := now()
	lead, err := e.Campaign(ctx, value)
	ret := now()
	cancel()
	ev := Event{Seq: cmd.Seq, Op: "acquire", Key: cmd.Key, Call: call, Return: ret, Value: value}
	var term uint64
	switch {
	case err == nil:
		ev.Outcome = "ok"
		var terr error
		if term, terr = lead.Term(); terr != nil {
			ev.Outcome, ev.Err = "unknown", terr.Error()
		}
		ev.Fence = term
	case errors.Is(err, holdfast.ErrNotAcquired):
		ev.Outcome, ev.Err = "busy", err.Error()
	default:
		ev.Outcome, ev.Err = "unknown", err.Error()
	}
	ev.Holding = lead != nil
	if err := out.Encode(ev); err != nil {
		return err
	}
	if lead == nil {
		return out.Encode(Event{Seq: cmd.Seq, Op: "done"})
	}
	if !in.Scan() {
		return fmt.Errorf("stdin closed while leading %q", cmd.Key)
	}
	res := Event{Seq: cmd.Seq, Op: "release", Key: cmd.Key, Fence: term}
	for i := range cmd.Writes {
		if i > 0 && cmd.WorkMs > 0 {
			// Simulated work between writes (not synchronisation).
			time.Sleep(time.Duration(cmd.WorkMs/int64(cmd.Writes)) * time.Millisecond)
		}
		if term == 0 {
			break
		}
		lost := lead.Err() != nil
		acc, err := write(hc, resource, "/write", WriteRequest{Key: cmd.Key, Fence: term, Client: id, Prim: cmd.Prim})
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
		if err := proclaim(tr, lead, cmd, id, i+1, term, out); err != nil {
			return err
		}
	}
	unlock(tr, lead.Resign, &res)
	if term != 0 {
		if err := out.Encode(res); err != nil {
			return err
		}
	}
	return out.Encode(Event{Seq: cmd.Seq, Op: "done"})
}

// proclaim sends the n-th value of the cycle and reports the outcome: ok;
// rejected when the server answered proclaimed=false (and every attempt
// came back whole); unknown when an attempt failed in transit or the call
// errored otherwise; nothing when no request left (a leadership already
// lost).
func proclaim(tr *watchTransport, lead *holdfast.Leadership, cmd Command, id, n int, term uint64, out *encoder) error {
	value := electionValue(id, cmd.Seq, n)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sentBefore, troubleBefore := tr.proclaim.load()
	ev := Event{Seq: cmd.Seq, Op: "proclaim", Key: cmd.Key, Fence: term, Value: value, Call: now()}
	err := lead.Proclaim(ctx, value)
	ev.Return = now()
	sent, trouble := tr.proclaim.load()
	var lost *holdfast.LeaseLostError
	switch {
	case sent == sentBefore:
		return nil
	case err == nil:
		ev.Outcome = "ok"
	case errors.As(err, &lost) && lost.Reason == holdfast.LossRejected && trouble == troubleBefore:
		ev.Outcome, ev.Err = "rejected", err.Error()
	default:
		ev.Outcome, ev.Err = "unknown", err.Error()
	}
	return out.Encode(ev)
}

// electionValue mirrors chaos.ElectionValue (the command stays free of the
// test package): unique per client, campaign and proclaim.
func electionValue(client, seq, n int) string {
	return fmt.Sprintf("c%d.s%d.v%d", client, seq, n)
}

// watchTransport counts Release and Proclaim calls sent, and those whose
// answer was lost: a transport error, a non-200 status, or a body cut off.
type watchTransport struct {
	base              *http.Transport
	release, proclaim rpcCounts
}

type rpcCounts struct{ sent, trouble atomic.Int64 }

func (c *rpcCounts) load() (sent, trouble int64) { return c.sent.Load(), c.trouble.Load() }

func (w *watchTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	var counts *rpcCounts
	switch {
	case strings.HasSuffix(r.URL.Path, "/Release"):
		counts = &w.release
	case strings.HasSuffix(r.URL.Path, "/Proclaim"):
		counts = &w.proclaim
	default:
		return w.base.RoundTrip(r)
	}
	counts.sent.Add(1)
	resp, err := w.base.RoundTrip(r)
	if err != nil || resp.StatusCode != http.StatusOK {
		counts.trouble.Add(1)
		return resp, err
	}
	resp.Body = &watchBody{ReadCloser: resp.Body, counts: counts}
	return resp, nil
}

type watchBody struct {
	io.ReadCloser
	counts *rpcCounts
}

func (b *watchBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		b.counts.trouble.Add(1)
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
