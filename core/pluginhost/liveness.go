package pluginhost

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-plugin"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/holdfast/holdfast/core/backend"
)

// Liveness: a plugin process that is alive but does not answer (SIGSTOPped,
// deadlocked, swapped out) keeps its sockets open, so neither go-plugin nor
// a call in flight notices anything until a deadline runs out. The host
// therefore pings every running plugin (gRPC health checking, the service
// go-plugin registers in every plugin) every PingInterval; a ping not
// answered within PingTimeout marks the plugin as not answering:
//
//   - Up reports false and Changed fires, so the server's health turns
//     NOT_SERVING and holdfast_backend_up 0;
//   - calls in flight are cancelled and new calls fail at once, with errors
//     wrapping backend.ErrUnavailable (as while the plugin is down);
//   - the process is left alone: it may resume (a paused VM), and killing
//     it would lose the memory backend's locks. The next answered ping
//     makes it Up again.

// Defaults of the liveness ping.
const (
	DefaultPingInterval = time.Second
	DefaultPingTimeout  = 2 * time.Second
)

// liveness is what the host knows of one generation's answers.
type liveness struct {
	mu     sync.Mutex
	ok     context.Context // cancelled when it stops answering
	cancel context.CancelFunc
	since  time.Time // when it stopped answering; zero while it answers
}

func newLiveness() *liveness {
	l := &liveness{}
	l.ok, l.cancel = context.WithCancel(context.Background())
	return l
}

// context is cancelled when the plugin stops answering; calls end with it.
func (l *liveness) context() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ok
}

// silentSince is when the plugin stopped answering (zero: it answers).
func (l *liveness) silentSince() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.since
}

// set records the outcome of a ping sent at sent and reports whether that
// changed the state.
func (l *liveness) set(answered bool, sent time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case answered && !l.since.IsZero():
		l.since = time.Time{}
		l.ok, l.cancel = context.WithCancel(context.Background())
		return true
	case !answered && l.since.IsZero():
		l.since = sent
		l.cancel()
		return true
	}
	return false
}

// startPing pings g until the returned stop is called (stop waits for the
// pinger to end).
func (h *Host) startPing(g *generation) (stop func()) {
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(h.cfg.PingInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-g.exited.Done():
				return
			case <-t.C:
			}
			sent := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), h.cfg.PingTimeout)
			stopOnExit := context.AfterFunc(g.exited, cancel)
			resp, err := g.health.Check(ctx, &healthpb.HealthCheckRequest{Service: plugin.GRPCServiceName})
			stopOnExit()
			cancel()
			if g.exited.Err() != nil {
				return // the supervisor handles an exit
			}
			answered := err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
			if !g.live.set(answered, sent) {
				continue
			}
			if answered {
				h.log.Info("plugin answers its liveness ping again", "pid", g.pid)
			} else {
				h.log.Warn("plugin does not answer its liveness ping; reporting it down until it does", "pid", g.pid, "timeout", h.cfg.PingTimeout, "err", err)
			}
			h.notify()
		}
	}()
	return func() {
		close(done)
		<-ended
	}
}

// notify wakes Changed's waiters.
func (h *Host) notify() {
	h.mu.Lock()
	defer h.mu.Unlock()
	close(h.changed)
	h.changed = make(chan struct{})
}

// notAnswering is the error of calls while g does not answer its pings.
func (h *Host) notAnswering(g *generation, since time.Time) error {
	return fmt.Errorf("%w: plugin %s (pid %d) has not answered a liveness ping sent %s ago (frozen or overloaded)",
		backend.ErrUnavailable, h.cfg.Name, g.pid, time.Since(since).Round(time.Millisecond))
}
