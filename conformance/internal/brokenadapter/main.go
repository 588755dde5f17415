// Command brokenadapter wraps a correct SDK adapter and gives it one of the
// bugs lock clients in the field have had, so the suite's own tests can
// prove that the SDK-level specs catch each:
//
//	brokenadapter BUG ADAPTER [ARGS...]
//
// It runs ADAPTER as its child and relays the runner protocol both ways,
// changing only what BUG names:
//
//   - silent-unlock: unlock always answers success, even for a lease that
//     was lost (etcd#22082).
//   - hides-loss: the guard never says it lost its lease: no lease_lost
//     events, guard_state "held", fencing_token keeps answering the token
//     (consul#4902: lost while the holder's state still says held).
//   - forgets-clock: clock_update is acknowledged but not given to the SDK,
//     so causality through the client's clock is lost.
//   - rounds-tokens: validate_write compares tokens as float64, as a
//     JavaScript number would.
//   - ignores-permits: a semaphore grant always takes the default single
//     permit, whatever was asked, while the guard reports the permits
//     asked for: its holder believes it holds more of the semaphore than
//     the server counts, so the semaphore's limit is exceeded in fact.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"

	"github.com/holdfast/holdfast/conformance/sdkrunner"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: brokenadapter silent-unlock|hides-loss|forgets-clock|rounds-tokens|ignores-permits|proclaims-blindly ADAPTER [ARGS...]")
		os.Exit(2)
	}
	bug := os.Args[1]
	child := exec.Command(os.Args[2], os.Args[3:]...)
	child.Stderr = os.Stderr
	toChild, err := child.StdinPipe()
	if err != nil {
		fail(err)
	}
	fromChild, err := child.StdoutPipe()
	if err != nil {
		fail(err)
	}
	if err := child.Start(); err != nil {
		fail(err)
	}
	p := &proxy{bug: bug, out: json.NewEncoder(os.Stdout), pending: map[uint64]sdkrunner.Request{}, tokens: map[string]string{}, blind: map[string]bool{}}

	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(fromChild)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			var m map[string]json.RawMessage
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				fail(err)
			}
			p.fromAdapter(m)
		}
	}()

	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var req sdkrunner.Request
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			fail(err)
		}
		if fwd, ok := p.toAdapter(req); ok {
			line, _ := json.Marshal(fwd)
			if _, err := toChild.Write(append(line, '\n')); err != nil {
				fail(err)
			}
		}
	}
	_ = toChild.Close()
	<-done
	if err := child.Wait(); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "brokenadapter:", err)
	os.Exit(1)
}

type proxy struct {
	bug string

	mu      sync.Mutex
	out     *json.Encoder
	pending map[uint64]sdkrunner.Request // commands in flight, by id
	tokens  map[string]string            // guard -> fencing token (hides-loss, proclaims-blindly)
	blind   map[string]bool              // leaderships whose loss a proclaim hid (proclaims-blindly)
}

func (p *proxy) write(v any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.out.Encode(v)
}

// toAdapter sees a command on its way in; it may answer it itself.
func (p *proxy) toAdapter(req sdkrunner.Request) (sdkrunner.Request, bool) {
	switch {
	case p.bug == "forgets-clock" && req.Cmd == sdkrunner.CmdClockUpdate:
		p.write(map[string]any{"id": req.ID, "result": map[string]any{}})
		return req, false
	case p.bug == "rounds-tokens" && req.Cmd == sdkrunner.CmdValidateWrite:
		var a sdkrunner.ValidateWriteArgs
		_ = json.Unmarshal(req.Args, &a)
		if float64(a.Token) < float64(a.Watermark) {
			p.write(map[string]any{"id": req.ID, "error": sdkrunner.Error{Kind: sdkrunner.KindStaleToken, Message: "stale"}})
		} else {
			p.write(map[string]any{"id": req.ID, "result": map[string]any{}})
		}
		return req, false
	case p.bug == "hides-loss" && (req.Cmd == sdkrunner.CmdFencingToken || req.Cmd == sdkrunner.CmdGuardState):
		var a sdkrunner.GuardArgs
		_ = json.Unmarshal(req.Args, &a)
		p.mu.Lock()
		tok, ok := p.tokens[a.Guard]
		p.mu.Unlock()
		if ok {
			if req.Cmd == sdkrunner.CmdFencingToken {
				p.write(map[string]any{"id": req.ID, "result": map[string]any{"fencing_token": tok}})
			} else {
				p.write(map[string]any{"id": req.ID, "result": map[string]any{"state": sdkrunner.StateHeld}})
			}
			return req, false
		}
	}
	if p.bug == "proclaims-blindly" && (req.Cmd == sdkrunner.CmdFencingToken || req.Cmd == sdkrunner.CmdGuardState) {
		var a sdkrunner.GuardArgs
		_ = json.Unmarshal(req.Args, &a)
		p.mu.Lock()
		tok, blind := p.tokens[a.Guard], p.blind[a.Guard]
		p.mu.Unlock()
		if blind {
			if req.Cmd == sdkrunner.CmdFencingToken {
				p.write(map[string]any{"id": req.ID, "result": map[string]any{"fencing_token": tok}})
			} else {
				p.write(map[string]any{"id": req.ID, "result": map[string]any{"state": sdkrunner.StateHeld}})
			}
			return req, false
		}
	}
	if p.bug == "ignores-permits" && req.Cmd == sdkrunner.CmdLock {
		// Kept as asked in pending (the answer reports it); sent without.
		var a map[string]json.RawMessage
		if json.Unmarshal(req.Args, &a) == nil && a["permits"] != nil {
			delete(a, "permits")
			fwd := req
			fwd.Args, _ = json.Marshal(a)
			p.mu.Lock()
			p.pending[req.ID] = req
			p.mu.Unlock()
			return fwd, true
		}
	}
	p.mu.Lock()
	p.pending[req.ID] = req
	p.mu.Unlock()
	return req, true
}

// fromAdapter sees an answer or event on its way out.
func (p *proxy) fromAdapter(m map[string]json.RawMessage) {
	if _, ok := m["event"]; ok {
		if p.bug == "hides-loss" {
			return
		}
		p.write(m)
		return
	}
	var id uint64
	_ = json.Unmarshal(m["id"], &id)
	p.mu.Lock()
	req := p.pending[id]
	delete(p.pending, id)
	p.mu.Unlock()
	switch {
	case p.bug == "silent-unlock" && req.Cmd == sdkrunner.CmdUnlock:
		m = map[string]json.RawMessage{"id": m["id"], "result": json.RawMessage("{}")}
	case p.bug == "hides-loss" && req.Cmd == sdkrunner.CmdLock && m["result"] != nil:
		var res sdkrunner.LockResult
		if err := json.Unmarshal(m["result"], &res); err == nil {
			p.mu.Lock()
			p.tokens[res.Guard] = strconv.FormatUint(uint64(res.FencingToken), 10)
			p.mu.Unlock()
		}
	case p.bug == "ignores-permits" && req.Cmd == sdkrunner.CmdLock && m["result"] != nil:
		var a sdkrunner.LockArgs
		var res map[string]json.RawMessage
		if json.Unmarshal(req.Args, &a) == nil && a.Permits != nil && json.Unmarshal(m["result"], &res) == nil {
			res["permits"], _ = json.Marshal(*a.Permits)
			m["result"], _ = json.Marshal(res)
		}
	case p.bug == "proclaims-blindly" && req.Cmd == sdkrunner.CmdCampaign && m["result"] != nil:
		var res sdkrunner.CampaignResult
		if err := json.Unmarshal(m["result"], &res); err == nil {
			p.mu.Lock()
			p.tokens[res.Guard] = res.Term.String()
			p.mu.Unlock()
		}
	case p.bug == "proclaims-blindly" && req.Cmd == sdkrunner.CmdProclaim && m["error"] != nil:
		var e sdkrunner.Error
		var a sdkrunner.ProclaimArgs
		if json.Unmarshal(m["error"], &e) == nil && e.Kind == sdkrunner.KindLeaseLost && json.Unmarshal(req.Args, &a) == nil {
			p.mu.Lock()
			p.blind[a.Guard] = true
			p.mu.Unlock()
			m = map[string]json.RawMessage{"id": m["id"], "result": json.RawMessage("{}")}
		}
	case p.bug == "hides-loss" && (req.Cmd == sdkrunner.CmdUnlock || req.Cmd == sdkrunner.CmdExtend):
		// The silent watchdog also answers its holder's calls kindly.
		m = map[string]json.RawMessage{"id": m["id"], "result": json.RawMessage("{}")}
	}
	p.write(m)
}
