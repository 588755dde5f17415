package holdfast

import (
	"context"
	"iter"
	"time"

	"github.com/holdfast/holdfast/proto/hlc"
	lockv1 "github.com/holdfast/holdfast/proto/holdfast/lock/v1"
)

// Inspect reports who holds key. held is false when nobody does
// (InspectDelay also says whether such a key is in its lock-delay).
func (c *Client) Inspect(ctx context.Context, key string) (state LockState, held bool, err error) {
	state, held, _, err = c.inspect(ctx, key)
	return state, held, err
}

// InspectDelay is Inspect that also reports a key nobody holds that is in
// its lock-delay (delay non-nil).
func (c *Client) InspectDelay(ctx context.Context, key string) (state LockState, held bool, delay *KeyDelay, err error) {
	return c.inspect(ctx, key)
}

func (c *Client) inspect(ctx context.Context, key string) (state LockState, held bool, delay *KeyDelay, err error) {
	if c.isClosed() {
		return LockState{}, false, nil, ErrClosed
	}
	ctx, done := c.callContext(ctx)
	defer done()
	var resp *lockv1.InspectResponse
	err = c.retrying(ctx, "Inspect", time.Time{}, func(actx context.Context) error {
		var err error
		resp, err = c.rpc.Inspect(actx, &lockv1.InspectRequest{Key: key})
		return err
	})
	if err != nil {
		return LockState{}, false, nil, err
	}
	c.merge(resp.GetServerStamp(), resp.GetState().GetStamp())
	if !resp.GetHeld() {
		return LockState{}, false, keyDelayFromProto(resp.GetDelayed()), nil
	}
	return lockStateFromProto(resp.GetState()), true, nil, nil
}

// Page is one page of List results.
type Page struct {
	Locks []LockState
	// NextPageToken fetches the next page; empty on the last page.
	NextPageToken string
}

// ListPage returns one page of the held locks whose keys start with prefix,
// in key order. pageSize 0 takes the server's default (100); the server caps
// it at 1000. pageToken is the previous page's NextPageToken ("" for the
// first page).
func (c *Client) ListPage(ctx context.Context, prefix string, pageSize int, pageToken string) (Page, error) {
	if c.isClosed() {
		return Page{}, ErrClosed
	}
	if pageSize < 0 {
		return Page{}, invalidArgument("page size %d: must not be negative", pageSize)
	}
	ctx, done := c.callContext(ctx)
	defer done()
	req := &lockv1.ListRequest{
		Prefix:    prefix,
		PageSize:  uint32(min(pageSize, 1<<31)),
		PageToken: pageToken,
	}
	var resp *lockv1.ListResponse
	err := c.retrying(ctx, "List", time.Time{}, func(actx context.Context) error {
		var err error
		resp, err = c.rpc.List(actx, req)
		return err
	})
	if err != nil {
		return Page{}, err
	}
	c.merge(resp.GetServerStamp())
	p := Page{NextPageToken: resp.GetNextPageToken(), Locks: make([]LockState, 0, len(resp.GetLocks()))}
	for _, s := range resp.GetLocks() {
		c.merge(s.GetStamp())
		p.Locks = append(p.Locks, lockStateFromProto(s))
	}
	return p, nil
}

// List iterates over every held lock whose key starts with prefix, in key
// order, fetching pages as it goes. An error ends the iteration as its last
// element:
//
//	for st, err := range client.List(ctx, "jobs/") {
//		if err != nil { return err }
//		fmt.Println(st.Key, st.Holder)
//	}
func (c *Client) List(ctx context.Context, prefix string) iter.Seq2[LockState, error] {
	return func(yield func(LockState, error) bool) {
		token := ""
		for {
			page, err := c.ListPage(ctx, prefix, 0, token)
			if err != nil {
				yield(LockState{}, err)
				return
			}
			for _, s := range page.Locks {
				if !yield(s, nil) {
					return
				}
			}
			if page.NextPageToken == "" {
				return
			}
			token = page.NextPageToken
		}
	}
}

// Watch streams the changes to key. The first event is EventSynced: every
// change after it is reported. The iteration ends without an error when ctx
// ends or the loop breaks; otherwise its last element is an error: the
// stream failed, the server ended it (ErrUnavailable: watch again), or the
// client was closed (ErrClosed). It needs no goroutine of its own.
func (c *Client) Watch(ctx context.Context, key string) iter.Seq2[Event, error] {
	return c.watch(ctx, &lockv1.WatchRequest{Target: &lockv1.WatchRequest_Key{Key: key}})
}

// WatchPrefix streams the changes to every key starting with prefix (""
// watches every key), like Watch.
func (c *Client) WatchPrefix(ctx context.Context, prefix string) iter.Seq2[Event, error] {
	return c.watch(ctx, &lockv1.WatchRequest{Target: &lockv1.WatchRequest_Prefix{Prefix: prefix}})
}

func (c *Client) watch(ctx context.Context, req *lockv1.WatchRequest) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		if c.isClosed() {
			yield(Event{}, ErrClosed)
			return
		}
		// Closing the stream when the loop stops early needs a context we
		// can cancel: Close alone may wait for the server.
		parent := ctx
		ctx, cancel := c.callContext(ctx)
		defer cancel()
		stream, err := c.rpc.Watch(ctx, req)
		if err != nil {
			if parent.Err() == nil {
				yield(Event{}, mapError(ctx, "Watch", err))
			}
			return
		}
		defer func() {
			cancel()
			_ = stream.Close()
		}()
		for stream.Receive() {
			msg := stream.Msg()
			c.merge(msg.GetServerStamp(), msg.GetState().GetStamp())
			ev := Event{
				Type:  eventTypeFromProto(msg.GetType()),
				Stamp: hlc.FromProto(msg.GetServerStamp()),
			}
			if msg.GetState() != nil {
				ev.State = lockStateFromProto(msg.GetState())
			}
			if ev.Type == 0 {
				continue // a type from a newer server; skip rather than guess
			}
			if !yield(ev, nil) {
				return
			}
		}
		// The caller's own context ending is the normal end of a watch;
		// anything else (a failure, Close) is reported.
		if err := stream.Err(); err != nil && parent.Err() == nil {
			yield(Event{}, mapError(ctx, "Watch", err))
		} else if err == nil && parent.Err() == nil {
			yield(Event{}, &rpcError{op: "Watch", code: "unavailable", message: "the server ended the watch", kind: ErrUnavailable})
		}
	}
}
