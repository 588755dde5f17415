package pluginhost

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"
	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/holdfast/holdfast/core/backend"
	"github.com/holdfast/holdfast/core/internal/handshake"
	backendv1 "github.com/holdfast/holdfast/proto/holdfast/backend/v1"
)

// follower runs h.Follow in a goroutine; its events and its result arrive
// on channels.
type follower struct {
	events  chan backend.Event
	changes chan backend.FollowChange
	done    chan error
}

func startFollow(ctx context.Context, h *Host) *follower {
	f := &follower{events: make(chan backend.Event, 64), changes: make(chan backend.FollowChange), done: make(chan error, 1)}
	go func() {
		f.done <- h.Follow(ctx, f.changes, func(ev backend.Event) error {
			f.events <- ev
			return nil
		})
	}()
	return f
}

func (f *follower) next(t *testing.T) backend.Event {
	t.Helper()
	select {
	case ev := <-f.events:
		return ev
	case err := <-f.done:
		t.Fatalf("Follow returned %v while an event was awaited", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no Follow event within 10s")
	}
	return backend.Event{}
}

// change sends c and waits for its Applied.
func (f *follower) change(t *testing.T, c backend.FollowChange) {
	t.Helper()
	applied := make(chan struct{})
	c.Applied = func() { close(applied) }
	select {
	case f.changes <- c:
	case err := <-f.done:
		t.Fatalf("Follow returned %v before taking a change", err)
	}
	select {
	case <-applied:
	case err := <-f.done:
		t.Fatalf("Follow returned %v before the change was applied", err)
	case <-time.After(10 * time.Second):
		t.Fatal("change not applied within 10s")
	}
}

func cycle(t *testing.T, h *Host, key string) {
	t.Helper()
	ctx := ctxT(t)
	res, err := h.Acquire(ctx, backend.AcquireRequest{Key: key, OwnerToken: "tok-" + key, TTL: time.Minute})
	if err != nil || !res.Acquired {
		t.Fatalf("acquire %q: %+v, %v", key, res, err)
	}
	if ok, err := h.Release(ctx, backend.ReleaseRequest{Key: key, OwnerToken: "tok-" + key}); err != nil || !ok {
		t.Fatalf("release %q: %v, %v", key, ok, err)
	}
}

// Through the plugin, Follow sends the events of followed keys and
// prefixes once their change is applied, and no others: each unwanted
// event would arrive before the followed one that the check waits for.
func TestFollowSendsOnlyFollowedKeys(t *testing.T) {
	h := start(t, Config{})
	ctx, cancel := context.WithCancel(ctxT(t))
	f := startFollow(ctx, h)
	if ev := f.next(t); ev.Type != backend.EventSynced {
		t.Fatalf("first event %v, want synced", ev.Type)
	}
	f.change(t, backend.FollowChange{Keys: []string{"a"}, Prefixes: []string{"jobs/"}})
	cycle(t, h, "other") // not followed
	cycle(t, h, "a")
	for _, want := range []backend.EventType{backend.EventAcquired, backend.EventReleased} {
		if ev := f.next(t); ev.Type != want || ev.Record.Key != "a" {
			t.Fatalf("got %v of %q, want %v of \"a\"", ev.Type, ev.Record.Key, want)
		}
	}
	cycle(t, h, "jobs/x")
	if ev := f.next(t); ev.Type != backend.EventAcquired || ev.Record.Key != "jobs/x" {
		t.Fatalf("got %v of %q, want acquired of jobs/x (under the followed prefix)", ev.Type, ev.Record.Key)
	}
	f.next(t) // jobs/x released

	f.change(t, backend.FollowChange{DropKeys: []string{"a"}, DropPrefixes: []string{"jobs/"}, Keys: []string{"last"}})
	cycle(t, h, "a")      // dropped
	cycle(t, h, "jobs/y") // dropped
	cycle(t, h, "last")
	if ev := f.next(t); ev.Record.Key != "last" {
		t.Fatalf("got an event of %q after dropping it, want one of last", ev.Record.Key)
	}
	f.next(t) // last released
	cancel()
	if err := <-f.done; err != nil {
		t.Fatalf("Follow ended by its context returned %v, want nil", err)
	}
}

// The plugin's death ends a Follow with ErrUnavailable, and the host's
// goroutines of it are gone. The relaunch waits a minute, so that the
// goroutines of the next plugin's connection do not count as leaks.
func TestFollowUnavailableOnDeath(t *testing.T) {
	h := start(t, Config{MinBackoff: time.Minute})
	ignore := goleak.IgnoreCurrent()
	ctx := ctxT(t)
	f := startFollow(ctx, h)
	if ev := f.next(t); ev.Type != backend.EventSynced {
		t.Fatalf("first event %v, want synced", ev.Type)
	}
	f.change(t, backend.FollowChange{Keys: []string{"k"}})
	if err := syscall.Kill(h.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-f.done:
		if !errors.Is(err, backend.ErrUnavailable) {
			t.Fatalf("Follow after plugin death = %v, want ErrUnavailable", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Follow did not return after the plugin died")
	}
	goleak.VerifyNone(t, ignore)
}

// A plugin built before Follow answers Unimplemented: Follow says
// errors.ErrUnsupported, so that the engine watches instead.
func TestFollowOfAnOldPlugin(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, Config{Path: exe, Env: []string{helperEnv + "=old"}})
	f := startFollow(ctxT(t), h)
	select {
	case err := <-f.done:
		if !errors.Is(err, errors.ErrUnsupported) || errors.Is(err, backend.ErrUnavailable) {
			t.Fatalf("Follow of an old plugin = %v, want ErrUnsupported", err)
		}
	case ev := <-f.events:
		t.Fatalf("an old plugin sent %+v", ev)
	case <-time.After(10 * time.Second):
		t.Fatal("Follow of an old plugin did not return")
	}
}

// serveOldPlugin serves a plugin as one built before Follow: its server
// embeds the generated Unimplemented server, which answers Follow (and all
// but Info) UNIMPLEMENTED.
func serveOldPlugin() {
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: handshake.Config(),
		Plugins:         plugin.PluginSet{handshake.PluginName: oldPlugin{}},
		GRPCServer:      plugin.DefaultGRPCServer,
	})
	os.Exit(0)
}

type oldPlugin struct{ plugin.NetRPCUnsupportedPlugin }

func (oldPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	backendv1.RegisterBackendServiceServer(s, oldServer{})
	return nil
}

func (oldPlugin) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, errors.New("server side only")
}

type oldServer struct {
	backendv1.UnimplementedBackendServiceServer
}

func (oldServer) Info(context.Context, *backendv1.InfoRequest) (*backendv1.InfoResponse, error) {
	return &backendv1.InfoResponse{Name: "old"}, nil
}
