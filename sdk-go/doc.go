// Package holdfast is the Go client of holdfast, a distributed lock service.
//
// # Leases, not mutexes
//
// A holdfast lock is a lease: it is held for a TTL and renewed while its
// holder lives. A holder that stops renewing — a crash, a long GC or VM
// pause, a network partition — loses the lock when the TTL runs out, and
// someone else may then run the same work. No client library can prevent
// that overlap; it can only tell you as soon as it can. So:
//
//   - choose a TTL well above the time a renewal round trip can take, and let
//     the guard's watchdog renew it;
//   - run the work under Guard.Context() and stop when it is cancelled;
//   - pass the guard's fencing token to the resource you protect and have it
//     refuse older tokens (ValidateWrite, Fence), or make the work
//     idempotent.
//
// # Using it
//
// Dial a server, describe a lock with Client.Lock, take it with TryLock (one
// attempt) or Lock (queue on the server), and release it with Guard.Unlock:
//
//	client, err := holdfast.Dial("http://127.0.0.1:7410")
//	...
//	defer client.Close()
//	g, err := client.Lock("jobs/nightly").TTL(10 * time.Second).Wait(30 * time.Second).Lock(ctx)
//	if errors.Is(err, holdfast.ErrNotAcquired) { ... someone else runs it ... }
//	defer g.Unlock(context.Background())
//	token, err := g.FencingToken()
//	... work under g.Context(), writes carry token ...
//
// WithLock wraps the three steps around a function; inside it,
// GuardFromContext reaches the guard and its fencing token. TryWithLock runs
// a function only if the key is free ("skip if held"), and
// Client.RunScheduled does so for a scheduled job that must run on one
// server at a time.
//
// # Semaphores and read-write locks
//
// Client.Semaphore(key, limit) and Client.RWLock(key).Read() / .Write()
// describe grants with the same Lock builder and Guard: a semaphore lets
// up to limit permits be held at once (Lock.Permits, default 1), a
// read-write lock lets readers share a key and a writer hold it alone.
// Each grant is a lease of its own (owner token, fencing token, watchdog,
// poisoning); the server fixes a key's kind and limit at its first grant
// and refuses a mismatch with failed_precondition. Guard.Kind, Limit,
// Permits and Mode say what a grant holds; LockState.Holders lists every
// lease on a key.
//
// # Leader election
//
// Client.Election(key) describes campaigns for the leadership of a key:
// Campaign(ctx, value) queues behind earlier campaigners until it leads and
// returns a *Leadership, a Guard whose fencing token is the leader's term
// (Term) and whose lease carries a value (Value) that Proclaim replaces;
// Resign gives it up. The one watchdog renews it and poisons it when it is
// lost, as for a lock: run the leader's work under its Context and fence
// every write with its term. Election.Leader reads the current leader and
// Election.Observe streams every change of leader, value and term.
//
// # Defaults
//
// The SDK behaves as the TypeScript and Python SDKs do
// (docs/sdk-behaviour.md): a TTL of 15s (at least MinTTL, 100ms); no wait
// unless Wait is set, so Lock queues until it holds the lock or its context
// ends, Wait(0) is one attempt and TryLock never waits; every call retries
// `unavailable` answers and transport failures with backoff (50ms doubling
// to 1s, equal jitter) for at most the retry budget in a row (5s,
// WithRetryBudget), each attempt bounded by the request timeout (10s,
// WithRequestTimeout), so an unreachable server is ErrUnavailable, never a
// hang. Dial takes "http://host:port", "https://host:port" or "host:port".
//
// # Events and logs
//
// WithLeaseEvents receives every guard's renewed, renewal-failed, lost and
// released events; the client also logs them to WithLogger's *slog.Logger
// (default slog.Default()): renewals and releases at debug, failures and
// losses at warn.
//
// # Testing
//
// The module github.com/holdfast/holdfast/sdk-go/holdfasttest runs the
// engine and the memory backend in a test's process, with fault controls
// (expire a lease now, answer unavailable, become unreachable).
//
// # The guard and its watchdog
//
// Every Guard has one goroutine that renews the lease at a third of its TTL
// after the last successful renewal was sent. It measures the lease on the
// local monotonic clock from that moment, minus an expiry margin
// (WithExpiryMargin, default TTL/100 + 20ms): the server may have started
// its count at any moment after the send, never before, and the margin
// covers a timer that fires late and a clock that runs slow against the
// store's, so the guard is poisoned at least the margin before the store
// could grant the key to anyone else. A renewal that fails for a
// transient reason is retried with backoff, each attempt bounded so it
// cannot outlive the lease; a lease that is still valid is never dropped
// for a transient error. The guard is poisoned when the server answers that
// the token no longer holds, or when the local expiry passes without a
// successful renewal — whatever any RPC in flight is doing, since a timer,
// not the RPC, enforces the expiry. Poisoning cancels Guard.Context() with a
// *LeaseLostError cause (errors.Is(context.Cause(ctx), ErrLeaseLost)), closes
// Guard.Done(), and makes FencingToken, Extend and Unlock return the loss.
// Unlock after a loss never reports success, and a stale Unlock can never
// delete a successor's lock: the server compares owner tokens.
// Guard.Remaining and Guard.Renewals report the guard's view.
//
// # Errors
//
// Contention is ErrNotAcquired (a *NotAcquiredError carrying the current
// holder). Server answers map to ErrInvalidArgument, ErrUnavailable,
// ErrPermissionDenied, ErrUnauthenticated, ErrResourceExhausted and
// ErrServer, wrapped with the server's message; a call cut by its context
// also matches that context's error. Branch with errors.Is; ErrorCode names
// any error with the code the three SDKs share ("not_acquired",
// "lease_lost", "unavailable", ...).
//
// # Causality
//
// The client keeps a Hybrid Logical Clock (Client.Clock): every request
// carries a reading, every answer's stamp is merged, and Guard.Stamp is the
// acquisition's stamp, strictly increasing along a key's chain of holders.
// Attach Client.Now() to messages to other processes to carry the order on.
//
// The public API uses only this package's types, the standard library and
// the HLC package; the RPC library underneath is an implementation detail.
package holdfast
