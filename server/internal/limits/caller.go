package limits

import (
	"context"

	"github.com/holdfast/holdfast/server/internal/auth"
	"github.com/holdfast/holdfast/server/internal/httpguard"
)

// caller is who a call counts against, and its bounds.
type caller struct {
	id  string // "token NAME" or "address IP"
	who string // for messages: "this token", "this client address (IP)"

	locks, waiters, streams                int // 0: unbounded
	locksLimit, waitersLimit, streamsLimit string
}

// caller identifies the caller of a call from its context (the
// authenticated token) or, without authentication, its peer address.
func (i *Interceptor) caller(ctx context.Context, peer string) caller {
	c := caller{
		locks: i.cfg.MaxLocksPerClient, locksLimit: "the server's --max-locks-per-client",
		waiters: i.cfg.MaxWaitersPerClient, waitersLimit: "the server's --max-waiters-per-client",
		streams: i.cfg.MaxStreamsPerClient, streamsLimit: "the server's --max-watch-streams-per-client",
	}
	if p, ok := auth.FromContext(ctx); ok {
		// The name is the file's, for logs; the caller may not know it, and
		// messages do not repeat it.
		c.id, c.who = "token "+p.Name, "this token"
		if p.Quota.MaxLocks > 0 {
			c.locks, c.locksLimit = p.Quota.MaxLocks, "its max_locks in the tokens file"
		}
		if p.Quota.MaxWaiters > 0 {
			c.waiters, c.waitersLimit = p.Quota.MaxWaiters, "its max_waiters in the tokens file"
		}
		if p.Quota.MaxWatchStreams > 0 {
			c.streams, c.streamsLimit = p.Quota.MaxWatchStreams, "its max_watch_streams in the tokens file"
		}
		return c
	}
	addr := httpguard.ClientAddress(peer)
	c.id, c.who = "address "+addr, "this client address ("+addr+")"
	return c
}
