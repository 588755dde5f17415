package etcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/holdfast/holdfast/core/backend"
)

// Name is the backend's name in Info.
const Name = "etcd"

// Version is the plugin's version, reported in Info.
const Version = "0.1.0"

// Defaults for the options.
const (
	DefaultPrefix      = "/holdfast/"
	DefaultDialTimeout = 3 * time.Second
	DefaultCallTimeout = 3 * time.Second
	DefaultMinTTL      = 2 * time.Second
	// MaxTTL is etcd's own limit on a lease TTL (MaxLeaseTTL, 9e9 seconds).
	MaxTTL = 9_000_000_000 * time.Second
)

// revokeQueue bounds the leases waiting to be revoked in the background; when
// it is full a lease is left to expire on its own.
const revokeQueue = 4096

// Leases no longer needed are revoked in batches, every revokeEvery, with up
// to revokeParallel revocations in flight.
const (
	revokeEvery    = 100 * time.Millisecond
	revokeParallel = 64
)

// Backend is a backend.Backend on etcd. Create it with Open; Close it when
// done.
type Backend struct {
	cli         *clientv3.Client
	endpoints   []string
	callTimeout time.Duration
	minTTL      time.Duration

	locks  string // prefix + "locks/"
	owners string // prefix + "owners/"
	queue  string // prefix + "queue/": the fair queues (queue.go)
	// released: prefix + "released/", each key's last Release's request
	// identity (requests.go).
	released string
	// delays: prefix + "delays/", the keys that hold lock-delays
	// (delays.go).
	delays string
	// grants: prefix + "grants/", one key per grant of a semaphore, rwlock
	// or election, that Count counts (count.go).
	grants string

	q      queueState
	gates  grantGates // grants.go
	revoke chan clientv3.LeaseID
	pool   *leasePool
	// renew renews pooled leases on reused streams (renew.go).
	renew *renewer
	// shared counts the records on the leases this process's batches
	// attached, so that the last one's detach pools the lease
	// (sharedleases.go).
	shared sharedLeases
	// stamps: the keys known to have a stamp key (stamps.go).
	stamps stampsSeen
	// held: the stamps this process's Acquires stored for the locks they
	// granted, so that their Release needs no nested transaction
	// (stamps.go).
	held heldStamps
	// batchRefused counts batch transactions etcd refused as too large
	// (batch.go): their items went their single paths.
	batchRefused atomic.Int64
	closeOnce    sync.Once
	done         chan struct{}
	wg           sync.WaitGroup
}

var _ backend.FairBackend = (*Backend)(nil)

// Open connects to etcd as opts say (see the package doc) and checks that it
// answers within the dial timeout; an unreachable etcd is an error naming
// the endpoints, wrapping backend.ErrUnavailable.
func Open(ctx context.Context, opts map[string]string) (backend.Backend, error) {
	return New(ctx, opts)
}

// New is Open returning the concrete type.
func New(ctx context.Context, opts map[string]string) (*Backend, error) {
	return newBackend(ctx, opts, nil)
}

// Flow-control windows of the client's connection to etcd, fixed. With
// grpc-go's default dynamic windows the client runs a bandwidth-delay
// estimator that sends etcd a PING (and a window update) whenever a
// response arrives while no estimate is under way: at low load, on nearly
// every response, so etcd answers a PING beside every call. Lock calls are
// small; these windows (a stream's is sixteen times gRPC's initial 64 KiB,
// the connection's is shared by all calls at once) bound nothing they send,
// and a Watch stream may still run 1 MiB ahead of its reader.
const (
	etcdStreamWindow = 1 << 20
	etcdConnWindow   = 16 << 20
)

func fixedWindows() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithStaticStreamWindowSize(etcdStreamWindow), grpc.WithStaticConnWindowSize(etcdConnWindow)}
}

// newBackend is New with extra gRPC dial options (the tests count the
// backend's round trips to etcd with an interceptor).
func newBackend(ctx context.Context, opts map[string]string, dial []grpc.DialOption) (*Backend, error) {
	cfg, b, err := parseOptions(opts)
	if err != nil {
		return nil, err
	}
	cfg.DialOptions = append(cfg.DialOptions, dial...)
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd at %s: %w: %w", strings.Join(b.endpoints, ","), backend.ErrUnavailable, err)
	}
	// clientv3.New does not wait for a connection: prove etcd answers, within
	// the dial timeout, so that a wrong address fails now and clearly.
	pctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	_, err = cli.Get(pctx, b.locks, clientv3.WithCountOnly())
	cancel()
	if err != nil {
		cli.Close()
		// %v, not %w, as in wrap: the dial timeout is not the caller's.
		return nil, fmt.Errorf("etcd at %s did not answer within %s: %w: %v",
			strings.Join(b.endpoints, ","), cfg.DialTimeout, backend.ErrUnavailable, err) //nolint:errorlint // see wrap
	}
	b.cli = cli
	b.renew = newRenewer(cli)
	b.revoke = make(chan clientv3.LeaseID, revokeQueue)
	b.done = make(chan struct{})
	b.pool = newLeasePool(b)
	b.wg.Add(2)
	go b.revokeLoop()
	go b.pool.loop()
	return b, nil
}

func parseOptions(opts map[string]string) (clientv3.Config, *Backend, error) {
	known := map[string]bool{"endpoints": true, "dial_timeout": true, "call_timeout": true, "prefix": true,
		"username": true, "password": true, "tls_ca": true, "tls_cert": true, "tls_key": true, "min_ttl": true}
	for k := range opts {
		if !known[k] {
			return clientv3.Config{}, nil, fmt.Errorf("etcd: unknown option %q (known: endpoints, dial_timeout, call_timeout, prefix, username, password, tls_ca, tls_cert, tls_key, min_ttl): %w", k, backend.ErrInvalidArgument)
		}
	}
	dur := func(name string, def time.Duration) (time.Duration, error) {
		s, ok := opts[name]
		if !ok || s == "" {
			return def, nil
		}
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return 0, fmt.Errorf("etcd: option %s=%q: want a positive duration such as 3s: %w", name, s, backend.ErrInvalidArgument)
		}
		return d, nil
	}
	dial, err := dur("dial_timeout", DefaultDialTimeout)
	if err != nil {
		return clientv3.Config{}, nil, err
	}
	call, err := dur("call_timeout", DefaultCallTimeout)
	if err != nil {
		return clientv3.Config{}, nil, err
	}
	minTTL, err := dur("min_ttl", DefaultMinTTL)
	if err != nil {
		return clientv3.Config{}, nil, err
	}
	prefix := DefaultPrefix
	if p, ok := opts["prefix"]; ok && p != "" {
		prefix = p
	}

	var tlsCfg *tls.Config
	if opts["tls_ca"] != "" || opts["tls_cert"] != "" || opts["tls_key"] != "" {
		if (opts["tls_cert"] == "") != (opts["tls_key"] == "") {
			return clientv3.Config{}, nil, fmt.Errorf("etcd: tls_cert and tls_key go together: %w", backend.ErrInvalidArgument)
		}
		info := transport.TLSInfo{TrustedCAFile: opts["tls_ca"], CertFile: opts["tls_cert"], KeyFile: opts["tls_key"]}
		tlsCfg, err = info.ClientConfig()
		if err != nil {
			return clientv3.Config{}, nil, fmt.Errorf("etcd: TLS options: %w: %w", backend.ErrInvalidArgument, err)
		}
	}

	var endpoints []string
	for e := range strings.SplitSeq(opts["endpoints"], ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if !strings.Contains(e, "://") {
			if tlsCfg != nil {
				e = "https://" + e
			} else {
				e = "http://" + e
			}
		}
		endpoints = append(endpoints, e)
	}
	if len(endpoints) == 0 {
		return clientv3.Config{}, nil, fmt.Errorf("etcd: option endpoints is required (comma-separated, e.g. http://127.0.0.1:2379): %w", backend.ErrInvalidArgument)
	}
	if (opts["username"] == "") != (opts["password"] == "") {
		return clientv3.Config{}, nil, fmt.Errorf("etcd: username and password go together: %w", backend.ErrInvalidArgument)
	}

	cfg := clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: dial,
		// Notice a silent etcd (a partition, a stopped process) within a few
		// seconds rather than at the kernel's TCP timeout.
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		TLS:                  tlsCfg,
		Username:             opts["username"],
		Password:             opts["password"],
		// stdout carries the plugin handshake and the engine logs its own
		// errors; the client's own chatter is noise.
		Logger:      zap.NewNop(),
		DialOptions: fixedWindows(),
	}
	b := &Backend{
		endpoints:   endpoints,
		callTimeout: call,
		minTTL:      minTTL,
		locks:       prefix + "locks/",
		owners:      prefix + "owners/",
		queue:       prefix + "queue/",
		released:    prefix + "released/",
		delays:      prefix + "delays/",
		grants:      prefix + "grants/",
	}
	return cfg, b, nil
}

// Close stops the background work and closes the etcd client.
func (b *Backend) Close() error {
	var err error
	b.closeOnce.Do(func() {
		close(b.done)
		b.wg.Wait()
		b.closeQueue()
		b.renew.close()
		err = b.cli.Close()
	})
	return err
}

// Info states what the etcd backend promises.
func (b *Backend) Info(context.Context) (backend.Info, error) {
	return backend.Info{
		Name:           Name,
		Version:        Version,
		Shared:         true,
		Durable:        true,
		TTLGranularity: time.Second,
		MinTTL:         b.minTTL,
		MaxTTL:         MaxTTL,
		Fair:           true,
		MaxKeys:        MaxKeys,
		RequestIDs:     true,
		MaxLockDelay:   MaxLockDelay,
		Kinds:          Kinds,
	}, nil
}

// revokeLoop revokes leases that are no longer needed (released locks,
// replaced leases, leases of failed acquires), off the callers' path and in
// batches: every revokeEvery it sends what has queued up all at once, so etcd
// commits the batch's revocations together (raft batches concurrent
// proposals into one disk sync) instead of one sync per released lock
// landing between the callers' own writes.
func (b *Backend) revokeLoop() {
	defer b.wg.Done()
	tick := time.NewTicker(revokeEvery)
	defer tick.Stop()
	var pending []clientv3.LeaseID
	for {
		select {
		case <-b.done:
			return
		case id := <-b.revoke:
			pending = append(pending, id)
		case <-tick.C:
			b.deleteOrphans()
			if len(pending) > 0 {
				b.revokeAll(pending)
				pending = pending[:0]
			}
		}
	}
}

// revokeAll revokes ids concurrently (at most revokeParallel at a time) and
// waits. A failure leaves a lease to expire on its own: nothing to do.
func (b *Backend) revokeAll(ids []clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), b.callTimeout)
	defer cancel()
	sem := make(chan struct{}, revokeParallel)
	var wg sync.WaitGroup
	for _, id := range ids {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			_, _ = b.cli.Revoke(ctx, id)
		}()
	}
	wg.Wait()
}

// revokeLater queues a lease for revocation without waiting.
func (b *Backend) revokeLater(id clientv3.LeaseID) {
	if id == clientv3.NoLease {
		return
	}
	select {
	case b.revoke <- id:
	default:
	}
}

// call bounds one backend call by the call timeout.
func (b *Backend) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, b.callTimeout)
}

// wrap turns an etcd client error into what the engine branches on: when the
// caller's own context (parent, not the call-timeout one) is done, its error;
// everything else (etcd down, no leader, the call timeout) is unavailable.
func wrap(parent context.Context, op string, err error) error {
	if perr := parent.Err(); perr != nil {
		return fmt.Errorf("etcd %s: %w", op, perr)
	}
	if errors.Is(err, backend.ErrUnavailable) {
		return fmt.Errorf("etcd %s: %w", op, err)
	}
	// %v, not %w: our own call timeout must read as unavailable, not as the
	// caller's deadline (which context.DeadlineExceeded in the chain would
	// say to the plugin server).
	return fmt.Errorf("etcd %s: %w: %v", op, backend.ErrUnavailable, err) //nolint:errorlint // see above
}
