// Command holdfast-conformance-go-runner is the Go SDK's adapter for the
// SDK-level conformance specs: it reads runner-protocol commands (JSON lines,
// conformance/sdkrunner/PROTOCOL.md) on stdin, performs each with the Go SDK
// (github.com/holdfast/holdfast/sdk-go) and writes one result per command,
// plus lease_lost events, on stdout. Logs go to stderr.
//
//	holdfast-conformance sdk --runner holdfast-conformance-go-runner
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/holdfast/holdfast/conformance/sdkrunner"
	"github.com/holdfast/holdfast/proto/hlc"
	holdfast "github.com/holdfast/holdfast/sdk-go"
)

func main() {
	if err := run(context.Background(), os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "holdfast-conformance-go-runner:", err)
		os.Exit(1)
	}
}

// adapter holds the SDK objects the suite refers to by id.
type adapter struct {
	out   *json.Encoder
	outMu sync.Mutex

	mu      sync.Mutex
	seq     int
	clients map[string]*holdfast.Client
	guards  map[string]*holdfast.Guard

	wg sync.WaitGroup // commands in flight and guard watchers
}

func run(ctx context.Context, in io.Reader, out io.Writer) error {
	a := &adapter{out: json.NewEncoder(out), clients: map[string]*holdfast.Client{}, guards: map[string]*holdfast.Guard{}}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var req sdkrunner.Request
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			return fmt.Errorf("malformed command %q: %w", sc.Text(), err)
		}
		if req.Cmd == sdkrunner.CmdClose && !closesOneClient(req) {
			// Close every client (ending its guards and waits), then answer
			// once every command in flight has answered, so the suite sees a
			// clean end.
			a.closeAll()
			cancel()
			a.wg.Wait()
			a.reply(req.ID, sdkrunner.Empty{}, nil)
			break
		}
		// Each command runs on its own: a lock that waits on the server must
		// not hold up the unlock that frees it.
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			res, err := a.handle(ctx, req)
			a.reply(req.ID, res, err)
		}()
	}
	a.closeAll()
	cancel()
	a.wg.Wait()
	return sc.Err()
}

// closesOneClient reports whether a close command names a client (close
// that client) rather than none (shut the adapter down).
func closesOneClient(req sdkrunner.Request) bool {
	args, err := decode[sdkrunner.ClientArgs](req)
	return err == nil && args.Client != ""
}

func (a *adapter) closeAll() {
	a.mu.Lock()
	clients := a.clients
	a.clients = map[string]*holdfast.Client{}
	a.mu.Unlock()
	for _, c := range clients {
		_ = c.Close()
	}
}

func (a *adapter) write(v any) {
	a.outMu.Lock()
	defer a.outMu.Unlock()
	if err := a.out.Encode(v); err != nil {
		fmt.Fprintln(os.Stderr, "holdfast-conformance-go-runner: write:", err)
	}
}

func (a *adapter) reply(id uint64, res any, err error) {
	if err != nil {
		a.write(map[string]any{"id": id, "error": toError(err)})
		return
	}
	a.write(map[string]any{"id": id, "result": res})
}

// toError maps the SDK's sentinel errors to the protocol's kinds.
func toError(err error) *sdkrunner.Error {
	var e *sdkrunner.Error
	if errors.As(err, &e) {
		return e
	}
	kind := sdkrunner.KindInternal
	switch {
	case errors.Is(err, holdfast.ErrNotAcquired):
		kind = sdkrunner.KindNotAcquired
	case errors.Is(err, holdfast.ErrLeaseLost):
		kind = sdkrunner.KindLeaseLost
	case errors.Is(err, holdfast.ErrReleased):
		kind = sdkrunner.KindReleased
	case errors.Is(err, holdfast.ErrStaleToken):
		kind = sdkrunner.KindStaleToken
	case errors.Is(err, holdfast.ErrInvalidArgument), errors.Is(err, hlc.ErrTooFarAhead):
		kind = sdkrunner.KindInvalidArgument
	case errors.Is(err, holdfast.ErrUnavailable):
		kind = sdkrunner.KindUnavailable
	case errors.Is(err, holdfast.ErrClosed):
		kind = sdkrunner.KindClientClosed
	}
	return &sdkrunner.Error{Kind: kind, Message: err.Error()}
}

func badCommand(format string, args ...any) error {
	return &sdkrunner.Error{Kind: sdkrunner.KindBadCommand, Message: fmt.Sprintf(format, args...)}
}

func decode[T any](req sdkrunner.Request) (T, error) {
	var v T
	if len(req.Args) > 0 {
		if err := json.Unmarshal(req.Args, &v); err != nil {
			return v, badCommand("%s: arguments: %v", req.Cmd, err)
		}
	}
	return v, nil
}

func (a *adapter) client(id string) (*holdfast.Client, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.clients[id]
	if !ok {
		return nil, badCommand("unknown client %q", id)
	}
	return c, nil
}

func (a *adapter) guard(id string) (*holdfast.Guard, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	g, ok := a.guards[id]
	if !ok {
		return nil, badCommand("unknown guard %q", id)
	}
	return g, nil
}

func (a *adapter) newID(prefix string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seq++
	return prefix + strconv.Itoa(a.seq)
}

func stamp(t hlc.Timestamp) sdkrunner.Stamp {
	return sdkrunner.Stamp{WallTimeNs: sdkrunner.I64(t.WallTime), Logical: t.Logical}
}

func (a *adapter) handle(ctx context.Context, req sdkrunner.Request) (any, error) {
	switch req.Cmd {
	case sdkrunner.CmdHello:
		return sdkrunner.HelloResult{
			ProtocolVersion: sdkrunner.Version,
			SDK:             "go",
			Version:         "sdk-go (this source tree)",
			Capabilities: []string{
				sdkrunner.CapProtocolConnect, sdkrunner.CapProtocolGRPC, sdkrunner.CapProtocolGRPCWeb,
				sdkrunner.CapClockUpdate, sdkrunner.CapLeaseLostEvent,
			},
		}, nil

	case sdkrunner.CmdConnect:
		args, err := decode[sdkrunner.ConnectArgs](req)
		if err != nil {
			return nil, err
		}
		var p holdfast.Protocol
		switch args.Protocol {
		case "", "connect":
			p = holdfast.ProtocolConnect
		case "grpc":
			p = holdfast.ProtocolGRPC
		case "grpc-web":
			p = holdfast.ProtocolGRPCWeb
		default:
			return nil, &sdkrunner.Error{Kind: sdkrunner.KindUnsupported, Message: "protocol " + args.Protocol}
		}
		c, err := holdfast.Dial(args.Addr, holdfast.WithProtocol(p))
		if err != nil {
			return nil, err
		}
		id := a.newID("c")
		a.mu.Lock()
		a.clients[id] = c
		a.mu.Unlock()
		return sdkrunner.ConnectResult{Client: id}, nil

	case sdkrunner.CmdLock:
		args, err := decode[sdkrunner.LockArgs](req)
		if err != nil {
			return nil, err
		}
		c, err := a.client(args.Client)
		if err != nil {
			return nil, err
		}
		l := c.Lock(args.Key).TTL(time.Duration(args.TTLMs) * time.Millisecond)
		if args.Holder != "" {
			l = l.Holder(args.Holder)
		}
		var g *holdfast.Guard
		if args.Try || args.WaitMs <= 0 {
			// The protocol's wait 0 is one attempt; the Go SDK's Lock
			// without a wait would queue until the context ends.
			g, err = l.TryLock(ctx)
		} else {
			g, err = l.Wait(time.Duration(args.WaitMs) * time.Millisecond).Lock(ctx)
		}
		if err != nil {
			return nil, err
		}
		tok, err := g.FencingToken()
		if err != nil {
			return nil, err
		}
		id := a.newID("g")
		a.mu.Lock()
		a.guards[id] = g
		a.mu.Unlock()
		a.watch(id, g)
		return sdkrunner.LockResult{Guard: id, FencingToken: sdkrunner.U64(tok), Stamp: stamp(g.Stamp())}, nil

	case sdkrunner.CmdUnlock, sdkrunner.CmdExtend, sdkrunner.CmdFencingToken, sdkrunner.CmdGuardState:
		args, err := decode[sdkrunner.GuardArgs](req)
		if err != nil {
			return nil, err
		}
		g, err := a.guard(args.Guard)
		if err != nil {
			return nil, err
		}
		switch req.Cmd {
		case sdkrunner.CmdUnlock:
			return sdkrunner.Empty{}, g.Unlock(ctx)
		case sdkrunner.CmdExtend:
			ttl := g.TTL()
			if args.TTLMs > 0 {
				ttl = time.Duration(args.TTLMs) * time.Millisecond
			}
			return sdkrunner.Empty{}, g.Extend(ctx, ttl)
		case sdkrunner.CmdFencingToken:
			tok, err := g.FencingToken()
			if err != nil {
				return nil, err
			}
			return sdkrunner.FencingTokenResult{FencingToken: sdkrunner.U64(tok)}, nil
		default:
			return guardState(g), nil
		}

	case sdkrunner.CmdClose:
		args, err := decode[sdkrunner.ClientArgs](req)
		if err != nil {
			return nil, err
		}
		c, err := a.client(args.Client)
		if err != nil {
			return nil, err
		}
		a.mu.Lock()
		delete(a.clients, args.Client)
		a.mu.Unlock()
		return sdkrunner.Empty{}, c.Close()

	case sdkrunner.CmdValidateWrite:
		args, err := decode[sdkrunner.ValidateWriteArgs](req)
		if err != nil {
			return nil, err
		}
		return sdkrunner.Empty{}, holdfast.ValidateWrite(uint64(args.Token), uint64(args.Watermark))

	case sdkrunner.CmdClockNow:
		args, err := decode[sdkrunner.ClientArgs](req)
		if err != nil {
			return nil, err
		}
		c, err := a.client(args.Client)
		if err != nil {
			return nil, err
		}
		return sdkrunner.ClockResult{Stamp: stamp(c.Now())}, nil

	case sdkrunner.CmdClockUpdate:
		args, err := decode[sdkrunner.ClockUpdateArgs](req)
		if err != nil {
			return nil, err
		}
		c, err := a.client(args.Client)
		if err != nil {
			return nil, err
		}
		_, err = c.Clock().Update(hlc.Timestamp{WallTime: int64(args.Stamp.WallTimeNs), Logical: args.Stamp.Logical})
		return sdkrunner.Empty{}, err

	case sdkrunner.CmdInspect:
		args, err := decode[sdkrunner.InspectArgs](req)
		if err != nil {
			return nil, err
		}
		c, err := a.client(args.Client)
		if err != nil {
			return nil, err
		}
		st, held, err := c.Inspect(ctx, args.Key)
		if err != nil {
			return nil, err
		}
		res := sdkrunner.InspectResult{Held: held}
		if held {
			res.State = &sdkrunner.LockState{FencingToken: sdkrunner.U64(st.FencingToken), Holder: st.Holder, Stamp: stamp(st.Stamp), Waiters: st.Waiters}
		}
		return res, nil
	}
	return nil, &sdkrunner.Error{Kind: sdkrunner.KindUnsupported, Message: "unknown command " + strconv.Quote(req.Cmd)}
}

// guardState reads the guard's state from its Err.
func guardState(g *holdfast.Guard) sdkrunner.GuardStateResult {
	err := g.Err()
	var lost *holdfast.LeaseLostError
	switch {
	case err == nil:
		return sdkrunner.GuardStateResult{State: sdkrunner.StateHeld}
	case errors.As(err, &lost):
		return sdkrunner.GuardStateResult{State: sdkrunner.StateLost, Reason: reason(lost.Reason)}
	default:
		return sdkrunner.GuardStateResult{State: sdkrunner.StateReleased}
	}
}

func reason(r holdfast.LossReason) string {
	switch r {
	case holdfast.LossRejected:
		return sdkrunner.ReasonRejected
	case holdfast.LossExpired:
		return sdkrunner.ReasonExpired
	case holdfast.LossClientClosed:
		return sdkrunner.ReasonClientClosed
	case holdfast.LossReleaseUnconfirmed:
		return sdkrunner.ReasonReleaseUnconfirmed
	}
	return r.String()
}

// watch emits a lease_lost event when the guard's context ends with a loss
// (not after Unlock).
func (a *adapter) watch(id string, g *holdfast.Guard) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		<-g.Done()
		var lost *holdfast.LeaseLostError
		if errors.As(context.Cause(g.Context()), &lost) {
			a.write(sdkrunner.Message{Event: sdkrunner.EventLeaseLost, Guard: id, Reason: reason(lost.Reason)})
		}
	}()
}
