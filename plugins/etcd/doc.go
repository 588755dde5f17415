// Package etcd is the holdfast backend on etcd v3: the one that lets any
// number of stateless holdfast servers share their locks through one etcd
// cluster (Info.Shared and Info.Durable are true).
//
// # Options
//
// Open reads these options (from `holdfast serve --backend etcd
// --backend-opt key=value ...`):
//
//	endpoints      comma-separated etcd client URLs or host:port (required),
//	               e.g. http://127.0.0.1:2379,http://127.0.0.1:22379
//	dial_timeout   how long Open waits for etcd before failing (default 3s)
//	call_timeout   bound on every backend call; past it the call answers
//	               ErrUnavailable (default 3s)
//	prefix         key namespace in etcd (default "/holdfast/"), so several
//	               holdfast deployments can share one etcd
//	username       etcd user (with password)
//	password       etcd password
//	tls_ca         PEM file of the CA that signed etcd's server certificate
//	tls_cert       PEM client certificate file (with tls_key), for mTLS
//	tls_key        PEM client key file
//	min_ttl        shortest TTL accepted (default 2s, see below)
//
// Setting any tls_* option turns TLS on; endpoints given as host:port then
// use https.
//
// # Data layout
//
// Under the prefix P, a held lock on key K is three etcd keys:
//
//	P "locks/" K         the lock record (holder, stamp, expiry); attached to
//	                     the lock's lease; its CreateRevision is the fencing
//	                     token
//	P "owners/" K        the owner token, attached to the same lease; Release
//	                     and Extend compare it
//	P "locks/" K "\x00"  the key's last HLC stamp (12 bytes, big-endian so
//	                     that etcd's byte-wise value comparison orders stamps);
//	                     never deleted, so the chain of stamps survives
//	                     every holder
//
// # Semantics
//
//   - Acquire takes a lease of the TTL and then runs one transaction: if the
//     lock key does not exist (and the queue, lock-delay and kind allow),
//     put the record, the owner and the stamp, all or nothing, in a nested
//     transaction that stores the stamp only if the stored one is below it,
//     or, in its else branch, if the key has no stamp key yet. The stamp
//     condition implements backend.NextStamp without a prior read: the
//     first attempt proposes the engine's stamp; when etcd's stamp is not
//     below it, the innermost else branch returns it and the second attempt
//     proposes its successor. An uncontended acquire, of a key used before
//     or never, is thus one transaction (one raft write). For a key this
//     process has seen stamped (it wrote or read the stamp key), the
//     transaction leaves out the branch for a key without one, so its
//     writes are sent once, not twice (stamps.go); a stamp key missing all
//     the same makes that attempt write nothing and go again in full.
//   - Leases are pooled (see leasepool.go): a lease detached from a released
//     lock, or left over from a lost race, is kept and reused for the next
//     lock of the same TTL, renewed at reuse so its TTL runs from then;
//     leases are also granted ahead of need in the background. An
//     uncontended acquire is then one transaction with one lease renewal
//     (no disk write, on a keep-alive stream kept open: renew.go) sent
//     beside it, not before it (a pooled lease has at
//     least half its TTL left, so it outlives the transaction; when the
//     renewal fails, a lock the transaction stored is taken back and the
//     call answers unavailable), and a lock costs two raft writes, not
//     four. The pool's target grows when callers find it empty and shrinks
//     by the leases that age out unused; it is topped up on a tick, or at
//     once when a caller found it empty, not whenever a lease is out (that
//     lease comes back on release).
//   - Fencing tokens are the lock key's CreateRevision: etcd's revision is
//     cluster-wide, persistent and strictly increasing, and every acquisition
//     creates the key afresh, so tokens strictly increase per key across
//     restarts of etcd, of the plugin and of every server.
//   - TTLs are whole seconds (etcd leases are): a TTL is rounded up, and
//     Info.TTLGranularity is 1s. etcd checks lease expiry about every 500ms,
//     and raises leases shorter than its own minimum (1.5 × election
//     timeout, 1.5s with etcd's default timing) to that minimum; MinTTL is
//     therefore 2s unless the min_ttl option says otherwise.
//   - Release is one transaction: if the owner key holds the token, delete
//     the record (read back, for its lease), the owner and the delay key,
//     and raise the stored stamp to the release stamp when later (a nested
//     transaction; otherwise the stamp key is rewritten unchanged). For a
//     lock this process granted, whose stamp, revision, lease and
//     lock-delay it remembers, the transaction instead compares that the
//     record's and the stamp key's ModRevisions are still the Acquire's
//     (a record not written since is still the token's: every version
//     writes the owner key only with the record), deletes the record
//     without reading it back, deletes the delay key only if the lock has
//     a lock-delay, and puts the later of the two stamps (no nested
//     transaction). A record or stamp key written since (an Extend, a
//     replay's claim, another process) sends the nested form; see
//     stamps.go. The lease goes back to the pool, or is revoked in the
//     background, in batches.
//   - An Acquire's else branch reads the record, the delay key and the
//     meta key, to report what refused it; a refusal none of them explains
//     is the queue's (etcd logs a write transaction whole, read branches
//     included, so the queue is not read there).
//   - Extend reads the lock, takes a lease of the new TTL, and moves the
//     record and the owner onto it in a transaction that compares the owner
//     token and the record's ModRevision; the old lease goes to the pool.
//   - Watch is one etcd watch on P "locks/" prefix. A record created is
//     EventAcquired. A record deleted in the same revision as a write of its
//     stamp key is EventReleased (only Release writes the stamp key without
//     creating the record); a record deleted alone is EventExpired (etcd
//     deleted it with its lease).
//   - ExpiresAt is the plugin's wall clock at grant time plus the granted TTL,
//     stored in the record; Remaining is derived from it. Both are
//     informational: expiry itself is etcd's.
//
// # Fair queue (Info.Fair)
//
// The backend is a backend.FairBackend: waiters are served in arrival
// order across every server. A waiter's entry is P "queue/" K NUL waiterID,
// on one session lease per plugin process (5s, kept alive), ordered by its
// CreateRevision. The acquire transaction also requires, for a caller with
// no entry (a try, or a waiter's first attempt), that K's queue is empty,
// and for a queued waiter that its entry is the oldest (all entries'
// CreateRevision >= its own), deleting the entry in the same transaction.
// WaitTurn watches the deletion of the entry just before the waiter's, with
// a watch created at the current revision before the entry is read again,
// so etcd delivers the deletion at once; concurrency.Mutex watches from its
// read's older revision, which etcd serves on its 100ms unsynced loop. See
// queue.go.
//
// The engine reuses the waiterID of a waiter whose entries are gone
// (core/engine/waitid.go): etcd keeps a deleted key in its index until
// compaction, and the acquire transaction's queue compares and WaitTurn's
// reads range over K's whole queue prefix, so a new name per waiter made
// every handoff on a hot key range over one more dead entry than the last.
// An entry is therefore known by its name and its CreateRevision: the
// acquire compares the waiter's own entry's CreateRevision, and WaitTurn
// takes an entry under its predecessor's name with another CreateRevision
// for a later waiter's (the one it waited behind is gone).
//
// # Sets of keys (backend.FairSetBackend, Info.MaxKeys = 16)
//
// AcquireSet is atomic in etcd: it takes one lease of the TTL, reads every
// key's record, stamp key and queue head at one revision, and runs one
// transaction comparing, for every key, no record (CreateRevision == 0),
// the stamp key's ModRevision as read (so the one stamp the set stores, the
// latest of the proposal and every key's successor, is above every key's
// last), and the queue as Acquire compares it; its Then branch writes every
// key's record, owner and stamp on the one lease (and deletes the waiter's
// entries). A compare that fails because a key changed is retried from the
// read, at most maxTxnAttempts times. Every key's fencing token is its
// record's CreateRevision: the transaction's revision. ReleaseSet and
// ExtendSet are one transaction each comparing every key's owner (and for
// Extend every record's ModRevision). The records of a set carry Set, so
// that their shared lease is pooled once, by the set's own Release or
// Extend, and never on behalf of one key alone. EnqueueSet puts the
// waiter's entry in every key's queue in one transaction: the entries share
// one CreateRevision, so waiters stand in the same order in every queue they
// share, and a set is served when it heads all of them (no deadlock). The
// bound of 16 keys keeps a set's transaction (about four operations per
// key) inside etcd's --max-txn-ops default of 128.
//
// # Request identities (Info.RequestIDs)
//
// The identity of the last Acquire or Extend applied to a lock, its
// Acquire's replay and whether a replay was answered are fields of the lock
// record, so the transaction that takes, moves or deletes the lock writes
// them, they live on the lock's lease, and no earlier lease's identity
// survives a take. An Acquire that finds every key held under its request
// id answers the locks as a replay, marking them claimed in a transaction
// that compares their ModRevisions; ReplayOnly only reads. A Release with
// an identity writes it to P "released/" K in its transaction (no lease:
// one small key per key, overwritten by the next such release), and a
// Release that finds the key no longer held by its token answers true when
// that key holds its identity. Abandon reads the records first and releases
// only unclaimed ones, comparing their ModRevisions.
//
// # Lock-delay (Info.MaxLockDelay = 1m)
//
// An Acquire with a lock-delay d puts P "delays/" K in its transaction, on a
// lease of its own of the TTL plus d (each in whole seconds, rounded up), so
// etcd deletes it d after the lock's lease ends. Every take compares that K
// has no delay key: while the lock is gone and the delay key is not, the key
// refuses holders, and Get and Acquire report the delay key's estimated
// time left. Release deletes the delay key in its transaction; Extend puts
// it on a new lease of the new TTL plus d. Delay leases no key uses any
// more are left to expire (the keys of a set share one). See delays.go.
//
// # Semaphores and rwlocks (Info.Kinds)
//
// A key of another kind than a mutex keeps, beside its stamp key, a meta
// key P "locks/" K "\x00m" (its kind and limit, put by its first grant) and
// one key per grant, P "locks/" K "\x00g/" H (H: the SHA-256 of the grant's
// owner token), each on its own lease; a grant's fencing token is its
// CreateRevision. A grant is one optimistic transaction over what it read at
// one revision: the permits of the live grants plus the request's within
// the limit, and no grant created since the read; a racing grant that
// committed first makes it decide again on what the failed transaction's
// else branch read. The mutex Acquire requires that the key has no meta key,
// and a grant that its key has no stamp key of a mutex, so a key keeps its
// kind for as long as its stamp key lives (always). Release and Extend
// address a grant by its owner token; a grant released is deleted with a
// write of the stamp key, as a mutex lock is, so Watch tells its release
// from its expiry. Each grant also has P "grants/" K "\x00" H, empty, on
// the grant's lease, put, moved and deleted in the grant's own
// transactions, for Count (below). See grants.go.
//
// # Counting (backend.CountBackend)
//
// Count, which the server's holdfast_locks_held gauge reads, is two
// count-only ranges in one read transaction: P "owners/" (one key per mutex
// lock, on its lease) and P "grants/" (one key per grant, on its lease).
// No key leaves etcd, so a count of 100,000 locks is one small round trip,
// where listing them is a hundred pages of records. The grant keys
// themselves cannot be counted so: they sit under P "locks/" beside the
// stamp and meta keys, which are never deleted, and etcd counts only
// whole ranges (its revision filters do not apply to a count-only range),
// so the grants' count keys were added to the layout (nothing else of it
// changed). Upgrade: grants taken by an earlier version have no count key
// and are not counted until their leases end, or until this version
// extends them (an Extend puts the count key); while older plugins run
// beside this one, a grant one of them takes is not counted, and a grant
// this version took that an older plugin releases or extends leaves its
// count key on the grant's first lease, counted while that lease lives (in
// the older plugin's lease pool). The gauge is an estimate;
// once every plugin runs this version and the older grants' TTLs have run
// out, it is exact (up to the leases whose TTL ran out and that etcd has
// not yet revoked, about 500ms).
//
// # Elections (Info.Kinds: KindElection)
//
// An election key is a grant key of limit 1; the grant's record carries its
// value. Proclaim is one transaction comparing the grant key's ModRevision
// and putting the new value on the key's own lease, so its CreateRevision
// (the term) and its lease stay; Watch reports the put as EventProclaimed.
// See elections.go.
//
// # Batches (backend.BatchBackend)
//
// The engine's concurrent Acquires, Releases and Extends arrive in
// AcquireBatch, ReleaseBatch and ExtendBatch. The plain items of a batch go
// to etcd as one transaction whose Then branch holds each item's own
// transaction, nested, with its own compares: each item is decided on its
// own and atomically, and all of them in one raft entry (one fsync), in
// chunks of at most 96 items (etcd's --max-txn-ops, 128 by default, counts
// the items plus the deepest item's levels). The acquires of a chunk (one
// TTL) share one lease, pooled and renewed beside the transaction as a
// single Acquire's is, and their records say so (SharedLease), so that no
// Release or Extend of one of them alone pools or revokes it. The plugin
// process that attached them counts them, and the detach of the last one
// (a Release or an Extend of this process) hands the lease to the pool, so
// a batch costs no lease grant and no lease expiry; a lease whose records
// went elsewhere (released through another process, expired) is left to
// etcd, which ends it at its TTL. An ExtendBatch reads its items in one
// transaction and moves those still held onto one new lease per chunk in
// another, each comparing its owner and its record's ModRevision; that
// lease is counted the same way. Waiters, lock-delays, grants,
// ReplayOnly and Abandon go their single paths beside the batch, and an
// item whose nested transaction found something to look into (a replay of
// its request id, a stamp to propose again, a record changed since read)
// continues on its single path from there. See batch.go.
//
// # Upgrades
//
// Versions may run side by side on one prefix during a rolling upgrade: a
// lock taken through one is released, extended, replayed and fenced through
// another (the grants' count keys are the one addition to the layout so
// far; see Counting). A change of what a transaction compares or reads, not
// of what it stores, relies only on what every version keeps: the owner key
// is written only with the record, the stamp key only when a lock or a
// grant is created or deleted. scaleout's TestMixedVersions runs an earlier
// plugin beside this one (HOLDFAST_ETCD_OLD_PLUGIN); `make test-etcd-upgrade
// UPGRADE_FROM=<git revision>` builds that revision's plugin and runs it.
//
// Every call is bounded by call_timeout; when etcd cannot answer in time the
// call fails with backend.ErrUnavailable.
package etcd
