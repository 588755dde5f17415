package engine

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/holdfast/holdfast/core/backend"
)

// followLinger is how long a key (or prefix) that nobody needs any more
// stays followed before a change drops it. A hot key's waiters come and go
// constantly: every handoff ends one wait, and the next Acquire that finds
// the key busy starts another. Dropped at once, such a key would cost a
// change, and a wait for its Applied, on nearly every contended Acquire;
// a few seconds is long beside a handoff and short beside a server's life,
// so the keys nobody waits on stop crossing the feed soon enough.
const followLinger = 3 * time.Second

// feedMode is what the engine's backend feed is at the moment.
type feedMode int

const (
	// feedDown: no feed, or a Follow feed not yet established. A follow
	// returns at once: the resync sends the whole set and wakes every
	// waiter after it is applied.
	feedDown feedMode = iota
	// feedUp: a Follow feed, established. A follow returns once a change
	// that follows its keys is applied.
	feedUp
	// feedAll: a Watch of every key (a backend without Follow, or a
	// plugin that does not serve it): everything is followed already.
	feedAll
)

// interest is the registry of the keys and prefixes the engine needs from
// its backend feed, counted by who needs them (waiters, API watchers), and
// of what the current Follow feed has been told. Its costs go with what
// changes, not with what is followed: a change is made of the names
// counted since the last one and of the names whose linger ended.
type interest struct {
	mu       sync.Mutex
	keys     names
	prefixes names
	mode     feedMode
	idle     []idleName // names nobody needs, oldest first (roughly: see next)
	seq      uint64     // the last change made (across feeds)
	applied  uint64     // the last change applied
	pending  []*followWait
	kick     chan struct{} // tells the feed's sender to look again
	linger   time.Duration
}

// names is one kind of followed name: keys, or prefixes.
type names struct {
	want map[string]*wanted
	// sent is in force, or on its way, on the current feed: the seq of
	// the change that added each.
	sent map[string]uint64
	// dirty was counted since the last change and was not sent then.
	dirty map[string]struct{}
}

func newNames() names {
	return names{want: map[string]*wanted{}, sent: map[string]uint64{}, dirty: map[string]struct{}{}}
}

// wanted counts the needs of one name; idle is when n last fell to 0, and
// queued says it is in interest.idle.
type wanted struct {
	n      int
	idle   time.Time
	queued bool
}

// idleName is a name that fell to 0 at at.
type idleName struct {
	ns   *names
	name string
	w    *wanted
	at   time.Time
}

// followWait is a follow waiting for the change seq need to be applied;
// hook runs when it is (or when the feed goes down first), before done is
// closed.
type followWait struct {
	need uint64
	hook func()
	done chan struct{}
}

func newInterest() *interest {
	return &interest{keys: newNames(), prefixes: newNames(), kick: make(chan struct{}, 1), linger: followLinger}
}

func (in *interest) poke() {
	select {
	case in.kick <- struct{}{}:
	default:
	}
}

// follow makes the backend feed carry every change of keys, and of every
// key under prefixes, until release is called. It returns once a change
// that follows them is applied on the current feed, at once when one is
// already, and at once when the feed is down (the resync follows everything
// counted here and then wakes every waiter). A backend without Follow
// feeds the engine every key: then it returns at once.
func (e *Engine) follow(ctx context.Context, keys, prefixes []string) (release func(), err error) {
	return e.followThen(ctx, keys, prefixes, nil)
}

// followThen is follow that runs then (when not nil) once keys and
// prefixes are followed: on the feed's goroutine, when it waited for a
// change, so that no event sent after that change's Applied is handled
// before then has run. It also runs when the feed goes down while it
// waits, and not at all when follow fails.
func (e *Engine) followThen(ctx context.Context, keys, prefixes []string, then func()) (release func(), err error) {
	if e.interest == nil {
		if then != nil {
			then()
		}
		return func() {}, nil
	}
	in := e.interest
	w := in.add(keys, prefixes, then)
	release = func() { in.remove(keys, prefixes) }
	if w == nil {
		if then != nil {
			then()
		}
		return release, nil
	}
	select {
	case <-w.done:
		return release, nil
	case <-ctx.Done():
		err = ctxErr(ctx, "follow")
	case <-e.closing.Done():
		err = newErr(ErrUnavailable, "the server is shutting down")
	}
	in.cancel(w)
	release()
	return nil, err
}

// add counts keys and prefixes as needed and answers what the caller must
// wait for: nil when they are followed already (or need not be).
func (in *interest) add(keys, prefixes []string, then func()) *followWait {
	in.mu.Lock()
	defer in.mu.Unlock()
	up := in.mode == feedUp
	for _, k := range keys {
		in.keys.inc(k, up)
	}
	for _, p := range prefixes {
		in.prefixes.inc(p, up)
	}
	if !up {
		return nil
	}
	var need uint64
	for _, k := range keys {
		need = max(need, in.sentSeq(k, &in.keys))
	}
	for _, p := range prefixes {
		need = max(need, in.sentSeq(p, &in.prefixes))
	}
	if need <= in.applied {
		return nil
	}
	w := &followWait{need: need, hook: then, done: make(chan struct{})}
	in.pending = append(in.pending, w)
	if need > in.seq {
		in.poke()
	}
	return w
}

// inc counts s once more; up: a Follow feed is up, and the next change
// must add s unless it is sent (otherwise the next feed's whole set does).
func (ns *names) inc(s string, up bool) {
	w := ns.want[s]
	if w == nil {
		w = &wanted{}
		ns.want[s] = w
	}
	if _, ok := ns.sent[s]; up && !ok {
		ns.dirty[s] = struct{}{}
	}
	w.n++
}

// sentSeq is the change that follows s (one of ns) on the current feed:
// the one that added s or a prefix of it, the earliest if several did; the
// next change when none has. in.mu must be held.
func (in *interest) sentSeq(s string, ns *names) uint64 {
	seq, ok := ns.sent[s]
	if !ok {
		seq = in.seq + 1
	}
	for p, ps := range in.prefixes.sent {
		if ps < seq && strings.HasPrefix(s, p) {
			seq = ps
		}
	}
	return seq
}

// remove gives back what add counted; what nobody needs any more lingers
// (followLinger) before a change drops it.
func (in *interest) remove(keys, prefixes []string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	now := time.Now()
	for _, k := range keys {
		in.dec(&in.keys, k, now)
	}
	for _, p := range prefixes {
		in.dec(&in.prefixes, p, now)
	}
}

func (in *interest) dec(ns *names, s string, now time.Time) {
	w := ns.want[s]
	w.n--
	if w.n > 0 {
		return
	}
	if in.mode != feedUp {
		// Nothing is sent: nothing to linger for (and no sender to
		// expire it). The next feed's whole set is what is counted then.
		delete(ns.want, s)
		delete(ns.dirty, s)
		return
	}
	w.idle = now
	if w.queued {
		return // next finds it, and its new idle time
	}
	w.queued = true
	in.idle = append(in.idle, idleName{ns: ns, name: s, w: w, at: now})
	if len(in.idle) == 1 {
		in.poke() // so the sender arms its linger timer
	}
}

// cancel forgets w, a follow that gave up.
func (in *interest) cancel(w *followWait) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for i, p := range in.pending {
		if p == w {
			in.pending = append(in.pending[:i], in.pending[i+1:]...)
			return
		}
	}
}

// setMode starts a new feed, or ends one: nothing is sent on it yet, and
// every follow that waited is let go (see follow). What lingered is
// forgotten: with no Follow feed up nothing is sent, and nobody expires it.
func (in *interest) setMode(m feedMode) {
	in.mu.Lock()
	in.mode = m
	for _, ns := range []*names{&in.keys, &in.prefixes} {
		clear(ns.sent)
		clear(ns.dirty)
		for s, w := range ns.want {
			w.queued = false
			if w.n == 0 {
				delete(ns.want, s)
			}
		}
	}
	clear(in.idle)
	in.idle = in.idle[:0]
	ready := in.pending
	in.pending = nil
	in.mu.Unlock()
	letGo(ready)
}

// markApplied records that change seq is in force and lets go the follows
// that waited for it.
func (in *interest) markApplied(seq uint64) {
	in.mu.Lock()
	in.applied = max(in.applied, seq)
	var ready []*followWait
	rest := in.pending[:0]
	for _, w := range in.pending {
		if w.need <= seq {
			ready = append(ready, w)
		} else {
			rest = append(rest, w)
		}
	}
	clear(in.pending[len(rest):])
	in.pending = rest
	in.mu.Unlock()
	letGo(ready)
}

func letGo(ws []*followWait) {
	for _, w := range ws {
		if w.hook != nil {
			w.hook()
		}
		close(w.done)
	}
}

// next makes the feed's next change: on a new feed (whole) every name
// counted, and the feed is up from then on; otherwise the names counted
// since the last change and not sent, and the drops of the names whose
// linger ended. ok is false when no change is due. wake is when to look
// again for lingering names (0: none linger).
func (in *interest) next(now time.Time, whole bool) (c backend.FollowChange, seq uint64, ok bool, wake time.Duration) {
	in.mu.Lock()
	defer in.mu.Unlock()
	c.DropKeys, c.DropPrefixes = in.expire(now)
	if len(in.idle) > 0 {
		// A quarter of a linger late: the names whose linger ends
		// meanwhile go in the same change.
		wake = in.idle[0].at.Add(in.linger + in.linger/4).Sub(now)
	}
	if whole {
		in.mode = feedUp
		clear(in.keys.sent)
		clear(in.prefixes.sent)
		c.DropKeys, c.DropPrefixes = nil, nil // nothing is followed on a new feed
	}
	c.Keys = in.keys.adds(whole)
	c.Prefixes = in.prefixes.adds(whole)
	due := whole || len(c.Keys)+len(c.DropKeys)+len(c.Prefixes)+len(c.DropPrefixes) > 0
	for _, w := range in.pending {
		due = due || w.need > in.seq
	}
	if !due {
		return c, 0, false, wake
	}
	in.seq++
	for _, k := range c.Keys {
		in.keys.sent[k] = in.seq
	}
	for _, p := range c.Prefixes {
		in.prefixes.sent[p] = in.seq
	}
	return c, in.seq, true, wake
}

// expire forgets the names that nobody has needed for the linger, and
// answers those of them that were sent (and are no longer). The idle queue
// is in the order names fell idle; one that was needed again and fell idle
// again meanwhile goes to the back with its new time (so it may wait up to
// a linger more).
func (in *interest) expire(now time.Time) (dropKeys, dropPrefixes []string) {
	n := 0
	for _, q := range in.idle {
		if now.Sub(q.at) < in.linger {
			break
		}
		n++
		switch {
		case q.ns.want[q.name] != q.w:
			// Forgotten already (and counted anew since).
		case q.w.n > 0:
			q.w.queued = false
		case now.Sub(q.w.idle) < in.linger:
			in.idle = append(in.idle, idleName{ns: q.ns, name: q.name, w: q.w, at: q.w.idle})
		default:
			delete(q.ns.want, q.name)
			delete(q.ns.dirty, q.name)
			if _, ok := q.ns.sent[q.name]; ok {
				delete(q.ns.sent, q.name)
				if q.ns == &in.keys {
					dropKeys = append(dropKeys, q.name)
				} else {
					dropPrefixes = append(dropPrefixes, q.name)
				}
			}
		}
	}
	clear(in.idle[:n])
	in.idle = in.idle[n:]
	return dropKeys, dropPrefixes
}

// adds answers what the next change adds: every name wanted (whole), or
// the dirty ones not yet sent.
func (ns *names) adds(whole bool) []string {
	var add []string
	if whole {
		for s := range ns.want {
			add = append(add, s)
		}
	} else {
		for s := range ns.dirty {
			if _, ok := ns.sent[s]; !ok {
				add = append(add, s)
			}
		}
	}
	clear(ns.dirty)
	return add
}

// runFollow runs one Follow feed: events go to onEvent, as a Watch's do;
// its EventSynced is held back until the whole set of what the engine
// follows has been sent and applied, and only then does onEvent see it
// (and wake every waiter, and mark the engine synced).
func (e *Engine) runFollow(ctx context.Context, f backend.FollowBackend, established func()) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	up := make(chan struct{})
	isUp := false
	changes := make(chan backend.FollowChange)
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		e.sendChanges(ctx, up, changes)
	}()
	err := f.Follow(ctx, changes, func(ev backend.Event) error {
		if ev.Type == backend.EventSynced {
			if !isUp { // send is never called concurrently with itself
				isUp = true
				established()
				close(up)
			}
			return nil
		}
		e.onEvent(ctx, ev)
		return nil
	})
	cancel()
	<-sent // nothing is sent on changes after Follow returned
	return err
}

// sendChanges sends a Follow feed its changes: once the feed is up, the
// whole set, and then, coalesced, what follows add and what lingered long
// enough to drop.
func (e *Engine) sendChanges(ctx context.Context, up <-chan struct{}, changes chan<- backend.FollowChange) {
	select {
	case <-up:
	case <-ctx.Done():
		return
	}
	in := e.interest
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	whole := true
	for {
		c, seq, ok, wake := in.next(time.Now(), whole)
		if ok {
			if whole {
				c.Applied = func() {
					in.markApplied(seq)
					e.onEvent(ctx, backend.Event{Type: backend.EventSynced})
				}
			} else {
				c.Applied = func() { in.markApplied(seq) }
			}
			select {
			case changes <- c:
			case <-ctx.Done():
				return
			}
			whole = false
		}
		if wake > 0 {
			timer.Reset(wake)
		}
		select {
		case <-in.kick:
		case <-timer.C:
		case <-ctx.Done():
			return
		}
	}
}
