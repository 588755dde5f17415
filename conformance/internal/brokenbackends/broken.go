// Package brokenbackends holds deliberately wrong backends that prove the
// conformance suite catches each bug: every one wraps a correct backend (the
// memory backend, or the durable filestore where the bug needs a store that
// outlives the plugin) and breaks exactly one promise. They are one plugin
// executable (cmd/holdfast-backend-broken) that serves the bug it is named
// after, as busybox does: the suite's tests link it under each bug's name
// and run it through the plugin host like any third-party backend. They
// exist for the suite's own tests only.
package brokenbackends

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/holdfast/holdfast/conformance/internal/filestore"
	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/core/backend/backendserver"
	"github.com/holdfast/holdfast/plugins/memory"
	"github.com/holdfast/holdfast/proto/hlc"
)

// bugs are the broken backends by name: each opens its correct backend and
// wraps it with its one bug.
var bugs = map[string]backendserver.OpenFunc{
	"releasewithoutcompare": on(memory.Open, ReleaseWithoutCompare),
	"readthenwrite":         on(memory.Open, ReadThenWrite),
	"neverexpires":          on(memory.Open, NeverExpires),
	"ignoresstamps":         on(memory.Open, IgnoresStamps),
	"fencingfromone":        on(memory.Open, FencingFromOne),
	"extendresurrects":      on(memory.Open, ExtendResurrects),
	"emptytokenreleases":    on(memory.Open, EmptyTokenReleases),
	"unchainedstamps":       on(filestore.Open, UnchainedStamps),
	"listprefixpattern":     on(memory.Open, ListPrefixPattern),
	"silentexpiry":          on(memory.Open, SilentExpiry),
	"extenddoesnotrenew":    on(memory.Open, ExtendDoesNotRenew),
	"claimsshared":          on(memory.Open, ClaimsShared),
	"secondowner":           OpenFilestorePerProcess,
	"overgrants":            on(memory.Open, Overgrants),
	"proclaimswithoutowner": on(memory.Open, ProclaimsWithoutOwner),
	"countskeys":            on(memory.Open, CountsKeys),
	"followsall":            on(memory.Open, FollowsAll),
}

// Names lists the broken backends.
func Names() []string { return slices.Sorted(maps.Keys(bugs)) }

// Main serves the broken backend called name as a plugin process.
func Main(name string) {
	open, ok := bugs[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "brokenbackends: no broken backend %q: run this executable under one of the names %s\n",
			name, strings.Join(Names(), ", "))
		os.Exit(2)
	}
	backendserver.Serve(open)
}

// on opens a backend with open and wraps it with bug.
func on(open backendserver.OpenFunc, bug func(backend.Backend) backend.Backend) backendserver.OpenFunc {
	return func(ctx context.Context, opts map[string]string) (backend.Backend, error) {
		b, err := open(ctx, opts)
		if err != nil {
			return nil, err
		}
		broken := bug(b)
		if c, ok := broken.(backend.CountBackend); ok {
			return counting{closing{broken, b}, c}, nil
		}
		if e, ok := broken.(backend.ElectionBackend); ok {
			return electing{closing{broken, b}, e}, nil
		}
		if f, ok := broken.(backend.FollowBackend); ok {
			return following{closing{broken, b}, f}, nil
		}
		return closing{broken, b}, nil
	}
}

// closing is a broken backend that still closes the backend it wraps when
// the host shuts the plugin down.
type closing struct {
	backend.Backend
	inner backend.Backend
}

// Info implements backend.Backend. A bug's wrapper hides the optional
// interfaces of the backend it wraps; it hides their promises too, as the
// plugin server does for sets and batches, or the plugin would not start
// (KindElection without Proclaim).
func (c closing) Info(ctx context.Context) (backend.Info, error) {
	info, err := c.Backend.Info(ctx)
	if _, ok := c.Backend.(backend.ElectionBackend); !ok {
		info.Kinds = slices.DeleteFunc(slices.Clone(info.Kinds), func(k backend.Kind) bool { return k == backend.KindElection })
	}
	return info, err
}

// electing is a broken backend that keeps elections.
type electing struct {
	closing
	e backend.ElectionBackend
}

func (e electing) Proclaim(ctx context.Context, req backend.ProclaimRequest) (backend.ProclaimResult, error) {
	return e.e.Proclaim(ctx, req)
}

// counting is a broken backend that counts its leases.
type counting struct {
	closing
	c backend.CountBackend
}

func (c counting) Count(ctx context.Context) (int64, error) { return c.c.Count(ctx) }

// following is a broken backend that follows keys natively.
type following struct {
	closing
	f backend.FollowBackend
}

func (f following) Follow(ctx context.Context, changes <-chan backend.FollowChange, send func(backend.Event) error) error {
	return f.f.Follow(ctx, changes, send)
}

func (c closing) Close() error {
	if cl, ok := c.inner.(io.Closer); ok {
		return cl.Close()
	}
	return nil
}

// ReleaseWithoutCompare deletes whatever lock is on the key, whoever asks:
// it remembers each key's latest owner token and releases with that one.
func ReleaseWithoutCompare(b backend.Backend) backend.Backend {
	return &releaseWithoutCompare{remembering{Backend: b}}
}

type releaseWithoutCompare struct{ remembering }

func (r *releaseWithoutCompare) Release(ctx context.Context, req backend.ReleaseRequest) (bool, error) {
	if tok, ok := r.last(req.Key); ok {
		req.OwnerToken = tok // the bug: no compare
	}
	return r.Backend.Release(ctx, req)
}

// ReadThenWrite decides Acquire by a read followed by a write: every caller
// that saw the key free believes it won.
func ReadThenWrite(b backend.Backend) backend.Backend { return &readThenWrite{b} }

type readThenWrite struct{ backend.Backend }

func (r *readThenWrite) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.AcquireResult, error) {
	rec, held, err := r.Get(ctx, req.Key)
	if err != nil {
		return backend.AcquireResult{}, err
	}
	if held {
		return backend.AcquireResult{Record: rec}, nil
	}
	// The round trip to the store between the read and the write.
	time.Sleep(2 * time.Millisecond)
	res, err := r.Backend.Acquire(ctx, req)
	if err != nil {
		return res, err
	}
	res.Acquired = true // the bug: the write does not check again
	return res, nil
}

// NeverExpires stores every lock for the backend's longest TTL, whatever the
// caller asked for.
func NeverExpires(b backend.Backend) backend.Backend { return &neverExpires{Backend: b} }

type neverExpires struct {
	backend.Backend
}

func (n *neverExpires) long(ctx context.Context) time.Duration {
	if info, err := n.Info(ctx); err == nil && info.MaxTTL > 0 {
		return info.MaxTTL
	}
	return 24 * time.Hour
}

func (n *neverExpires) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.AcquireResult, error) {
	req.TTL = n.long(ctx)
	return n.Backend.Acquire(ctx, req)
}

func (n *neverExpires) Extend(ctx context.Context, req backend.ExtendRequest) (backend.ExtendResult, error) {
	req.TTL = n.long(ctx)
	return n.Backend.Extend(ctx, req)
}

// IgnoresStamps drops the engine's proposed stamp.
func IgnoresStamps(b backend.Backend) backend.Backend { return &ignoresStamps{b} }

type ignoresStamps struct{ backend.Backend }

func (i *ignoresStamps) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.AcquireResult, error) {
	req.Stamp = hlc.Timestamp{} // the bug
	return i.Backend.Acquire(ctx, req)
}

// FencingFromOne numbers fencing tokens from 1 in every plugin process, so
// they go back after a restart (the in-memory INCR mistake).
func FencingFromOne(b backend.Backend) backend.Backend { return &fencingFromOne{Backend: b} }

type fencingFromOne struct {
	backend.Backend
	once   sync.Once
	offset uint64
}

// renumber maps the memory backend's clock-floored tokens to a count from 1,
// keeping their order within this process.
func (f *fencingFromOne) renumber(r backend.Record) backend.Record {
	if r.FencingToken == 0 {
		return r
	}
	f.once.Do(func() { f.offset = r.FencingToken - 1 })
	r.FencingToken -= f.offset
	return r
}

func (f *fencingFromOne) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.AcquireResult, error) {
	res, err := f.Backend.Acquire(ctx, req)
	res.Record = f.renumber(res.Record)
	return res, err
}

func (f *fencingFromOne) Extend(ctx context.Context, req backend.ExtendRequest) (backend.ExtendResult, error) {
	res, err := f.Backend.Extend(ctx, req)
	res.Record = f.renumber(res.Record)
	return res, err
}

func (f *fencingFromOne) Get(ctx context.Context, key string) (backend.Record, bool, error) {
	r, ok, err := f.Backend.Get(ctx, key)
	return f.renumber(r), ok, err
}

func (f *fencingFromOne) List(ctx context.Context, req backend.ListRequest) (backend.ListPage, error) {
	p, err := f.Backend.List(ctx, req)
	for i := range p.Records {
		p.Records[i] = f.renumber(p.Records[i])
	}
	return p, err
}

func (f *fencingFromOne) Watch(ctx context.Context, prefix string, send func(backend.Event) error) error {
	return f.Backend.Watch(ctx, prefix, func(e backend.Event) error {
		e.Record = f.renumber(e.Record)
		return send(e)
	})
}

// remembering is a backend that remembers each key's latest owner token,
// as the bugs that use it do. It is safe for concurrent use.
type remembering struct {
	backend.Backend
	mu     sync.Mutex
	tokens map[string]string
}

func (r *remembering) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.AcquireResult, error) {
	res, err := r.Backend.Acquire(ctx, req)
	if err == nil && res.Acquired {
		r.mu.Lock()
		if r.tokens == nil {
			r.tokens = map[string]string{}
		}
		r.tokens[req.Key] = req.OwnerToken
		r.mu.Unlock()
	}
	return res, err
}

func (r *remembering) last(key string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	tok, ok := r.tokens[key]
	return tok, ok
}

// ExtendResurrects renews an ended lease: an Extend with the token of the
// key's last lease, refused because that lease was released or expired,
// takes the free key again under that token and answers extended=true.
func ExtendResurrects(b backend.Backend) backend.Backend {
	return &extendResurrects{remembering{Backend: b}}
}

type extendResurrects struct{ remembering }

func (e *extendResurrects) Extend(ctx context.Context, req backend.ExtendRequest) (backend.ExtendResult, error) {
	res, err := e.Backend.Extend(ctx, req)
	if err != nil || res.Extended {
		return res, err
	}
	if last, ok := e.last(req.Key); !ok || last != req.OwnerToken {
		return res, nil
	}
	// The bug: the store has no lock, the token was the last holder's, so
	// "renew" it.
	again, err := e.Backend.Acquire(ctx, backend.AcquireRequest{Key: req.Key, OwnerToken: req.OwnerToken, TTL: req.TTL, Holder: "resurrected", Stamp: req.Stamp})
	if err != nil || !again.Acquired {
		return res, err
	}
	return backend.ExtendResult{Extended: true, Record: again.Record}, nil
}

// EmptyTokenReleases treats an empty owner token as "whoever holds it": a
// Release with no token deletes the key's lock.
func EmptyTokenReleases(b backend.Backend) backend.Backend {
	return &emptyTokenReleases{remembering{Backend: b}}
}

type emptyTokenReleases struct{ remembering }

func (e *emptyTokenReleases) Release(ctx context.Context, req backend.ReleaseRequest) (bool, error) {
	if req.OwnerToken == "" {
		req.OwnerToken, _ = e.last(req.Key) // the bug: no token matches any
	}
	return e.Backend.Release(ctx, req)
}

// UnchainedStamps stores the proposed stamp as it is, even below the key's
// previous holder's: every record of a lock shows the stamp its Acquire
// proposed. On a durable store (filestore) the next holder's proposal may
// come from a server whose clock never saw the stamps before it.
func UnchainedStamps(b backend.Backend) backend.Backend {
	return &unchainedStamps{Backend: b, proposed: map[uint64]hlc.Timestamp{}}
}

type unchainedStamps struct {
	backend.Backend
	mu       sync.Mutex
	proposed map[uint64]hlc.Timestamp // by fencing token
}

func (u *unchainedStamps) restamp(r backend.Record) backend.Record {
	u.mu.Lock()
	defer u.mu.Unlock()
	if p, ok := u.proposed[r.FencingToken]; ok && r.FencingToken != 0 {
		r.Stamp = p
	}
	return r
}

func (u *unchainedStamps) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.AcquireResult, error) {
	res, err := u.Backend.Acquire(ctx, req)
	if err == nil && res.Acquired {
		u.mu.Lock()
		u.proposed[res.Record.FencingToken] = req.Stamp // the bug
		u.mu.Unlock()
	}
	res.Record = u.restamp(res.Record)
	return res, err
}

func (u *unchainedStamps) Extend(ctx context.Context, req backend.ExtendRequest) (backend.ExtendResult, error) {
	res, err := u.Backend.Extend(ctx, req)
	res.Record = u.restamp(res.Record)
	return res, err
}

func (u *unchainedStamps) Get(ctx context.Context, key string) (backend.Record, bool, error) {
	r, ok, err := u.Backend.Get(ctx, key)
	return u.restamp(r), ok, err
}

func (u *unchainedStamps) List(ctx context.Context, req backend.ListRequest) (backend.ListPage, error) {
	p, err := u.Backend.List(ctx, req)
	for i := range p.Records {
		p.Records[i] = u.restamp(p.Records[i])
	}
	return p, err
}

func (u *unchainedStamps) Watch(ctx context.Context, prefix string, send func(backend.Event) error) error {
	return u.Backend.Watch(ctx, prefix, func(e backend.Event) error {
		e.Record = u.restamp(e.Record)
		return send(e)
	})
}

// ListPrefixPattern reads List's prefix as a glob, as a backend does that
// hands it to Redis's SCAN MATCH unescaped: "a?" also lists "ab/", and
// "a[b]" does not list itself.
func ListPrefixPattern(b backend.Backend) backend.Backend { return &listPrefixPattern{b} }

type listPrefixPattern struct{ backend.Backend }

func (l *listPrefixPattern) List(ctx context.Context, req backend.ListRequest) (backend.ListPage, error) {
	// Everything under the prefix's first literal run, filtered by the glob.
	inner := req
	if i := strings.IndexAny(req.Prefix, "*?["); i >= 0 {
		inner.Prefix = req.Prefix[:i]
	}
	page, err := l.Backend.List(ctx, inner)
	if err != nil {
		return page, err
	}
	kept := page.Records[:0]
	for _, r := range page.Records {
		if ok, _ := path.Match(req.Prefix+"*", r.Key); ok { // the bug
			kept = append(kept, r)
		}
	}
	page.Records = kept
	return page, nil
}

// SilentExpiry never announces an expiry: its watch drops EventExpired, as a
// store does that expires locks only when it next reads them, so waiters
// are not woken by the end of a lease.
func SilentExpiry(b backend.Backend) backend.Backend { return &silentExpiry{b} }

type silentExpiry struct{ backend.Backend }

func (s *silentExpiry) Watch(ctx context.Context, prefix string, send func(backend.Event) error) error {
	return s.Backend.Watch(ctx, prefix, func(e backend.Event) error {
		if e.Type == backend.EventExpired {
			return nil // the bug
		}
		return send(e)
	})
}

// ExtendDoesNotRenew answers an Extend by the holder extended=true without
// moving the expiry: the lease ends when it would have anyway.
func ExtendDoesNotRenew(b backend.Backend) backend.Backend { return &extendDoesNotRenew{b} }

type extendDoesNotRenew struct{ backend.Backend }

func (e *extendDoesNotRenew) Extend(ctx context.Context, req backend.ExtendRequest) (backend.ExtendResult, error) {
	rec, held, err := e.Get(ctx, req.Key)
	if err != nil || !held {
		return backend.ExtendResult{}, err
	}
	// The bug: renew for what is left, not for the TTL asked for.
	req.TTL = max(rec.Remaining, time.Millisecond)
	return e.Backend.Extend(ctx, req)
}

// ClaimsShared says shared=true of a backend whose every plugin instance is
// its own lock space.
func ClaimsShared(b backend.Backend) backend.Backend { return &claimsShared{b} }

type claimsShared struct{ backend.Backend }

func (c *claimsShared) Info(ctx context.Context) (backend.Info, error) {
	info, err := c.Backend.Info(ctx)
	info.Shared = true // the bug
	return info, err
}

// Overgrants keeps a semaphore at twice the limit it is asked for (and
// reports the limit asked): racers hold up to twice the permits the
// semaphore allows.
func Overgrants(b backend.Backend) backend.Backend { return &overgrants{b} }

type overgrants struct{ backend.Backend }

func (o *overgrants) Acquire(ctx context.Context, req backend.AcquireRequest) (backend.AcquireResult, error) {
	asked := req.Limit
	if req.Kind == backend.KindSemaphore && 2*req.Limit <= backend.MaxLimit {
		req.Limit *= 2 // the bug
	}
	res, err := o.Backend.Acquire(ctx, req)
	if res.Record.Kind == backend.KindSemaphore {
		res.Record.Limit = asked
	}
	return res, err
}

// ProclaimsWithoutOwner replaces an election's value whoever asks: it
// proclaims with the token of the key's latest leader, not the caller's.
func ProclaimsWithoutOwner(b backend.Backend) backend.Backend {
	return &proclaimsWithoutOwner{remembering{Backend: b}}
}

type proclaimsWithoutOwner struct{ remembering }

func (p *proclaimsWithoutOwner) Proclaim(ctx context.Context, req backend.ProclaimRequest) (backend.ProclaimResult, error) {
	if tok, ok := p.last(req.Key); ok {
		req.OwnerToken = tok // the bug: no compare
	}
	return p.Backend.(backend.ElectionBackend).Proclaim(ctx, req)
}

// OpenFilestorePerProcess opens a filestore of its own for each process,
// beside the file it is given: a store that should allow one owner lets a
// second one in, and each process silently keeps locks of its own.
func OpenFilestorePerProcess(ctx context.Context, opts map[string]string) (backend.Backend, error) {
	if p, ok := opts["path"]; ok {
		opts["path"] = fmt.Sprintf("%s.%d", p, os.Getpid()) // the bug
	}
	return filestore.Open(ctx, opts)
}

// CountsKeys counts the keys held instead of the leases: a semaphore's
// grants count once together, as a List page's records do.
func CountsKeys(b backend.Backend) backend.Backend { return &countsKeys{b} }

type countsKeys struct{ backend.Backend }

func (c *countsKeys) Count(ctx context.Context) (int64, error) {
	var n int64
	token := ""
	for {
		page, err := c.List(ctx, backend.ListRequest{PageSize: 1000, PageToken: token})
		if err != nil {
			return 0, err
		}
		n += int64(len(page.Records))
		if token = page.NextPageToken; token == "" {
			return n, nil
		}
	}
}

// FollowsAll follows natively but sends the change of every key, followed
// or not, as a store's subscription would that ignores the keys it is
// given: the engine's waiters still wake, but every Acquire and Release
// crosses the plugin hop again, which is what Follow is for.
func FollowsAll(b backend.Backend) backend.Backend { return &followsAll{b} }

type followsAll struct{ backend.Backend }

func (f *followsAll) Follow(ctx context.Context, changes <-chan backend.FollowChange, send func(backend.Event) error) error {
	var mu sync.Mutex // serialises send and Applied, as the contract wants
	synced := make(chan struct{})
	var once sync.Once
	watched := make(chan error, 1)
	go func() {
		watched <- f.Watch(ctx, "", func(e backend.Event) error {
			mu.Lock()
			defer mu.Unlock()
			if e.Type == backend.EventSynced {
				once.Do(func() { close(synced) })
			}
			return send(e) // the bug: no filter
		})
	}()
	end := func(err error) error {
		if ctx.Err() != nil {
			return nil //nolint:nilerr // a Follow ended by its caller's context is no failure (the contract)
		}
		return err
	}
	for {
		select {
		case err := <-watched:
			return end(err)
		case c, ok := <-changes:
			if !ok {
				changes = nil
				continue
			}
			select {
			case <-synced:
			case err := <-watched:
				return end(err)
			}
			mu.Lock()
			if c.Applied != nil {
				c.Applied()
			}
			mu.Unlock()
		}
	}
}
