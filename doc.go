// Package fencedlock provides distributed locks on Redis whose every grant
// carries a rising fencing token, and storage that checks the token on
// every write, so that a holder whose lock expired cannot overwrite the
// work of the holder that came after it.
//
// A lock with a TTL stops a crashed holder from blocking others for ever.
// It does not stop a holder that is alive but paused (a GC pause, SIGSTOP,
// a slow disk, a long network delay) past its TTL: the lock expires,
// another process takes it, and the first resumes and writes over the new
// holder's work. Checking the TTL before writing does not help, because
// the pause can fall between the check and the write. Only the storage can
// refuse the late write, and only if every write carries a number that
// tells an old grant from a new one.
//
// # The model
//
// A [Locker] grants a lock on a named resource together with a [Token], in
// one Redis script. Every grant of a resource gets a token higher than
// every earlier grant of it (for the one exception, see What is promised). [Locker.TryAcquire] makes one attempt;
// [Locker.Acquire] waits for the lock; [Locker.Do] waits, keeps the lock
// with a heartbeat while a function runs, and releases it.
//
// The holder passes [Lock.Token] with every write to a [Store]. The store
// remembers the highest token it has seen for the resource, its fence,
// and compares the token with it in the same atomic step as the write: a
// token equal to or higher than the fence passes, is stored with the new
// value and becomes the fence (equal passes because one holder writes
// many times); a lower one is refused with a [*StaleTokenError] and
// nothing changes. [CheckToken] is that rule; [MemoryStore] and
// [RedisStore] apply it, and so must any other Store. Example
// (StaleWriteRefused) shows a late write refused.
//
// A holder that reads before it writes raises the fence first
// ([Store.Fence]), or lets [Update] fence, read and write with one token.
// Otherwise a stale holder's write can land between its read and its
// write, be accepted, and then be overwritten by what it writes: an
// acknowledged write lost. Update's example shows that interleaving.
//
// # When a write is refused
//
// An error matching [ErrStaleToken] means the writer lost its lock and
// someone newer has written since. Retrying the same write is useless: the
// token stays too low. The writer stops, drops what it read under the old
// lock, acquires the lock again (getting a higher token), reads the
// resource again and redoes its operation on the current state. A service
// that fences writes for remote clients answers 409 Conflict; package
// [github.com/fencedlock/fencedlock/fencehttp] does that.
//
// # TTL, heartbeat and fencing
//
// These are three different things, and only the third one is safety:
//
//   - The TTL bounds how long a crashed holder keeps others out. It is
//     liveness.
//   - A heartbeat ([WithHeartbeat]) extends the TTL while the holder works
//     and tells the holder when the lock is gone ([Lock.Done], [Lock.Err]).
//     It is efficiency. A paused holder misses its heartbeat too. With or
//     without one, a Lock ends lost once its lease ran out by the local
//     clock.
//   - Fencing, the token on every write and the store's check of it, is
//     what keeps a stale holder's writes out.
//
// # Errors
//
// Compare with errors.Is:
//
//	what happened                               error                what to do
//	Redis answered: another owner holds it      ErrNotAcquired       skip, or wait (Acquire)
//	ctx ended while waiting for a held lock     ErrNotAcquired+ctx   skip, or wait longer
//	Redis unreachable, too slow for ctx, or an
//	error reply (LOADING, OOM, READONLY, ...)   ErrUnavailable       treat the backend as down; retry later
//	Redis answered: the lock is gone or taken,
//	or the lease ran out by the local clock     ErrLockLost          stop working; acquire again
//	this Lock was released by Release           ErrReleased          nothing: you released it
//	a store refused a lower token (Put, Fence)  ErrStaleToken        acquire again, re-read, retry (HTTP 409)
//	replicas did not confirm the grant          ErrNotReplicated     retry later
//	bad input; nothing was sent                 ErrInvalidArgument,  fix the call
//	                                            ErrInvalidToken
//	a key holds what the library did not write  ErrCorrupt           repair the key
//
// Every call that takes a ctx returns within its deadline, whatever Redis
// does. A call whose ctx was done before it sent anything changes nothing.
// After a Release or Refresh whose outcome is unknown (ErrUnavailable) the
// Lock is not ended, and Release may be called again. The state after
// each failure, and the cleanup that outlives a call, are in
// https://github.com/fencedlock/fencedlock/blob/main/docs/errors.md.
//
// # Waiting
//
// Acquire waits without polling, first come, first served within a
// process, and across processes by turns in the order they queued in
// Redis: a release hands the lock to the first waiter in the same
// script and wakes it through Redis pub/sub, and a timer covers a crashed
// holder or a lost message. How, with a sequence diagram of a hand-over,
// is in https://github.com/fencedlock/fencedlock/blob/main/docs/waiting.md.
//
// # What is promised
//
// A fenced store never accepts a write for a resource with a token lower
// than one it has already accepted for that resource, whatever happens in
// between: process pauses, network delays, clock jumps, Redis restarts,
// flushes and failovers. It rests on the store alone, so it holds only if
// the store keeps its tokens durably and commits each token in the same
// atomic step as its value.
//
// Not promised: that two processes never believe at the same time that
// they hold the lock (no lease can promise that; fencing makes the overlap
// harmless); that tokens rise by one, are unique across resources, or are
// comparable between resources; that Redis never loses a grant.
//
// Tokens follow the Redis clock: a lost counter is seeded again from the
// server's TIME in microseconds, so a new token is above every earlier
// one unless the granting server's clock is behind the one that granted
// them. Then stores refuse the new holders' writes (safety holds), and
// [Locker.Advance] raises the counter past [StaleTokenError.Current].
//
// # Redis
//
// The client can be any redis.UniversalClient: a single node, a Sentinel
// failover client or a cluster client. All keys of one resource share a
// Redis Cluster hash tag, "<prefix>:{<resource>}:...". Lockers exclude
// each other only when they share Redis and prefix. Keys expire when no
// longer needed ([WithIdleExpiry]). The keys, their expiry, Cluster,
// Sentinel, [WithReplicas] and the servers tested are in
// https://github.com/fencedlock/fencedlock/blob/main/docs/redis.md.
//
// # Concurrency
//
// [Locker], [Lock], [MemoryStore] and [RedisStore] are safe for concurrent
// use by multiple goroutines. The state of the locks is all in Redis, so
// Lockers in many processes coordinate through one Redis. A Lock with a
// heartbeat runs one goroutine until it is released or lost; a Locker with
// waiters runs two per subscription connection, which end a second after
// the last waiter left.
//
// # Index
//
// Locking:
//
//   - [New], [Locker], [Option]: one Locker per Redis and prefix, shared by
//     the goroutines of a process.
//   - [Locker.TryAcquire], [Locker.Acquire]: take a lock without waiting,
//     or waiting until ctx is done.
//   - [Locker.Do]: run a function under the lock, with a heartbeat and a
//     release however it ends.
//   - [Lock], [Lock.Token], [Lock.Resource], [Lock.String]: a grant, and the
//     token to pass with every write.
//   - [Lock.Release], [Lock.Refresh], [Lock.TTL]: end the lock, extend it,
//     read its remaining TTL in Redis.
//   - [Lock.Done], [Lock.Err]: learn that the lock ended, and why.
//   - [AcquireOption], [WithHeartbeat]: keep a lock alive while working.
//   - [WithRetryDelay]: how often a waiter checks on a holder that may
//     have crashed.
//
// Fencing:
//
//   - [Token], [ParseToken], [Token.String],
//     [Token.MarshalText], [Token.UnmarshalText]: a token, and its text form
//     for headers, JSON and databases.
//   - [Store], [CheckToken]: the contract of fenced storage, and its rule
//     for a Store of your own.
//   - [Update]: read, change and write back a value with one token, fenced
//     from the read on, so that no stale write lands in between.
//   - [MemoryStore], [NewMemoryStore], [MemoryStore.Put], [MemoryStore.Get],
//     [MemoryStore.Fence]: a Store in the process, for tests and
//     single-process use.
//   - [RedisStore], [NewRedisStore], [RedisStore.Put], [RedisStore.Get],
//     [RedisStore.Fence], [StoreOption], [WithStorePrefix]: a Store in
//     Redis, beside the locks.
//
// Locks of other libraries (redsync, redislock, SET NX PX):
//
//   - [Locker.IssueToken]: a token for a grant that another library holds.
//   - [Locker.AdvanceIssued]: raise IssueToken's counter past a token a
//     store reports.
//
// Errors:
//
//   - [ErrNotAcquired], [ErrUnavailable], [ErrLockLost], [ErrReleased],
//     [ErrStaleToken], [ErrNotReplicated], [ErrInvalidArgument],
//     [ErrInvalidToken], [ErrNotFound], [ErrCorrupt]: what went wrong, to
//     compare with errors.Is (see Errors above).
//   - [StaleTokenError], [StaleTokenError.Error], [StaleTokenError.Is]: the
//     refused and the stored token of a stale write, for errors.As.
//
// Redis and operations:
//
//   - [WithPrefix], [DefaultPrefix], [MaxResourceLen]: the namespace of the
//     keys, and the longest resource name.
//   - [Locker.Key], [Locker.Client]: a key of your own beside a resource's
//     lock keys, in their hash slot, and the client to reach it (package
//     election keeps its leader record so).
//   - [WithIdleExpiry], [DefaultIdleExpiry]: when an idle resource's keys
//     go.
//   - [WithReplicas]: wait for replicas to confirm each grant.
//   - [Locker.Advance]: raise a resource's counter past a token a store
//     reports, after Redis lost it.
//   - [Locker.Inspect], [Info]: what Redis holds for a resource (holder,
//     TTL, waiters, counter), for dashboards and debugging.
//
// Observing:
//
//   - [WithLogger]: log what no caller hears of, through log/slog.
//   - [WithObserver], [ObserveStore]: report acquires, waits, releases,
//     losses, failed heartbeat refreshes, store writes and fences to an
//     Observer of package [github.com/fencedlock/fencedlock/observe], for
//     metrics and traces (module fencedotel).
//   - [WithCall]: name the call an Acquire makes for the Observer (package
//     election's Campaign does).
package fencedlock
