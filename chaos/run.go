package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/holdfast/holdfast/harness"
	holdfast "github.com/holdfast/holdfast/sdk-go"
)

// Fault kinds the harness injects.
const (
	FaultPluginKill     = "plugin-kill"     // kill -9 of a server's backend plugin (the server relaunches it)
	FaultServerKill     = "server-kill"     // kill -9 of a server, then a restart
	FaultClientPause    = "client-pause"    // SIGSTOP of a client holding a lease, past its TTL, then SIGCONT
	FaultBackendRestart = "backend-restart" // crash and restart of etcd / Redis / PostgreSQL
	FaultPartition      = "partition"       // a proxy blackholes a server's clients, then drops their connections
	FaultDrop           = "drop"            // a proxy closes every connection at once
)

// Config says what a run does.
type Config struct {
	Backend  string        // memory, etcd, redis, postgres
	Duration time.Duration // how long clients run
	Seed     uint64        // seeds every random choice (keys, waits, faults)
	Clients  int           // client processes
	Keys     int           // lock keys they contend for
	// SemaphoreLimit > 0 adds a semaphore workload: some cycles take 1 or
	// 2 permits of the key chaos/sem, whose limit this is.
	SemaphoreLimit int
	// RWLock adds a read-write lock workload: some cycles take a shared
	// (two in three) or exclusive grant of the key chaos/rw.
	RWLock bool
	// Election adds a leader election workload: some cycles campaign for
	// chaos/elect, proclaim values as leader and resign, and every client
	// observes the key (an Observe stream) for the whole run.
	Election bool
	TTL      time.Duration // lease TTL
	// FaultEvery is the mean gap between faults.
	FaultEvery time.Duration
	// Faults are the kinds to inject; nil means every kind that applies,
	// empty (non-nil) none.
	Faults []string
	// Binaries: the holdfast server, the plugin (empty for memory), the
	// chaos client.
	Server, Plugin, Client string
	// Service is the backend's own server (Options point plugins at it).
	Service *Service
	// Logf receives progress lines.
	Logf func(format string, args ...any)
}

// Fault is one injected fault, for the report and the visualisation.
type Fault struct {
	Kind   string `json:"kind"`
	Start  int64  `json:"start"`
	End    int64  `json:"end"`
	Detail string `json:"detail"`
}

// Report is what a run did.
type Report struct {
	History []Op
	Faults  []Fault
	// Observations: what the clients' Observe streams of the election key
	// received (checked by CheckObservations).
	Observations []Observation
	// NoElection: Config.Election was asked for, but the backend does not
	// list KIND_ELECTION, so the election workload did not run.
	NoElection bool
	// Findings are problems that are not lock-safety violations (an orphaned
	// plugin, a server that did not stop cleanly).
	Findings []string
	// Writes the SDK already knew to be after the lease's loss, and how many
	// of those the fence refused.
	LostWrites, LostWritesRefused int
}

// Counts summarises the history by kind/outcome and the faults by kind.
func (r *Report) Counts() (ops map[string]int, faults map[string]int) {
	ops, faults = map[string]int{}, map[string]int{}
	for _, o := range r.History {
		ops[string(o.Kind)+"/"+string(o.Outcome)]++
		if len(o.Set) > 0 {
			ops["of-a-set:"+string(o.Kind)+"/"+string(o.Outcome)]++
		}
	}
	for _, f := range r.Faults {
		faults[f.Kind]++
	}
	return ops, faults
}

type server struct {
	opts harness.Options
	mu   sync.Mutex
	s    *harness.Server
}

func (s *server) get() *harness.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.s
}

type run struct {
	cfg     Config
	servers []*server
	proxies []*Proxy
	proxyOf []int // proxy index -> server index
	res     *Resource
	clients []*client
	stopAt  time.Time

	// One client pause at a time: pausePending is a request not yet served
	// (the next client to acquire takes it), pausing one being served.
	pausePending, pausing atomic.Bool
	faultC                int // visualisation lane of faults

	mu     sync.Mutex
	report Report
}

func (r *run) record(o Op) {
	r.mu.Lock()
	r.report.History = append(r.report.History, o)
	r.mu.Unlock()
}

func (r *run) fault(f Fault) {
	r.mu.Lock()
	r.report.Faults = append(r.report.Faults, f)
	r.mu.Unlock()
	r.cfg.Logf("fault %s: %s (%s)", f.Kind, f.Detail, time.Duration(f.End-f.Start).Round(time.Millisecond))
}

func (r *run) finding(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.report.Findings = append(r.report.Findings, msg)
	r.mu.Unlock()
	r.cfg.Logf("finding: %s", msg)
}

// Run runs the clients and the faults for cfg.Duration and returns the
// report; errors are failures of the harness itself (a server that does not
// come back, a stuck client), not lock violations — check the history with
// Check for those.
func Run(ctx context.Context, cfg Config) (rep *Report, err error) {
	r := &run{cfg: cfg, faultC: cfg.Clients}
	backendArg := cfg.Plugin
	if backendArg == "" {
		backendArg = "memory"
	}
	var cleanups []func()
	defer func() {
		for _, c := range slices.Backward(cleanups) {
			c()
		}
	}()
	// A second server only when the backend says it is shared: servers on a
	// non-shared backend are separate locks.
	for i := 0; i < 1 || (i < 2 && r.servers[0].get().Shared); i++ {
		s := &server{opts: harness.Options{Binary: cfg.Server, Backend: backendArg, BackendOptions: cfg.Service.Options}}
		hs, err := harness.Start(ctx, s.opts)
		if err != nil {
			return nil, err
		}
		s.s = hs
		r.servers = append(r.servers, s)
		cleanups = append(cleanups, func() {
			if err := s.get().Stop(20 * time.Second); err != nil {
				r.finding("server did not stop cleanly: %v", firstLine(err))
			}
		})
	}
	nServers := len(r.servers)
	if cfg.Election {
		keeps, err := keepsElections(ctx, r.servers[0].get().URL)
		if err != nil {
			return nil, err
		}
		if !keeps {
			// A backend that does not keep elections answers every campaign
			// unimplemented: run the others, and say so in the report.
			r.cfg.Election, r.report.NoElection = false, true
			cfg = r.cfg
			cfg.Logf("%s does not list KIND_ELECTION: the election workload does not run", cfg.Backend)
		}
	}
	// Two proxies: with one server both lead to it, so a partition cuts off
	// half of the clients; with two, one each.
	for i := range 2 {
		si := i % nServers
		p, err := StartProxy(r.servers[si].get().Addr)
		if err != nil {
			return nil, err
		}
		r.proxies = append(r.proxies, p)
		r.proxyOf = append(r.proxyOf, si)
		cleanups = append(cleanups, func() { _ = p.Close() })
	}
	if r.res, err = StartResource(); err != nil {
		return nil, err
	}
	cleanups = append(cleanups, func() { _ = r.res.Close() })
	observe := ""
	if cfg.Election {
		observe = ElectionKey
	}
	for i := range cfg.Clients {
		c, err := startClient(cfg.Client, i, "http://"+r.proxies[i%len(r.proxies)].Addr(), r.res.URL(), observe)
		if err != nil {
			return nil, err
		}
		r.clients = append(r.clients, c)
		cleanups = append(cleanups, c.close)
	}

	r.stopAt = time.Now().Add(cfg.Duration)
	cfg.Logf("running %d clients on %d lock keys (semaphore limit %d, rwlock %v, election %v) against %d %s server(s) for %s, seed %d",
		cfg.Clients, cfg.Keys, cfg.SemaphoreLimit, cfg.RWLock, cfg.Election, nServers, cfg.Backend, cfg.Duration, cfg.Seed)
	fctx, stopFaults := context.WithCancel(ctx)
	faultsDone := make(chan error, 1)
	go func() { faultsDone <- r.faults(fctx) }()
	var wg sync.WaitGroup
	errs := make([]error, len(r.clients))
	for i, c := range r.clients {
		wg.Go(func() { errs[i] = r.drive(ctx, c) })
	}
	wg.Wait()
	stopFaults()
	ferr := <-faultsDone
	if err := errors.Join(append(errs, ferr)...); err != nil {
		return &r.report, err
	}
	for _, c := range r.clients {
		r.report.LostWrites += c.lostWrites
		r.report.LostWritesRefused += c.lostRefused
	}
	// Every cycle is over; what the streams deliver from now on sees no
	// operation the history has not got already.
	for _, c := range r.clients {
		r.report.Observations = append(r.report.Observations, c.observations()...)
	}
	r.report.History = append(r.report.History, r.res.Ops()...)
	return &r.report, nil
}

// keepsElections asks the server at url whether its backend keeps elections.
func keepsElections(ctx context.Context, url string) (bool, error) {
	c, err := holdfast.Dial(url)
	if err != nil {
		return false, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	info, err := c.ServerInfo(ctx)
	if err != nil {
		return false, fmt.Errorf("server info: %w", err)
	}
	return info.Backend.Keeps(holdfast.KindElection), nil
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// ---- clients ----

type client struct {
	id     int
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	events chan clientEvent
	done   chan struct{}
	stderr *harness.Tail

	lostWrites, lostRefused int

	mu       sync.Mutex
	observed []Observation
}

func (c *client) observations() []Observation {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.observed)
}

type clientCommand struct {
	Seq int    `json:"seq"`
	Key string `json:"key"`
	// More: the other keys of a multi-key lease.
	More   []string `json:"more,omitempty"`
	TTLms  int64    `json:"ttl_ms"`
	WaitMs int64    `json:"wait_ms"`
	WorkMs int64    `json:"work_ms"`
	Writes int      `json:"writes"`
	// Prim, Limit, Permits, Writer: a semaphore's or read-write lock's
	// grant (see chaos-client).
	Prim    string `json:"prim,omitempty"`
	Limit   int    `json:"limit,omitempty"`
	Permits int    `json:"permits,omitempty"`
	Writer  bool   `json:"writer,omitempty"`
}

// Keys of the semaphore, read-write lock and election workloads.
const (
	SemaphoreKey = "chaos/sem"
	RWLockKey    = "chaos/rw"
	ElectionKey  = "chaos/elect"
)

// primKeys lists every key of the run with its primitive.
func (r *run) primKeys() (keys, prims []string) {
	for k := range r.cfg.Keys {
		keys, prims = append(keys, fmt.Sprintf("chaos/k%d", k)), append(prims, PrimMutex)
	}
	if r.cfg.SemaphoreLimit > 0 {
		keys, prims = append(keys, SemaphoreKey), append(prims, PrimSemaphore)
	}
	if r.cfg.RWLock {
		keys, prims = append(keys, RWLockKey), append(prims, PrimRWLock)
	}
	if r.cfg.Election {
		keys, prims = append(keys, ElectionKey), append(prims, PrimElection)
	}
	return keys, prims
}

// grantCycle turns cmd into a semaphore, read-write lock or election cycle,
// one time in two when the run has those workloads (split between them
// evenly); a lock cycle otherwise.
func (r *run) grantCycle(cmd *clientCommand, rng *rand.Rand) {
	var choices []string
	if r.cfg.SemaphoreLimit > 0 {
		choices = append(choices, PrimSemaphore)
	}
	if r.cfg.RWLock {
		choices = append(choices, PrimRWLock)
	}
	if r.cfg.Election {
		choices = append(choices, PrimElection)
	}
	if len(choices) == 0 || rng.IntN(2) == 0 {
		return
	}
	cmd.More = nil
	switch cmd.Prim = choices[rng.IntN(len(choices))]; cmd.Prim {
	case PrimSemaphore:
		cmd.Key, cmd.Limit, cmd.Permits = SemaphoreKey, r.cfg.SemaphoreLimit, 1+rng.IntN(min(2, r.cfg.SemaphoreLimit))
	case PrimRWLock:
		cmd.Key, cmd.Limit, cmd.Permits = RWLockKey, RWLockReaders, 1
		if cmd.Writer = rng.IntN(3) == 0; cmd.Writer {
			cmd.Permits = RWLockReaders
		}
	case PrimElection:
		// A campaign; as leader, a proclaim after each write (the values
		// are ElectionValue(client, seq, n)), then a resignation.
		cmd.Key = ElectionKey
	}
}

type clientEvent struct {
	Seq        int    `json:"seq"`
	Op         string `json:"op"`
	Key        string `json:"key"`
	Call       int64  `json:"call"`
	Return     int64  `json:"return"`
	Outcome    string `json:"outcome"`
	Fence      uint64 `json:"fence"`
	Err        string `json:"err"`
	Holding    bool   `json:"holding"`
	Accepted   int    `json:"accepted"`
	Refused    int    `json:"refused"`
	LostBefore int    `json:"lost_before"`
	// Value: a campaign's or proclaim's value; for "observed", the leader's.
	Value string `json:"value"`
	// "observed": one message of the client's Observe stream.
	Stream int    `json:"stream"`
	At     int64  `json:"at"`
	None   bool   `json:"none"`
	Term   uint64 `json:"term"`
	Holder string `json:"holder"`
}

// startClient starts client id; observe, when set, is a key it observes
// (an Observe stream) from start to exit.
func startClient(bin string, id int, serverURL, resourceURL, observe string) (*client, error) {
	c := &client{id: id, events: make(chan clientEvent, 16), done: make(chan struct{}), stderr: harness.NewTail(16 << 10)}
	c.cmd = exec.Command(bin, "-id", fmt.Sprint(id), "-server", serverURL, "-resource", resourceURL, "-observe", observe)
	c.cmd.Stderr = c.stderr
	var err error
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var ev clientEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				fmt.Fprintf(c.stderr, "harness: bad event %q: %v\n", sc.Text(), err)
				continue
			}
			if ev.Op == "observed" {
				c.mu.Lock()
				c.observed = append(c.observed, Observation{Client: c.id, Stream: ev.Stream, Key: ev.Key, At: ev.At,
					None: ev.None, Term: ev.Term, Value: ev.Value, Holder: ev.Holder})
				c.mu.Unlock()
				continue
			}
			c.events <- ev
		}
		close(c.events)
		_ = c.cmd.Wait()
	}()
	return c, nil
}

func (c *client) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = c.stdin.Write(append(b, '\n'))
	return err
}

func (c *client) next(ctx context.Context, timeout time.Duration) (clientEvent, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case ev, ok := <-c.events:
		if !ok {
			return ev, fmt.Errorf("client %d exited; stderr:\n%s", c.id, c.stderr.String())
		}
		return ev, nil
	case <-t.C:
		return clientEvent{}, fmt.Errorf("client %d: no event within %s; stderr:\n%s", c.id, timeout, c.stderr.String())
	case <-ctx.Done():
		return clientEvent{}, ctx.Err()
	}
}

// close ends the client: stdin closed, it exits; SIGKILL if it does not.
func (c *client) close() {
	_ = syscall.Kill(c.cmd.Process.Pid, syscall.SIGCONT)
	_ = c.stdin.Close()
	kill := time.AfterFunc(15*time.Second, func() { _ = c.cmd.Process.Kill() })
	for range c.events {
	}
	<-c.done
	kill.Stop()
}

func outcome(s string) Outcome {
	switch s {
	case "ok":
		return OK
	case "busy":
		return Busy
	case "rejected":
		return Rejected
	}
	return Unknown
}

// drive runs lock cycles on one client until the run's end.
func (r *run) drive(ctx context.Context, c *client) error {
	rng := rand.New(rand.NewPCG(r.cfg.Seed, uint64(c.id)+1))
	ttl := r.cfg.TTL
	for seq := 0; time.Now().Before(r.stopAt); seq++ {
		cmd := clientCommand{
			Seq:    seq,
			Key:    fmt.Sprintf("chaos/k%d", rng.IntN(r.cfg.Keys)),
			TTLms:  ttl.Milliseconds(),
			WorkMs: rng.Int64N(ttl.Milliseconds() / 4),
			Writes: 1 + rng.IntN(3),
		}
		if r.cfg.Keys > 1 && rng.IntN(3) == 0 {
			// A multi-key lease: the key and another, overlapping other
			// clients' sets and single keys.
			other := fmt.Sprintf("chaos/k%d", rng.IntN(r.cfg.Keys))
			for other == cmd.Key {
				other = fmt.Sprintf("chaos/k%d", rng.IntN(r.cfg.Keys))
			}
			cmd.More = []string{other}
		}
		r.grantCycle(&cmd, rng)
		if rng.IntN(3) > 0 {
			cmd.WaitMs = rng.Int64N(2 * ttl.Milliseconds())
		}
		if err := c.send(cmd); err != nil {
			return fmt.Errorf("client %d: %w", c.id, err)
		}
		bound := time.Duration(cmd.WaitMs)*time.Millisecond + 4*ttl + 30*time.Second
		fences := map[string]uint64{} // per key: a multi-key lease reports each key
		for {
			ev, err := c.next(ctx, bound)
			if err != nil {
				return err
			}
			if ev.Op == "done" {
				break
			}
			o := Op{Key: ev.Key, Client: c.id, Call: ev.Call, Return: ev.Return, Outcome: outcome(ev.Outcome), Fence: ev.Fence, Note: ev.Err,
				Prim: cmd.Prim, Limit: cmd.Limit, Permits: cmd.Permits, Value: ev.Value}
			if len(cmd.More) > 0 {
				o.Set = append([]string{cmd.Key}, cmd.More...)
			}
			switch ev.Op {
			case "acquire":
				o.Kind, o.TTL, o.Wait = Acquire, int64(ttl), int64(time.Duration(cmd.WaitMs)*time.Millisecond)
				fences[ev.Key] = ev.Fence
				r.record(o)
				if ev.Holding {
					if err := r.maybePause(ctx, c, rng); err != nil {
						return err
					}
					if err := c.send(map[string]string{"go": "on"}); err != nil {
						return err
					}
				}
			case "proclaim":
				o.Kind = Proclaim
				r.record(o)
			case "release":
				c.lostWrites += ev.LostBefore
				if ev.LostBefore > 0 {
					c.lostRefused += min(ev.Refused, ev.LostBefore)
				}
				if fences[ev.Key] != 0 {
					o.Kind = Release
					r.record(o)
				}
			}
		}
	}
	return nil
}

// maybePause serves a pending pause request: SIGSTOP the client, which holds
// a lease and has not written yet, until its TTL (plus the backend's
// granularity and some) has passed, then SIGCONT. The SDK's watchdog is
// frozen too: nothing renews the lease, as in a long GC pause.
func (r *run) maybePause(ctx context.Context, c *client, rng *rand.Rand) error {
	if !r.pausePending.CompareAndSwap(true, false) {
		return nil
	}
	r.pausing.Store(true)
	defer r.pausing.Store(false)
	pid := c.cmd.Process.Pid
	d := r.cfg.TTL + time.Second + time.Duration(rng.Int64N(int64(800*time.Millisecond)))
	start := time.Now()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("SIGSTOP client %d: %w", c.id, err)
	}
	t := time.NewTimer(d)
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	t.Stop()
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		return fmt.Errorf("SIGCONT client %d: %w", c.id, err)
	}
	r.fault(Fault{Kind: FaultClientPause, Start: start.UnixNano(), End: time.Now().UnixNano(),
		Detail: fmt.Sprintf("client %d (pid %d) stopped for %s while holding", c.id, pid, d.Round(time.Millisecond))})
	return nil
}

// ---- faults ----

func (r *run) kinds() []string {
	if r.cfg.Faults != nil {
		return slices.Clone(r.cfg.Faults)
	}
	k := []string{FaultPluginKill, FaultServerKill, FaultClientPause, FaultPartition, FaultDrop}
	if r.cfg.Backend != "memory" {
		k = append(k, FaultBackendRestart)
	}
	return k
}

// faults injects one fault at a time, at seeded random gaps, cycling through
// a seeded permutation of the kinds so that a short run still sees each.
func (r *run) faults(ctx context.Context) error {
	rng := rand.New(rand.NewPCG(r.cfg.Seed, 0xfa17))
	var order []string
	// Leave the last TTL and a half fault-free, so the run ends settled.
	end := r.stopAt.Add(-r.cfg.TTL * 3 / 2)
	for {
		gap := r.cfg.FaultEvery/2 + time.Duration(rng.Int64N(int64(r.cfg.FaultEvery)))
		if time.Now().Add(gap).After(end) {
			return nil
		}
		t := time.NewTimer(gap)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		if len(order) == 0 {
			if order = r.kinds(); len(order) == 0 {
				return nil
			}
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		}
		kind := order[0]
		order = order[1:]
		if err := r.inject(ctx, kind, rng); err != nil {
			return fmt.Errorf("fault %s: %w", kind, err)
		}
	}
}

// reset records that a non-durable backend may have lost every lock between
// start and now (one Reset op per key: the history is checked per key).
func (r *run) reset(start int64, why string) {
	if r.cfg.Service.Durable {
		return
	}
	end := time.Now().UnixNano()
	keys, prims := r.primKeys()
	for i, k := range keys {
		r.record(Op{Kind: Reset, Prim: prims[i], Key: k, Client: r.faultC, Call: start, Return: end, Outcome: OK, Note: why})
	}
}

func (r *run) inject(ctx context.Context, kind string, rng *rand.Rand) error {
	start := time.Now()
	f := Fault{Kind: kind, Start: start.UnixNano()}
	switch kind {
	case FaultPluginKill:
		si := rng.IntN(len(r.servers))
		s := r.servers[si].get()
		kids := harness.Children(s.PID())
		if len(kids) == 0 {
			return fmt.Errorf("server %d (pid %d) has no plugin child", si, s.PID())
		}
		plugin := kids[0]
		if err := syscall.Kill(plugin, syscall.SIGKILL); err != nil {
			return fmt.Errorf("kill -9 plugin %d: %w", plugin, err)
		}
		// The server relaunches it: wait for a new child.
		var relaunched int
		if err := pollUntil(ctx, 60*time.Second, func() bool {
			for _, k := range harness.Children(s.PID()) {
				if k != plugin {
					relaunched = k
					return true
				}
			}
			return false
		}, "plugin relaunched"); err != nil {
			return err
		}
		r.reset(f.Start, "memory plugin killed")
		f.Detail = fmt.Sprintf("server %d: plugin pid %d killed, relaunched as %d", si, plugin, relaunched)
	case FaultServerKill:
		si := rng.IntN(len(r.servers))
		if err := r.restartServer(ctx, si); err != nil {
			return err
		}
		r.reset(f.Start, "server (and its memory plugin) killed")
		f.Detail = fmt.Sprintf("server %d killed and restarted at %s", si, r.servers[si].get().Addr)
	case FaultClientPause:
		if !r.pausing.Load() {
			r.pausePending.Store(true)
		}
		return nil // recorded when served
	case FaultBackendRestart:
		if err := r.cfg.Service.Restart(ctx); err != nil {
			return err
		}
		r.reset(f.Start, "backend service restarted")
		f.Detail = r.cfg.Backend + " crashed and restarted"
	case FaultPartition:
		pi := rng.IntN(len(r.proxies))
		d := r.cfg.TTL/4 + time.Duration(rng.Int64N(int64(r.cfg.TTL)))
		r.proxies[pi].Blackhole()
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		r.proxies[pi].Drop()
		r.proxies[pi].Heal()
		f.Detail = fmt.Sprintf("proxy %d (clients of server %d) blackholed for %s, then dropped", pi, r.proxyOf[pi], d.Round(time.Millisecond))
	case FaultDrop:
		pi := rng.IntN(len(r.proxies))
		r.proxies[pi].Drop()
		f.Detail = fmt.Sprintf("proxy %d: connections dropped", pi)
	}
	f.End = time.Now().UnixNano()
	r.fault(f)
	return nil
}

// restartServer SIGKILLs server si and starts it again; its proxies follow
// the new address. Its plugin must exit by itself (the parent died); one
// that does not is killed and reported.
func (r *run) restartServer(ctx context.Context, si int) error {
	srv := r.servers[si]
	old := srv.get()
	kids := harness.Children(old.PID())
	if err := old.Kill(); err != nil {
		return err
	}
	for _, k := range kids {
		if err := pollUntil(ctx, 10*time.Second, func() bool { return !harness.Alive(k) }, "orphaned plugin exits"); err != nil {
			r.finding("plugin pid %d outlived its killed server by 10s; killing it", k)
			_ = syscall.Kill(k, syscall.SIGKILL)
		}
	}
	hs, err := harness.Start(ctx, srv.opts)
	if err != nil {
		return fmt.Errorf("restart server %d: %w", si, err)
	}
	srv.mu.Lock()
	srv.s = hs
	srv.mu.Unlock()
	for pi, p := range r.proxies {
		if r.proxyOf[pi] == si {
			p.Retarget(hs.Addr)
		}
	}
	return nil
}

// ---- helpers ----

// Summary is a one-line account of a report for logs.
func (r *Report) Summary() string {
	ops, faults := r.Counts()
	return fmt.Sprintf("ops %s; faults %s; SDK-lost writes %d (fence refused %d)",
		kv(ops), kv(faults), r.LostWrites, r.LostWritesRefused)
}

func kv(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s=%d", k, m[k])
	}
	return b.String()
}
