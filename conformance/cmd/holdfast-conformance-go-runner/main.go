// Command holdfast-conformance-go-runner is the Go SDK's adapter for the
// SDK-level conformance specs: it reads runner-protocol commands (JSON lines,
// conformance/sdkrunner/PROTOCOL.md) on stdin, performs each with the Go SDK
// (github.com/holdfast/holdfast/sdk-go) and writes one result per command,
// plus events, on stdout. Logs go to stderr.
//
//	holdfast-conformance sdk --runner holdfast-conformance-go-runner
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
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
	// stop ends what the adapter itself waits on (run_if_free functions)
	// at shutdown.
	stop context.Context

	mu       sync.Mutex
	seq      int
	clients  map[string]*holdfast.Client
	guards   map[string]*holdfast.Guard
	tokens   map[uint64]string // fencing token -> guard id, for lease events
	inFlight map[uint64]*command
	runs     map[string]chan struct{} // run_if_free functions waiting for run_finish
	leads    map[string]*holdfast.Leadership
	observes map[string]context.CancelFunc // observe commands in flight, by the suite's id

	wg sync.WaitGroup // commands in flight and guard watchers
}

// command is one command in flight, cancellable by the cancel command.
type command struct {
	cancel    context.CancelFunc
	cancelled bool
}

func run(ctx context.Context, in io.Reader, out io.Writer) error {
	a := &adapter{
		out:      json.NewEncoder(out),
		clients:  map[string]*holdfast.Client{},
		guards:   map[string]*holdfast.Guard{},
		tokens:   map[uint64]string{},
		inFlight: map[uint64]*command{},
		runs:     map[string]chan struct{}{},
		leads:    map[string]*holdfast.Leadership{},
		observes: map[string]context.CancelFunc{},
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a.stop = ctx
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
read:
	for sc.Scan() {
		var req sdkrunner.Request
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			return fmt.Errorf("malformed command %q: %w", sc.Text(), err)
		}
		switch {
		case req.Cmd == sdkrunner.CmdClose && !closesOneClient(req):
			// Close every client (ending its guards and waits), then answer
			// once every command in flight has answered, so the suite sees a
			// clean end.
			cancel()
			a.closeAll()
			a.wg.Wait()
			a.reply(req.ID, sdkrunner.Empty{}, nil)
			break read
		case req.Cmd == sdkrunner.CmdCancel:
			// Answered at once, in order: the command it names may be
			// waiting on the server.
			args, err := decode[sdkrunner.CancelArgs](req)
			if err == nil {
				a.cancelCommand(args.ID)
			}
			a.reply(req.ID, sdkrunner.Empty{}, err)
		default:
			// Each command runs on its own: a lock that waits on the server
			// must not hold up the unlock that frees it.
			cctx, c := a.begin(ctx, req.ID)
			a.wg.Add(1)
			go func() {
				defer a.wg.Done()
				res, err := a.handle(cctx, req)
				a.reply(req.ID, res, a.end(req.ID, c, err))
			}()
		}
	}
	cancel()
	a.closeAll()
	a.wg.Wait()
	return sc.Err()
}

// begin registers a command in flight with a context the cancel command
// can end. Commands are read in order, so a cancel always finds the command
// it names registered, or already answered.
func (a *adapter) begin(ctx context.Context, id uint64) (context.Context, *command) {
	cctx, cancel := context.WithCancel(ctx)
	c := &command{cancel: cancel}
	a.mu.Lock()
	a.inFlight[id] = c
	a.mu.Unlock()
	return cctx, c
}

// end unregisters a command; an error of a command the suite cancelled is
// the protocol's canceled (the SDK reported it matching context.Canceled).
func (a *adapter) end(id uint64, c *command, err error) error {
	a.mu.Lock()
	delete(a.inFlight, id)
	cancelled := c.cancelled
	a.mu.Unlock()
	c.cancel()
	if err != nil && cancelled && errors.Is(err, context.Canceled) {
		e := toError(err)
		e.Kind = sdkrunner.KindCanceled
		return e
	}
	return err
}

// cancelCommand cancels a command in flight; one already answered is left
// alone.
func (a *adapter) cancelCommand(id uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.inFlight[id]; ok {
		c.cancelled = true
		c.cancel()
	}
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

// toError maps the SDK's errors to the protocol's kinds, with the SDK's own
// code and what its error carries.
func toError(err error) *sdkrunner.Error {
	var e *sdkrunner.Error
	if errors.As(err, &e) {
		return e
	}
	out := &sdkrunner.Error{Kind: sdkrunner.KindInternal, Message: err.Error(), Code: holdfast.ErrorCode(err)}
	var (
		na   *holdfast.NotAcquiredError
		lost *holdfast.LeaseLostError
	)
	switch {
	case errors.As(err, &na):
		out.Kind = sdkrunner.KindNotAcquired
		if na.Current != nil {
			s := lockState(*na.Current)
			out.Current = &s
		}
	case errors.As(err, &lost):
		out.Kind = sdkrunner.KindLeaseLost
		out.Reason = lost.Reason.String()
		if lost.LastErr != nil {
			out.CauseCode = holdfast.ErrorCode(lost.LastErr)
		}
	case errors.Is(err, holdfast.ErrReleased):
		out.Kind = sdkrunner.KindReleased
	case errors.Is(err, holdfast.ErrStaleToken):
		out.Kind = sdkrunner.KindStaleToken
	case errors.Is(err, holdfast.ErrClosed):
		out.Kind = sdkrunner.KindClientClosed
	case errors.Is(err, holdfast.ErrInvalidArgument), errors.Is(err, hlc.ErrTooFarAhead):
		out.Kind = sdkrunner.KindInvalidArgument
	case errors.Is(err, holdfast.ErrUnavailable):
		out.Kind = sdkrunner.KindUnavailable
	case errors.Is(err, holdfast.ErrUnauthenticated):
		out.Kind = sdkrunner.KindUnauthenticated
	case errors.Is(err, holdfast.ErrPermissionDenied):
		out.Kind = sdkrunner.KindPermission
	}
	return out
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

// withClient decodes a command's arguments and finds the client they name.
func withClient[T any](a *adapter, req sdkrunner.Request, id func(T) string) (T, *holdfast.Client, error) {
	args, err := decode[T](req)
	if err != nil {
		return args, nil, err
	}
	c, err := a.client(id(args))
	return args, c, err
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

// guardID is the id of the guard with this fencing token, "" when unknown.
func (a *adapter) guardID(token uint64) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.tokens[token]
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

func lockState(st holdfast.LockState) sdkrunner.LockState {
	s := sdkrunner.LockState{
		Key: st.Key, FencingToken: sdkrunner.U64(st.FencingToken), Holder: st.Holder, Stamp: stamp(st.Stamp), Waiters: st.Waiters,
		Kind: st.Kind.String(), Limit: st.Limit, PermitsInUse: st.PermitsInUse,
	}
	for _, h := range st.Holders {
		s.Holders = append(s.Holders, sdkrunner.Holder{
			FencingToken: sdkrunner.U64(h.FencingToken), Holder: h.Holder, Permits: h.Permits, Mode: h.Mode.String(), Stamp: stamp(h.Stamp),
			Value: h.Value,
		})
	}
	return s
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

func (a *adapter) handle(ctx context.Context, req sdkrunner.Request) (any, error) {
	switch req.Cmd {
	case sdkrunner.CmdHello:
		return sdkrunner.HelloResult{
			ProtocolVersion: sdkrunner.Version,
			SDK:             "go",
			Version:         "sdk-go (this source tree)",
			Capabilities: []string{
				sdkrunner.CapProtocolConnect, sdkrunner.CapProtocolGRPC, sdkrunner.CapProtocolGRPCWeb,
				sdkrunner.CapClockUpdate, sdkrunner.CapLeaseLostEvent, sdkrunner.CapRequestIDs,
				sdkrunner.CapSemaphore, sdkrunner.CapRWLock, sdkrunner.CapElection,
			},
			DurationUnit: sdkrunner.UnitNanoseconds,
		}, nil

	case sdkrunner.CmdConnect:
		args, err := decode[sdkrunner.ConnectArgs](req)
		if err != nil {
			return nil, err
		}
		opts, err := a.clientOptions(args)
		if err != nil {
			return nil, err
		}
		c, err := holdfast.Dial(args.Addr, opts...)
		if err != nil {
			return nil, err
		}
		id := a.newID("c")
		a.mu.Lock()
		a.clients[id] = c
		a.mu.Unlock()
		return sdkrunner.ConnectResult{Client: id}, nil

	case sdkrunner.CmdLock:
		args, c, err := withClient(a, req, func(x sdkrunner.LockArgs) string { return x.Client })
		if err != nil {
			return nil, err
		}
		l, err := builder(c, args)
		if err != nil {
			return nil, err
		}
		if l, err = withTTL(l, args.TTLMs, args.TTLNative); err != nil {
			return nil, err
		}
		if args.Holder != "" {
			l = l.Holder(args.Holder)
		}
		if !args.WaitUnset {
			l = l.Wait(ms(args.WaitMs)) // with try, TryLock must ignore it
		}
		var g *holdfast.Guard
		if args.Try {
			g, err = l.TryLock(ctx)
		} else {
			g, err = l.Lock(ctx)
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
		a.tokens[tok] = id
		a.mu.Unlock()
		a.watch(id, g)
		return sdkrunner.LockResult{
			Guard: id, FencingToken: sdkrunner.U64(tok), Stamp: stamp(g.Stamp()),
			Kind: g.Kind().String(), Limit: g.Limit(), Permits: g.Permits(), Mode: g.Mode().String(),
		}, nil

	case sdkrunner.CmdLockMany:
		args, c, err := withClient(a, req, func(x sdkrunner.LockManyArgs) string { return x.Client })
		if err != nil {
			return nil, err
		}
		guards := make([]*holdfast.Guard, len(args.Keys))
		errs := make([]error, len(args.Keys))
		var wg sync.WaitGroup
		for i, k := range args.Keys {
			wg.Go(func() {
				l, err := withTTL(c.Lock(k), args.TTLMs, nil)
				if err == nil {
					guards[i], err = l.Wait(0).Lock(ctx)
				}
				errs[i] = err
			})
		}
		wg.Wait()
		res := sdkrunner.LockManyResult{Guards: make([]sdkrunner.LockResult, len(guards))}
		for i, g := range guards {
			if errs[i] != nil {
				for _, g := range guards {
					if g != nil {
						_ = g.Unlock(ctx)
					}
				}
				return nil, errs[i]
			}
			tok, err := g.FencingToken()
			if err != nil {
				return nil, err
			}
			id := a.newID("g")
			a.mu.Lock()
			a.guards[id] = g
			a.tokens[tok] = id
			a.mu.Unlock()
			a.watch(id, g)
			res.Guards[i] = sdkrunner.LockResult{Guard: id, FencingToken: sdkrunner.U64(tok), Stamp: stamp(g.Stamp())}
		}
		return res, nil

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
			return sdkrunner.Empty{}, g.Extend(ctx, ms(args.TTLMs))
		case sdkrunner.CmdFencingToken:
			tok, err := g.FencingToken()
			if err != nil {
				return nil, err
			}
			return sdkrunner.FencingTokenResult{FencingToken: sdkrunner.U64(tok)}, nil
		default:
			return guardState(g), nil
		}

	case sdkrunner.CmdRunIfFree:
		return a.runIfFree(ctx, req)

	case sdkrunner.CmdCampaign, sdkrunner.CmdProclaim, sdkrunner.CmdResign, sdkrunner.CmdLeader, sdkrunner.CmdObserve, sdkrunner.CmdObserveStop:
		return a.election(ctx, req)

	case sdkrunner.CmdRunFinish:
		args, err := decode[sdkrunner.RunFinishArgs](req)
		if err != nil {
			return nil, err
		}
		a.mu.Lock()
		ch, ok := a.runs[args.Run]
		delete(a.runs, args.Run)
		a.mu.Unlock()
		if !ok {
			return nil, badCommand("unknown run %q (no run_if_free function waits under that name)", args.Run)
		}
		close(ch)
		return sdkrunner.Empty{}, nil

	case sdkrunner.CmdClose:
		args, c, err := withClient(a, req, func(x sdkrunner.ClientArgs) string { return x.Client })
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
		w, err := holdfast.ValidateWrite(uint64(args.Token), uint64(args.Watermark))
		if err != nil {
			return nil, err
		}
		u := sdkrunner.U64(w)
		return sdkrunner.ValidateWriteResult{Watermark: &u}, nil

	case sdkrunner.CmdClockNow:
		_, c, err := withClient(a, req, func(x sdkrunner.ClientArgs) string { return x.Client })
		if err != nil {
			return nil, err
		}
		return sdkrunner.ClockResult{Stamp: stamp(c.Now())}, nil

	case sdkrunner.CmdClockUpdate:
		args, c, err := withClient(a, req, func(x sdkrunner.ClockUpdateArgs) string { return x.Client })
		if err != nil {
			return nil, err
		}
		_, err = c.Clock().Update(hlc.Timestamp{WallTime: int64(args.Stamp.WallTimeNs), Logical: args.Stamp.Logical})
		return sdkrunner.Empty{}, err

	case sdkrunner.CmdInspect:
		args, c, err := withClient(a, req, func(x sdkrunner.InspectArgs) string { return x.Client })
		if err != nil {
			return nil, err
		}
		st, held, err := c.Inspect(ctx, args.Key)
		if err != nil {
			return nil, err
		}
		res := sdkrunner.InspectResult{Held: held}
		if held {
			s := lockState(st)
			res.State = &s
		}
		return res, nil

	case sdkrunner.CmdList:
		args, c, err := withClient(a, req, func(x sdkrunner.ListArgs) string { return x.Client })
		if err != nil {
			return nil, err
		}
		res := sdkrunner.ListResult{Locks: []sdkrunner.LockState{}}
		for st, err := range c.List(ctx, args.Prefix) {
			if err != nil {
				return nil, err
			}
			res.Locks = append(res.Locks, lockState(st))
		}
		return res, nil

	case sdkrunner.CmdServerInfo:
		_, c, err := withClient(a, req, func(x sdkrunner.ClientArgs) string { return x.Client })
		if err != nil {
			return nil, err
		}
		info, err := c.ServerInfo(ctx)
		if err != nil {
			return nil, err
		}
		return sdkrunner.ServerInfoResult{Version: info.Version, Backend: info.Backend.Name}, nil
	}
	return nil, &sdkrunner.Error{Kind: sdkrunner.KindUnsupported, Message: "unknown command " + strconv.Quote(req.Cmd)}
}

// election runs the leader-election commands with Client.Election and
// its Leadership.
func (a *adapter) election(ctx context.Context, req sdkrunner.Request) (any, error) {
	switch req.Cmd {
	case sdkrunner.CmdCampaign:
		args, c, err := withClient(a, req, func(x sdkrunner.CampaignArgs) string { return x.Client })
		if err != nil {
			return nil, err
		}
		e := c.Election(args.Key)
		if args.TTLMs != 0 {
			e = e.TTL(ms(args.TTLMs))
		}
		if args.Holder != "" {
			e = e.Holder(args.Holder)
		}
		if !args.WaitUnset {
			e = e.Wait(ms(args.WaitMs))
		}
		lead, err := e.Campaign(ctx, args.Value)
		if err != nil {
			return nil, err
		}
		term, err := lead.Term()
		if err != nil {
			return nil, err
		}
		id := a.newID("g")
		a.mu.Lock()
		a.guards[id] = lead.Guard
		a.leads[id] = lead
		a.tokens[term] = id
		a.mu.Unlock()
		a.watch(id, lead.Guard)
		return sdkrunner.CampaignResult{
			LockResult: sdkrunner.LockResult{
				Guard: id, FencingToken: sdkrunner.U64(term), Stamp: stamp(lead.Stamp()),
				Kind: lead.Kind().String(), Limit: lead.Limit(), Permits: lead.Permits(), Mode: lead.Mode().String(),
			},
			Term: sdkrunner.U64(term), Value: lead.Value(),
		}, nil

	case sdkrunner.CmdProclaim:
		args, err := decode[sdkrunner.ProclaimArgs](req)
		if err != nil {
			return nil, err
		}
		lead, err := a.leadership(args.Guard)
		if err != nil {
			return nil, err
		}
		return sdkrunner.Empty{}, lead.Proclaim(ctx, args.Value)

	case sdkrunner.CmdResign:
		args, err := decode[sdkrunner.GuardArgs](req)
		if err != nil {
			return nil, err
		}
		lead, err := a.leadership(args.Guard)
		if err != nil {
			return nil, err
		}
		return sdkrunner.Empty{}, lead.Resign(ctx)

	case sdkrunner.CmdLeader:
		args, c, err := withClient(a, req, func(x sdkrunner.LeaderArgs) string { return x.Client })
		if err != nil {
			return nil, err
		}
		ld, ok, err := c.Election(args.Key).Leader(ctx)
		if err != nil || !ok {
			return sdkrunner.LeaderResult{}, err
		}
		return sdkrunner.LeaderResult{Leader: leader(ld)}, nil

	case sdkrunner.CmdObserve:
		args, c, err := withClient(a, req, func(x sdkrunner.ObserveArgs) string { return x.Client })
		if err != nil {
			return nil, err
		}
		if args.Observe == "" {
			return nil, badCommand("observe: observe (the id of its events) is required")
		}
		octx, stop := context.WithCancel(ctx)
		defer stop()
		a.mu.Lock()
		if _, dup := a.observes[args.Observe]; dup {
			a.mu.Unlock()
			return nil, badCommand("observe %q is already running", args.Observe)
		}
		a.observes[args.Observe] = stop
		a.mu.Unlock()
		defer func() {
			a.mu.Lock()
			delete(a.observes, args.Observe)
			a.mu.Unlock()
		}()
		n := 0
		for o, err := range c.Election(args.Key).Observe(octx) {
			if err != nil {
				return nil, err
			}
			n++
			m := sdkrunner.Message{Event: sdkrunner.EventObserved, Observe: args.Observe}
			if o.Leader != nil {
				m.Leader = leader(*o.Leader)
			}
			a.write(m)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err() // cancelled (the cancel command) or shut down
		}
		return sdkrunner.ObserveResult{Messages: n}, nil

	default: // CmdObserveStop
		args, err := decode[sdkrunner.ObserveStopArgs](req)
		if err != nil {
			return nil, err
		}
		a.mu.Lock()
		stop, ok := a.observes[args.Observe]
		a.mu.Unlock()
		if !ok {
			return nil, badCommand("unknown observe %q (none running under that name)", args.Observe)
		}
		stop()
		return sdkrunner.Empty{}, nil
	}
}

func (a *adapter) leadership(id string) (*holdfast.Leadership, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	l, ok := a.leads[id]
	if !ok {
		return nil, badCommand("unknown leadership %q (guards of campaign only)", id)
	}
	return l, nil
}

func leader(l holdfast.Leader) *sdkrunner.Leader {
	return &sdkrunner.Leader{Key: l.Key, Term: sdkrunner.U64(l.Term), Holder: l.Holder, Value: l.Value, Stamp: stamp(l.Stamp)}
}

// builder is the SDK builder lock's kind names: Client.Lock,
// Client.Semaphore (with Permits when given, as given) or Client.RWLock's
// Read or Write.
func builder(c *holdfast.Client, args sdkrunner.LockArgs) (holdfast.Lock, error) {
	var l holdfast.Lock
	switch args.Kind {
	case "", sdkrunner.LockKindMutex:
		l = c.Lock(args.Key)
	case sdkrunner.LockKindSemaphore:
		l = c.Semaphore(args.Key, args.Limit)
	case sdkrunner.LockKindRWLock:
		switch args.Mode {
		case sdkrunner.ModeShared:
			l = c.RWLock(args.Key).Read()
		case sdkrunner.ModeExclusive:
			l = c.RWLock(args.Key).Write()
		default:
			return l, badCommand("lock: an rwlock needs mode %q or %q, not %q", sdkrunner.ModeShared, sdkrunner.ModeExclusive, args.Mode)
		}
	default:
		return l, badCommand("lock: unknown kind %q", args.Kind)
	}
	if args.Permits != nil {
		l = l.Permits(*args.Permits)
	}
	return l, nil
}

// withTTL sets the lock's TTL from ttl_ms, or from ttl_native: a number of
// the SDK's own unit (a time.Duration of that many nanoseconds), as a user
// writing TTL(3) would, or "inf", which Go has no duration for: the longest
// one.
func withTTL(l holdfast.Lock, ttlMs int64, native json.RawMessage) (holdfast.Lock, error) {
	if len(native) == 0 {
		if ttlMs != 0 {
			l = l.TTL(ms(ttlMs))
		}
		return l, nil
	}
	var s string
	if json.Unmarshal(native, &s) == nil {
		if s != "inf" {
			return l, badCommand("ttl_native %q: want a number or \"inf\"", s)
		}
		return l.TTL(time.Duration(math.MaxInt64)), nil
	}
	var n float64
	if err := json.Unmarshal(native, &n); err != nil {
		return l, badCommand("ttl_native: %v", err)
	}
	return l.TTL(time.Duration(n)), nil
}

// clientOptions maps connect's client options to the SDK's.
func (a *adapter) clientOptions(args sdkrunner.ConnectArgs) ([]holdfast.Option, error) {
	var opts []holdfast.Option
	switch args.Protocol {
	case "", "connect":
		opts = append(opts, holdfast.WithProtocol(holdfast.ProtocolConnect))
	case "grpc":
		opts = append(opts, holdfast.WithProtocol(holdfast.ProtocolGRPC))
	case "grpc-web":
		opts = append(opts, holdfast.WithProtocol(holdfast.ProtocolGRPCWeb))
	default:
		return nil, &sdkrunner.Error{Kind: sdkrunner.KindUnsupported, Message: "protocol " + args.Protocol}
	}
	if args.RetryBudgetMs > 0 {
		opts = append(opts, holdfast.WithRetryBudget(ms(args.RetryBudgetMs)))
	}
	if args.RequestTimeoutMs > 0 {
		opts = append(opts, holdfast.WithRequestTimeout(ms(args.RequestTimeoutMs)))
	}
	if m := args.ExpiryMargin; m != nil {
		opts = append(opts, holdfast.WithExpiryMargin(holdfast.ExpiryMargin{DriftFactor: m.DriftFactor, Fixed: ms(m.FixedMs)}))
	}
	if args.LeaseEvents {
		opts = append(opts, holdfast.WithLeaseEvents(a.leaseEvent))
	}
	if args.BearerToken != "" {
		opts = append(opts, holdfast.WithBearerToken(args.BearerToken))
	}
	for k, v := range args.Headers {
		opts = append(opts, holdfast.WithHeader(k, v))
	}
	if args.CAFile != "" || args.CertFile != "" {
		cfg := &tls.Config{}
		if args.CAFile != "" {
			pem, err := os.ReadFile(args.CAFile)
			if err != nil {
				return nil, badCommand("ca_file: %v", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, badCommand("ca_file %s: no PEM certificate", args.CAFile)
			}
		}
		if args.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(args.CertFile, args.KeyFile)
			if err != nil {
				return nil, badCommand("cert_file/key_file: %v", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		opts = append(opts, holdfast.WithTLSConfig(cfg))
	}
	// Lease events go to the suite as events; the log goes to stderr.
	opts = append(opts, holdfast.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, nil))))
	return opts, nil
}

// leaseEvent writes a lease_event for one event of the SDK's listener.
func (a *adapter) leaseEvent(ev holdfast.LeaseEvent) {
	m := sdkrunner.Message{
		Event:        sdkrunner.EventLease,
		Type:         ev.Type.String(),
		Key:          ev.Key,
		FencingToken: sdkrunner.U64(ev.FencingToken),
		Guard:        a.guardID(ev.FencingToken),
	}
	switch ev.Type {
	case holdfast.LeaseRenewed:
		m.Renewals = ev.Renewals
	case holdfast.LeaseRenewalFailed:
		m.ErrorCode = holdfast.ErrorCode(ev.Err)
	case holdfast.LeaseLost:
		m.Reason = ev.Reason.String()
		var lost *holdfast.LeaseLostError
		if errors.As(ev.Err, &lost) && lost.LastErr != nil {
			m.ErrorCode = holdfast.ErrorCode(lost.LastErr)
		}
	}
	a.write(m)
}

// runIfFree runs TryWithLock with a function that reports its start and
// waits for run_finish.
func (a *adapter) runIfFree(ctx context.Context, req sdkrunner.Request) (any, error) {
	args, c, err := withClient(a, req, func(x sdkrunner.RunIfFreeArgs) string { return x.Client })
	if err != nil {
		return nil, err
	}
	if args.Run == "" {
		return nil, badCommand("run_if_free: run is required")
	}
	l := c.Lock(args.Key)
	if args.TTLMs != 0 {
		l = l.TTL(ms(args.TTLMs))
	}
	if args.Holder != "" {
		l = l.Holder(args.Holder)
	}
	if args.WaitMs != 0 {
		l = l.Wait(ms(args.WaitMs)) // TryWithLock must ignore it
	}
	finish := make(chan struct{})
	a.mu.Lock()
	a.runs[args.Run] = finish
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.runs, args.Run)
		a.mu.Unlock()
	}()
	var value string
	ran, err := holdfast.TryWithLock(ctx, l, func(ctx context.Context) error {
		g, _ := holdfast.GuardFromContext(ctx)
		tok, err := g.FencingToken()
		if err != nil {
			return err
		}
		a.write(sdkrunner.Message{Event: sdkrunner.EventRunStarted, Run: args.Run, FencingToken: sdkrunner.U64(tok)})
		select {
		case <-finish:
		case <-a.stop.Done():
		}
		value = strconv.FormatUint(tok, 10)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return sdkrunner.RunIfFreeResult{Ran: ran, Value: value}, nil
}

// guardState reads the guard's state from its Err, with the time left to
// its local expiry and its renewals.
func guardState(g *holdfast.Guard) sdkrunner.GuardStateResult {
	err := g.Err()
	remaining := float64(g.Remaining()) / float64(time.Millisecond)
	renewals := g.Renewals()
	res := sdkrunner.GuardStateResult{State: sdkrunner.StateHeld, RemainingMs: &remaining, Renewals: &renewals}
	var lost *holdfast.LeaseLostError
	switch {
	case err == nil:
	case errors.As(err, &lost):
		res.State, res.Reason = sdkrunner.StateLost, lost.Reason.String()
	default:
		res.State = sdkrunner.StateReleased
	}
	return res
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
			a.write(sdkrunner.Message{Event: sdkrunner.EventLeaseLost, Guard: id, Reason: lost.Reason.String()})
		}
	}()
}
