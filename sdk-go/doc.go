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
// GuardFromContext reaches the guard and its fencing token.
//
// # The guard and its watchdog
//
// Every Guard has one goroutine that renews the lease at about a third of
// its TTL. It measures the lease on the local monotonic clock from the
// moment the last successful renewal (or the acquire) was sent: the server
// may have started its count at any moment after that, never before, so the
// local expiry is never later than the server's. A renewal that fails for a
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
//
// # Errors
//
// Contention is ErrNotAcquired (a *NotAcquiredError carrying the current
// holder). Server answers map to ErrInvalidArgument, ErrUnavailable,
// ErrPermissionDenied, ErrUnauthenticated, ErrResourceExhausted and
// ErrServer, wrapped with the server's message; a call cut by its context
// also matches that context's error. Branch with errors.Is.
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
