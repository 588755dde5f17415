package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	holdfast "github.com/holdfast/holdfast/sdk-go"
)

// sdkRenewers holds the locks with the real Go SDK ("Go SDK watchdog"):
// clients holdfast.Clients on the server at addr, lock i taken by client
// i%clients and renewed by that client's one watchdog, exactly as an
// application's would be. What the SDK hides is read from its two public
// seams: each renewal RPC (Extend or ExtendBatch) is timed by a
// RoundTripper around the client's transport, one HTTP/2 connection per
// client as the emulated clients have (over the SDK's HTTP/1.1 default for
// an http:// address, an Acquire at 100 clients taking 100,000 locks was
// once answered 400 Bad Request: on a connection its transport had dialed
// and parked, first used as the server's header timeout, then counted from
// the accept, closed it; see httpguard.Awaiting); renewals, failed
// attempts and lost leases come from the lease events. A lease lost as rejected or expired is a missed renewal;
// one ended by the run's own close (client_closed) is not, nor is a renewal
// that close cancelled an error. Each SDK attempt is bounded by a third of
// the TTL (docs/sdk-behaviour.md): an RPC slower than that is an error
// retried with the backoff here, where the emulation just waits for it.
func sdkRenewers(ctx context.Context, addr string, clients int, ttl time.Duration, stats *renewalStats) (func(context.Context, int, string) (func(), error), func(), error) {
	var closing atomic.Bool
	onEvent := func(e holdfast.LeaseEvent) {
		switch e.Type {
		case holdfast.LeaseRenewed:
			stats.renewed(1)
		case holdfast.LeaseRenewalFailed:
			if !closing.Load() { // Close cancels the renewals in flight
				stats.fail(e.Err)
			}
		case holdfast.LeaseLost:
			if !closing.Load() && (e.Reason == holdfast.LossRejected || e.Reason == holdfast.LossExpired) {
				stats.miss(1)
			}
		}
	}
	quiet := slog.New(slog.DiscardHandler) // failures are counted, not logged 100,000 times
	cs := make([]*holdfast.Client, clients)
	for i := range cs {
		base := &http.Transport{Protocols: new(http.Protocols)}
		base.Protocols.SetUnencryptedHTTP2(true)
		c, err := holdfast.Dial("http://"+addr,
			holdfast.WithHTTPClient(&http.Client{Transport: timedRenewals{base: base, stats: stats}}),
			holdfast.WithLeaseEvents(onEvent), holdfast.WithLogger(quiet))
		if err != nil {
			closeClients(cs[:i])
			return nil, nil, fmt.Errorf("client %d: %w", i, err)
		}
		cs[i] = c
	}
	renew := func(ctx context.Context, i int, key string) (func(), error) {
		if _, err := cs[i%clients].Lock(key).TTL(ttl).TryLock(ctx); err != nil {
			return nil, err
		}
		return nil, nil // held until closeAll: each client's Close releases its guards
	}
	closeAll := func() {
		closing.Store(true)
		closeClients(cs)
	}
	return renew, closeAll, ctx.Err()
}

// closeClients closes the clients at once (each Close releases its guards,
// bounded by the SDK's 3s close timeout).
func closeClients(cs []*holdfast.Client) {
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() { _ = c.Close() })
	}
	wg.Wait()
}

// timedRenewals times every renewal RPC a client sends (its round trip to
// the response's headers: a unary Connect answer follows them at once).
type timedRenewals struct {
	base  http.RoundTripper
	stats *renewalStats
}

func (t timedRenewals) RoundTrip(req *http.Request) (*http.Response, error) {
	renewal := strings.HasSuffix(req.URL.Path, "/Extend") || strings.HasSuffix(req.URL.Path, "/ExtendBatch")
	sent := time.Now()
	resp, err := t.base.RoundTrip(req)
	if renewal && err == nil && resp.StatusCode == http.StatusOK {
		t.stats.rpc(time.Since(sent), 0) // the renewals themselves are counted by their events
	}
	return resp, err
}
