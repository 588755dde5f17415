package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/proto/hlc"
)

// watchPing is how long (nanoseconds) a watch waits quietly before it pings
// its connection: 15s (tests shorten it).
var watchPing atomic.Int64

func init() { watchPing.Store(int64(15 * time.Second)) }

// payload is the JSON the trigger sends with pg_notify (see eventJSON).
type payload struct {
	Type      string `json:"t"`
	Key       string `json:"k"`
	Fencing   int64  `json:"f"`
	Holder    string `json:"h"`
	ExpiresUS int64  `json:"e"`
	RemainUS  int64  `json:"r"`
	Wall      int64  `json:"w"`
	Logical   int64  `json:"l"`
	Truncated bool   `json:"x"`
	// A grant's (grants.go): its permits, the key's kind and limit.
	Permits int    `json:"p"`
	Kind    string `json:"kd"`
	Limit   int    `json:"n"`
	// A grant's value (elections.go), unless the trigger left it out of a
	// payload it would have made too long (ValueOut).
	Value    string `json:"v"`
	ValueOut bool   `json:"vx"`
}

func (p payload) event() (backend.Event, error) {
	var t backend.EventType
	switch p.Type {
	case "acquired":
		t = backend.EventAcquired
	case "released":
		t = backend.EventReleased
	case "expired":
		t = backend.EventExpired
	case "proclaimed":
		t = backend.EventProclaimed
	default:
		return backend.Event{}, fmt.Errorf("unknown event type %q", p.Type)
	}
	rec := backend.Record{
		Key:          p.Key,
		FencingToken: uint64(p.Fencing),
		Holder:       p.Holder,
		ExpiresAt:    time.UnixMicro(p.ExpiresUS),
		Stamp:        hlc.Timestamp{WallTime: p.Wall, Logical: uint32(p.Logical)},
		Value:        p.Value,
	}
	if t == backend.EventAcquired || t == backend.EventProclaimed {
		rec.Remaining = max(time.Duration(p.RemainUS)*time.Microsecond, 0)
	}
	if p.Permits > 0 {
		kind, ok := kindByName(p.Kind)
		if !ok {
			return backend.Event{}, fmt.Errorf("unknown kind %q", p.Kind)
		}
		rec.Kind, rec.Limit, rec.Permits = kind, p.Limit, p.Permits
	}
	return backend.Event{Type: t, Record: rec}, nil
}

// Watch implements backend.Backend on a dedicated connection that LISTENs on
// the schema's channel. EventSynced is sent after LISTEN has returned: every
// change committed later is delivered, in commit order. It returns ctx.Err()
// when ctx is done, ErrClosed when the backend closes, and an error wrapping
// backend.ErrUnavailable when the connection is lost (the caller watches
// again and re-reads state after the new EventSynced).
func (b *Backend) Watch(ctx context.Context, prefix string, send func(backend.Event) error) error {
	if b.ctx.Err() != nil {
		return ErrClosed
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(b.ctx, cancel)
	defer stop()

	connectCtx, cancelConnect := context.WithTimeout(wctx, b.opts.CallTimeout)
	conn, err := pgx.ConnectConfig(connectCtx, b.pool.Config().ConnConfig.Copy())
	cancelConnect()
	if err != nil {
		return b.watchErr(ctx, err)
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	listenCtx, cancelListen := context.WithTimeout(wctx, b.opts.CallTimeout)
	_, err = conn.Exec(listenCtx, "LISTEN "+pgx.Identifier{b.n.channel}.Sanitize())
	cancelListen()
	if err != nil {
		return b.watchErr(ctx, err)
	}
	if err := send(backend.Event{Type: backend.EventSynced}); err != nil {
		return err
	}
	ping := time.Duration(watchPing.Load())
	for {
		// Wait at most watchPing for a notification; after a quiet spell,
		// ping, so that a connection that died silently (no RST, e.g. a
		// partition) ends the watch instead of leaving it deaf. A timed-out
		// wait leaves a pgx connection usable.
		waitCtx, cancelWait := context.WithTimeout(wctx, ping)
		n, err := conn.WaitForNotification(waitCtx)
		cancelWait()
		if err != nil && wctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			pingCtx, cancelPing := context.WithTimeout(wctx, b.opts.CallTimeout)
			err = conn.Ping(pingCtx)
			cancelPing()
			if err != nil {
				return b.watchErr(ctx, err)
			}
			continue
		}
		if err != nil {
			return b.watchErr(ctx, err)
		}
		var p payload
		if err := json.Unmarshal([]byte(n.Payload), &p); err != nil {
			return fmt.Errorf("%w: postgres: watch: bad notification %q: %w", backend.ErrUnavailable, n.Payload, err)
		}
		if !strings.HasPrefix(p.Key, prefix) {
			continue
		}
		ev, err := p.event()
		if err != nil {
			return fmt.Errorf("%w: postgres: watch: %w", backend.ErrUnavailable, err)
		}
		if p.ValueOut {
			var ok bool
			if ev, ok, err = b.withValue(wctx, ev); err != nil {
				return b.watchErr(ctx, err)
			}
			if !ok {
				continue
			}
		}
		if err := send(ev); err != nil {
			return err
		}
	}
}

// withValue completes the event of a grant whose value the trigger left out
// of the payload (see migrationV5). A released or expired grant's value is
// gone with its row: the event goes without it, since the lease it names has
// ended. An acquired or proclaimed grant's value is read from its row, as it
// is now (a later Proclaim's value, whose own event follows); once the grant
// is gone, the event is dropped (ok=false): its release or expiry follows,
// and an event must not report a value the grant never had.
func (b *Backend) withValue(ctx context.Context, ev backend.Event) (backend.Event, bool, error) {
	if ev.Type != backend.EventAcquired && ev.Type != backend.EventProclaimed {
		return ev, true, nil
	}
	v, found, err := b.grantValue(ctx, ev.Record.Key, int64(ev.Record.FencingToken))
	if err != nil || !found {
		return ev, false, err
	}
	ev.Record.Value = v
	return ev, true, nil
}

func (b *Backend) watchErr(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case b.ctx.Err() != nil:
		return ErrClosed
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: postgres: watch: no answer within %s: %w", backend.ErrUnavailable, b.opts.CallTimeout, err)
	}
	return fmt.Errorf("%w: postgres: watch: %w", backend.ErrUnavailable, err)
}
