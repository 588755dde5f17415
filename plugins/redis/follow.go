package redis

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/holdfast/holdfast/core/backend"
)

var _ backend.FollowBackend = (*Backend)(nil)

// appliedPing is the payload prefix of the PING that follows a change's
// subscription commands on the feed connection: Redis runs a connection's
// commands in order, so its answer comes after Redis has confirmed every
// SUBSCRIBE and UNSUBSCRIBE before it. Watch's health-check PINGs carry no
// payload.
const appliedPing = "holdfast-applied:"

// Follow subscribes, on one pubsub connection, to the channel of each
// followed key (SUBSCRIBE <key_prefix>events:K) and to a pattern for each
// followed prefix (PSUBSCRIBE <key_prefix>events:P*), so Redis sends the
// plugin only the followed keys' acquire/release events instead of every
// one; expiries come from the expired-key notifications of every master, as
// for Watch, for every key (the contract's exception). A change's Applied is
// called once Redis has answered a PING sent after its subscription
// commands on the feed connection, so after Redis has confirmed them: an
// event published after Applied is delivered. A lost connection ends Follow
// with ErrUnavailable, as it ends Watch: the caller follows again from
// nothing.
func (b *Backend) Follow(ctx context.Context, changes <-chan backend.FollowChange, send func(backend.Event) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var subs subscriptions
	defer subs.close(cancel)

	setupCtx, setupCancel := context.WithTimeout(ctx, b.opts.DialTimeout+b.opts.OpTimeout)
	defer setupCancel()
	eventPrefix := b.opts.KeyPrefix + "events:"
	// The feed starts with no subscription: a PING connects it and checks
	// that Redis answers on it. In a Cluster it is a random master's
	// connection; a PUBLISH reaches every node.
	feed := b.client.Subscribe(ctx)
	subs.keep(feed)
	if err := feed.Ping(setupCtx, appliedPing+"0"); err != nil {
		return b.watchErr(ctx, err)
	}
	if err := confirm(setupCtx, feed); err != nil {
		return b.watchErr(ctx, err)
	}
	if err := b.subscribeExpiries(setupCtx, &subs); err != nil {
		return b.watchErr(ctx, err)
	}
	setupCancel()

	items := b.receiveAll(ctx, &subs)
	if err := send(backend.Event{Type: backend.EventSynced}); err != nil {
		return err
	}
	f := follower{eventPrefix: eventPrefix, channels: map[string]struct{}{}, patterns: map[string]string{}}
	for {
		select {
		case <-ctx.Done():
			return nil
		case c, ok := <-changes:
			if !ok {
				changes = nil // no more changes: go on sending
				continue
			}
			if err := f.request(ctx, feed, c); err != nil {
				return b.watchErr(ctx, err)
			}
		case it := <-items:
			if it.err != nil {
				return b.watchErr(ctx, it.err)
			}
			m, ok := f.take(it.msg)
			if !ok {
				continue
			}
			ev, ok := b.event(ctx, m, eventPrefix, "")
			if !ok {
				continue
			}
			if err := send(ev); err != nil {
				return err
			}
		}
	}
}

// follower is Follow's state: what Redis has confirmed the feed connection
// is subscribed to, and the changes waiting for their PING's answer.
type follower struct {
	eventPrefix string
	// channels and patterns are the feed's subscriptions as Redis has
	// confirmed them, read from its replies in the order of the stream, so
	// that for each message they are what Redis had when it sent it. A
	// pattern maps to its prefix.
	channels map[string]struct{}
	patterns map[string]string
	sent     uint64   // the last change's PING
	pending  []func() // the Applied of the changes after the last answered PING (nil ones included)
}

// request sends c's subscription commands and the PING whose answer applies
// it. A key dropped and added in one change stays subscribed.
func (f *follower) request(ctx context.Context, feed *goredis.PubSub, c backend.FollowChange) error {
	channel := func(k string) string { return f.eventPrefix + k }
	pattern := func(p string) string { return globEscape(f.eventPrefix+p) + "*" }
	for _, step := range []struct {
		do    func(context.Context, ...string) error
		names []string
	}{
		{feed.Unsubscribe, names(c.DropKeys, c.Keys, channel)},
		{feed.PUnsubscribe, names(c.DropPrefixes, c.Prefixes, pattern)},
		{feed.Subscribe, names(c.Keys, nil, channel)},
		{feed.PSubscribe, names(c.Prefixes, nil, pattern)},
	} {
		// A command with no names would (un)subscribe from everything.
		if len(step.names) == 0 {
			continue
		}
		if err := step.do(ctx, step.names...); err != nil {
			return fmt.Errorf("follow: %w", err)
		}
	}
	f.sent++
	f.pending = append(f.pending, c.Applied)
	if err := feed.Ping(ctx, appliedPing+strconv.FormatUint(f.sent, 10)); err != nil {
		return fmt.Errorf("follow: %w", err)
	}
	return nil
}

// names returns name(n) for each of list that is not in but.
func names(list, but []string, name func(string) string) []string {
	var out []string
	for _, n := range list {
		if !slices.Contains(but, n) {
			out = append(out, name(n))
		}
	}
	return out
}

// take handles one reply: it keeps track of the feed's subscriptions, calls
// the Applied of a change whose PING Redis has answered, and returns the
// messages to turn into events. Redis sends a PUBLISH once to a channel
// subscriber and once more for every matching pattern: of the copies the
// feed gets, only one is taken (the channel's, or else the least matching
// pattern's).
func (f *follower) take(reply any) (*goredis.Message, bool) {
	switch m := reply.(type) {
	case *goredis.Subscription:
		switch m.Kind {
		case "subscribe":
			f.channels[m.Channel] = struct{}{}
		case "unsubscribe":
			delete(f.channels, m.Channel)
		case "psubscribe":
			f.patterns[m.Channel] = patternPrefix(m.Channel, f.eventPrefix)
		case "punsubscribe":
			delete(f.patterns, m.Channel)
		}
	case *goredis.Pong:
		// The feed's and the expiry subscriptions' health-check PINGs
		// carry no payload (or answer PONG): they apply nothing.
		if _, ok := strings.CutPrefix(m.Payload, appliedPing); ok && len(f.pending) > 0 {
			applied := f.pending[0]
			f.pending = f.pending[1:]
			if applied != nil {
				applied()
			}
		}
	case *goredis.Message:
		key, ok := strings.CutPrefix(m.Channel, f.eventPrefix)
		if !ok || m.Pattern == "" {
			return m, true // an expiry, or the key's own channel
		}
		if _, ok := f.channels[m.Channel]; ok {
			return nil, false // the channel's copy is the one taken
		}
		for pat, p := range f.patterns {
			if pat < m.Pattern && strings.HasPrefix(key, p) {
				return nil, false // a lesser pattern's copy is the one taken
			}
		}
		return m, true
	}
	return nil, false
}

// patternPrefix is the followed prefix of a feed pattern,
// globEscape(eventPrefix+prefix)+"*".
func patternPrefix(pattern, eventPrefix string) string {
	pattern = strings.TrimSuffix(pattern, "*")
	var sb strings.Builder
	for i := 0; i < len(pattern); i++ {
		if pattern[i] == '\\' && i+1 < len(pattern) {
			i++
		}
		sb.WriteByte(pattern[i])
	}
	p, _ := strings.CutPrefix(sb.String(), eventPrefix)
	return p
}
