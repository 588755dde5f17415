package engine

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/core/internal/backoff"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// Backoff between attempts to re-establish the backend watch.
const (
	minWatchBackoff = 50 * time.Millisecond
	maxWatchBackoff = 5 * time.Second
)

// subBuffer is how many events an API watcher may fall behind before its
// stream is ended with unavailable (it re-watches); a slow watcher never
// holds up the engine's one backend watch.
const subBuffer = 256

// watchLoop runs the engine's one backend feed, and re-establishes it with
// backoff when it fails (a plugin restart ends it). The feed is a Follow of
// the keys the engine needs (follow.go) when the backend has one, and
// otherwise a Watch of every key; a Follow answered with
// errors.ErrUnsupported (a plugin older than the call) falls back to the
// Watch for that attempt, and the next attempt tries Follow again (a
// restarted plugin may be newer).
func (e *Engine) watchLoop(ctx context.Context) {
	defer e.wg.Done()
	retry := backoff.New(minWatchBackoff, maxWatchBackoff)
	established := func() { retry.Reset() }
	for {
		var err error
		if f, ok := e.b.(backend.FollowBackend); ok {
			err = e.runFollow(ctx, f, established)
			if errors.Is(err, errors.ErrUnsupported) && ctx.Err() == nil {
				e.log.Debug("backend does not serve Follow; watching every key", "err", err)
				e.unsync(err)
				e.interest.setMode(feedAll)
				err = e.runWatch(ctx, established)
			}
		} else {
			err = e.runWatch(ctx, established)
		}
		// Unsynced before the follows that wait are let go: one let go
		// must not be told it is synced by the feed that just broke.
		e.unsync(err)
		if e.interest != nil {
			e.interest.setMode(feedDown)
		}
		if ctx.Err() != nil {
			return
		}
		d := retry.Next()
		e.log.Warn("backend watch ended; re-watching", "err", err, "backoff", d)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// runWatch runs one Watch of every key: every event goes to onEvent.
func (e *Engine) runWatch(ctx context.Context, established func()) error {
	return e.b.Watch(ctx, "", func(ev backend.Event) error {
		if ev.Type == backend.EventSynced {
			established()
		}
		e.onEvent(ctx, ev)
		return nil
	})
}

func (e *Engine) onEvent(ctx context.Context, ev backend.Event) {
	e.cfg.Observer.BackendEvent(ev.Type)
	switch ev.Type {
	case backend.EventSynced:
		e.watchMu.Lock()
		resync := e.everSync
		e.watchMu.Unlock()
		if resync {
			// A re-established watch usually means a restarted plugin:
			// re-read what it promises.
			callCtx, cancel := context.WithTimeout(ctx, e.cfg.CallTimeout)
			if info, err := e.b.Info(callCtx); err == nil {
				e.infoMu.Lock()
				e.info = info
				e.infoMu.Unlock()
			} else {
				e.log.Warn("backend info after resync", "err", err)
			}
			cancel()
			e.calls.resynced()
			e.log.Info("backend watch re-synced; waking every waiter")
		}
		// Events may have been missed while the watch was down. Wake
		// before marking the watch synced: New returns once it is, and a
		// WakeAll still in flight after that would wake a head that joined
		// since, for a release that never happened (a failed try).
		e.q.WakeAll()
		e.markSynced()
		return
	case backend.EventReleased, backend.EventExpired:
		e.q.WakeReleased(ev.Record.Key, ev.Record.FencingToken)
	case backend.EventAcquired:
		e.clock.Observe(ev.Record.Stamp)
		e.q.WakeAcquired(ev.Record.Key)
	}
	e.fanOut(ev)
}

// subscribers is the set of API watchers, indexed for fan-out: by exact
// key, and the prefix watchers apart, so an event costs the watchers it
// matches, not every watcher.
type subscribers struct {
	all      map[*subscriber]struct{}
	byKey    map[string]map[*subscriber]struct{}
	prefixed map[*subscriber]struct{}
}

func newSubscribers() subscribers {
	return subscribers{all: map[*subscriber]struct{}{}, byKey: map[string]map[*subscriber]struct{}{}, prefixed: map[*subscriber]struct{}{}}
}

func (ss *subscribers) add(s *subscriber) {
	ss.all[s] = struct{}{}
	if !s.exact {
		ss.prefixed[s] = struct{}{}
		return
	}
	if ss.byKey[s.key] == nil {
		ss.byKey[s.key] = map[*subscriber]struct{}{}
	}
	ss.byKey[s.key][s] = struct{}{}
}

// remove takes s out and reports whether it was in.
func (ss *subscribers) remove(s *subscriber) bool {
	if _, ok := ss.all[s]; !ok {
		return false
	}
	delete(ss.all, s)
	delete(ss.prefixed, s)
	if m := ss.byKey[s.key]; m != nil && s.exact {
		delete(m, s)
		if len(m) == 0 {
			delete(ss.byKey, s.key)
		}
	}
	return true
}

// matching calls f for every watcher of key (f may remove the watcher).
func (ss *subscribers) matching(key string, f func(*subscriber)) {
	for s := range ss.byKey[key] {
		f(s)
	}
	for s := range ss.prefixed {
		if strings.HasPrefix(key, s.prefix) {
			f(s)
		}
	}
}

// subscriber is one API watcher.
type subscriber struct {
	key    string // exact key, when exact
	prefix string
	exact  bool
	// followed: its key or prefix is followed on the backend feed (or the
	// feed is down, and the resync follows it): it may be sent its
	// EVENT_TYPE_SYNCED.
	followed bool
	synced   bool // has been sent its EVENT_TYPE_SYNCED
	events   chan *lockv1.WatchResponse
	ended    chan struct{} // closed by endSub, after err is set
	err      error
}

// endSub ends s with err. e.watchMu must be held.
func (e *Engine) endSub(s *subscriber, err error) {
	if !e.subs.remove(s) {
		return
	}
	s.err = err
	close(s.ended)
}

// push queues msg for s or ends s when it fell behind: a watcher is never
// waited on. e.watchMu must be held.
func (e *Engine) push(s *subscriber, msg *lockv1.WatchResponse) {
	select {
	case s.events <- msg:
	default:
		e.endSub(s, newErr(ErrUnavailable, "watch: fell more than %d events behind; watch again", subBuffer))
	}
}

func (e *Engine) markSynced() {
	e.watchMu.Lock()
	defer e.watchMu.Unlock()
	e.synced = true
	if !e.everSync {
		e.everSync = true
		close(e.firstSync)
	}
	for s := range e.subs.all {
		if s.followed && !s.synced {
			s.synced = true
			e.push(s, e.syncedMessage())
		}
	}
}

// syncedMessage is a watcher's first message.
func (e *Engine) syncedMessage() *lockv1.WatchResponse {
	return &lockv1.WatchResponse{Type: lockv1.EventType_EVENT_TYPE_SYNCED, ServerStamp: e.stamp()}
}

// unsync ends every synced watcher: changes may be missed until the backend
// watch is back, and a watcher must never silently miss one.
func (e *Engine) unsync(cause error) {
	e.watchMu.Lock()
	defer e.watchMu.Unlock()
	e.synced = false
	for s := range e.subs.all {
		if s.synced {
			e.endSub(s, newErr(ErrUnavailable, "watch: the backend watch broke (%v); watch again", cause))
		}
	}
}

var eventTypes = map[backend.EventType]lockv1.EventType{
	backend.EventAcquired:   lockv1.EventType_EVENT_TYPE_ACQUIRED,
	backend.EventReleased:   lockv1.EventType_EVENT_TYPE_RELEASED,
	backend.EventExpired:    lockv1.EventType_EVENT_TYPE_EXPIRED,
	backend.EventProclaimed: lockv1.EventType_EVENT_TYPE_PROCLAIMED,
}

// fanOut hands ev to the watchers it matches. It costs one message (its
// state and server_stamp taken once, on this goroutine) and one
// non-blocking channel send per watcher: nothing here takes a lock that the
// acquire path takes once per watcher, and a watcher whose queue is full is
// ended, not waited on.
func (e *Engine) fanOut(ev backend.Event) {
	t, ok := eventTypes[ev.Type]
	if !ok {
		return
	}
	e.watchMu.Lock()
	defer e.watchMu.Unlock()
	var msg *lockv1.WatchResponse // shared by every watcher: read only from here on
	e.subs.matching(ev.Record.Key, func(s *subscriber) {
		if !s.synced {
			return
		}
		if msg == nil {
			msg = &lockv1.WatchResponse{Type: t, State: e.state(ev.Record, ev.Type), ServerStamp: e.stamp()}
		}
		e.push(s, msg)
	})
}

// Watch streams events on req's key or prefix to send until ctx ends, send
// fails, or the stream must end (shutdown, a broken backend watch, a watcher
// that fell behind: all unavailable, and the client watches again). The
// first message is EVENT_TYPE_SYNCED; every change after it is sent. A
// message is shared by every watcher of its event (its server_stamp is
// taken once, when the event is fanned out): send must not modify it.
func (e *Engine) Watch(ctx context.Context, req *lockv1.WatchRequest, sendOne func(*lockv1.WatchResponse) error) error {
	return e.WatchQueued(ctx, req, func(msg *lockv1.WatchResponse, _ bool) error { return sendOne(msg) })
}

// maxQueuedSend is how many queued messages a watcher sends in one turn.
const maxQueuedSend = 32

// WatchQueued is Watch whose send is told, with each message, whether more
// messages were already queued behind it and follow at once: a sender that
// flushes after every message (Connect does) may put off the flushes until
// the last of them, so that a watcher that fell behind catches up in one
// write instead of one per event. Messages already queued are sent in one
// turn (up to maxQueuedSend of them). Nothing waits for more to arrive: a
// message with none behind it goes out as soon as it is sent, so an idle
// server's watchers get every event without delay.
func (e *Engine) WatchQueued(ctx context.Context, req *lockv1.WatchRequest, send func(msg *lockv1.WatchResponse, more bool) error) error {
	if err := e.enter(); err != nil {
		return err
	}
	s := &subscriber{events: make(chan *lockv1.WatchResponse, subBuffer), ended: make(chan struct{})}
	switch t := req.GetTarget().(type) {
	case *lockv1.WatchRequest_Key:
		if err := checkKey("key", t.Key); err != nil {
			return err
		}
		s.key, s.exact = t.Key, true
	case *lockv1.WatchRequest_Prefix:
		if err := checkText("prefix", t.Prefix, MaxKeyBytes); err != nil {
			return err
		}
		s.prefix = t.Prefix
	default: // unset: every key
	}

	e.watchMu.Lock()
	select {
	case <-e.done:
		e.watchMu.Unlock()
		return newErr(ErrUnavailable, "watch: the server is shutting down")
	default:
	}
	e.subs.add(s)
	e.watchMu.Unlock()
	defer func() {
		e.watchMu.Lock()
		e.endSub(s, nil)
		e.watchMu.Unlock()
	}()
	// Registered before the follow: s is sent its EVENT_TYPE_SYNCED when
	// its key or prefix is followed (on the feed's goroutine, under the
	// lock that fan-out holds), so every event after it reaches s.
	var keys, prefixes []string
	if s.exact {
		keys = []string{s.key}
	} else {
		prefixes = []string{s.prefix}
	}
	unfollow, err := e.followThen(ctx, keys, prefixes, func() {
		e.watchMu.Lock()
		defer e.watchMu.Unlock()
		if _, ok := e.subs.all[s]; !ok {
			return // ended meanwhile
		}
		s.followed = true
		if e.synced && !s.synced {
			s.synced = true
			e.push(s, e.syncedMessage())
		}
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctxErr(ctx, "watch")
		}
		return err
	}
	defer unfollow()

	turn := e.deliver.turn()
	batch := make([]*lockv1.WatchResponse, 0, maxQueuedSend)
	// sendQueued sends msg and the messages queued behind it.
	sendQueued := func(msg *lockv1.WatchResponse) error {
		batch = append(batch[:0], msg)
	fill:
		for len(batch) < cap(batch) {
			select {
			case m := <-s.events:
				batch = append(batch, m)
			default:
				break fill
			}
		}
		more := len(s.events) > 0
		turn.take()
		defer turn.give()
		for i, m := range batch {
			if err := send(m, more || i < len(batch)-1); err != nil {
				return err
			}
		}
		return nil
	}
	for {
		select {
		case msg := <-s.events:
			if err := sendQueued(msg); err != nil {
				return err
			}
		case <-s.ended:
			// Deliver what was queued before the end: it is all true.
			for {
				select {
				case msg := <-s.events:
					if err := sendQueued(msg); err != nil {
						return err
					}
				default:
					return s.err
				}
			}
		case <-ctx.Done():
			return ctxErr(ctx, "watch")
		}
	}
}
