// Package fencedlock provides distributed locks on Redis whose every grant
// carries a rising fencing token, and storage that checks the token on
// every write, so that a holder whose lock expired cannot overwrite the
// work of the holder that came after it.
//
// # The problem
//
// A lock with a TTL (SET key owner NX PX 30000) stops a crashed holder from
// blocking others forever. It does not stop a holder that is alive but
// paused: a garbage-collection pause, page faults, SIGSTOP, a slow disk or
// a long network delay can last longer than the TTL. The lock expires,
// another process acquires it, and when the first holder resumes it still
// believes it holds the lock and writes over the new holder's work.
// Checking the lock's TTL just before writing does not help, because the
// pause can fall between the check and the write. Only the storage can
// refuse the late write, and only if every write carries a number that
// tells an old grant from a new one.
//
// # The model
//
// A [Locker] grants a lock on a named resource together with a [Token], in
// one Redis script: SET NX PX takes the lock and INCR on a per-resource
// counter yields the token, atomically, in one round trip. Every grant of
// a resource gets a token higher than every earlier grant of it;
// [Lock.Refresh] extends the lock and keeps its token. [Locker.TryAcquire]
// makes one attempt and returns [ErrNotAcquired] when the lock is held;
// [Locker.Acquire] waits for it until its context is done; [Locker.Do]
// waits, keeps the lock with a heartbeat while a function runs, and
// releases it.
//
// The holder passes [Lock.Token] with every write to a [Store]. The store
// compares it with the token stored next to the resource's value, in the
// same atomic step as the write: a token equal to or higher than the
// stored one passes and is stored with the new value (equal passes because
// one holder writes many times); a lower one is refused with a
// [*StaleTokenError] and nothing changes. [CheckToken] is that rule,
// written once; [MemoryStore] and [RedisStore] apply it, and so must any
// other Store.
//
// # When a write is refused
//
// An error matching [ErrStaleToken] (every *StaleTokenError does, with
// errors.Is) means the writer lost its lock and someone newer has written
// since. Retrying the same write is useless: the token stays too low. The
// writer stops, drops what it read under the old lock, acquires the lock
// again (getting a higher token), reads the resource again and redoes its
// operation on the current state. A service that fences writes on behalf
// of remote clients answers 409 Conflict, with the resource, the rejected
// token and the current one in the body; use errors.As to read them from
// the *StaleTokenError.
//
// # TTL, heartbeat and fencing
//
// These are three different things, and only the third one is safety:
//
//   - The TTL bounds how long a crashed holder keeps others out. It is
//     liveness.
//   - A heartbeat extends the TTL while the holder works, so that long work
//     is not cut short by expiry, and tells the holder when the lock is
//     gone. It is efficiency. [WithHeartbeat] makes Acquire refresh the
//     lock in the background; [Lock.Done] and [Lock.Err] report its loss,
//     and [Locker.Do] cancels the work's context with [ErrLockLost] as the
//     cause. A paused holder misses its heartbeat too, so no TTL and no
//     heartbeat makes writes safe.
//   - Fencing, the token on every write and the store's check of it, is
//     what keeps a stale holder's writes out.
//
// # Waiting
//
// [Locker.Acquire] waits without polling. The goroutines of one Locker
// waiting for one resource queue in the process; the first of them queues
// in Redis, where the waiters of all processes queue in order of arrival.
// [Lock.Release] hands the lock to the first live waiter in that queue,
// with a fresh token, in the same script, and publishes the grant on the
// resource's channel (sharded pub/sub on Redis 7 and later); the Locker's
// one subscription wakes the waiter. When the waiter is a goroutine of the
// releasing Locker, the release's reply carries the grant to it. Either
// way a waiter takes the lock only from an answer of Redis: a Lock is
// never returned on a local belief that the holder still held it. A
// waiter that gives up leaves the queue and passes on a lock handed to it
// meanwhile. A waiter whose process dies is skipped once its TTL has
// passed unrenewed. A fallback timer, bounded by the holder's remaining
// TTL, covers a holder that crashed and a message lost with a broken
// connection.
//
// A hand-over between two processes, A holding R and B waiting for it:
//
//	B                           Redis                            A
//	acquire (waiting) -------->  R held by A: queue B, refuse
//	  <------------------------  {refused, A's PTTL, counter}
//	SUBSCRIBE R's channel ---->
//	  <------------------------  subscribed
//	acquire again ------------>  still held: refuse (B keeps its place)
//	wait: message, timer, ctx                       <------------ release
//	                             A's lock: grant R to B, next token,
//	                             dequeue B, publish "B:token"
//	  <------------------------  message "B:token"  ------------> {held, B, token}
//	token above the floor of
//	B's last refusal: B holds R
//
// The floor (the counter when B was last refused) tells a fresh grant from
// a message delayed past a later refusal: a grant below it may have ended,
// and B asks again. In the releasing process the reply of the release
// carries the grant to its own waiter the same way. The code follows this
// page: wait.go (the local queue and one waiter's loop), pubsub.go (the
// subscription), lua/acquire.lua and lua/release.lua (the scripts).
//
// # Deadlines
//
// Every call that takes a ctx returns within its deadline (plus a few
// milliseconds), whatever Redis does and whether or not the go-redis
// client heeds contexts (ContextTimeoutEnabled): a command whose answer
// has not come by then is left to the client's own timeouts in the
// background. Cleanup that must outlive the call (releasing the grant of
// an attempt whose answer never came, leaving the queue) runs in the
// background within a second, at most 64 at a time per Locker; the error
// says whether it finished, and a failure after the call returned is
// logged (see [WithLogger]). Waiters on different resources never wait
// for each other.
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
//	a store refused a lower token               ErrStaleToken        acquire again, re-read, retry (HTTP 409)
//	replicas did not confirm the grant          ErrNotReplicated     retry later
//	bad input; nothing was sent                 ErrInvalidArgument,  fix the call
//	                                            ErrInvalidToken
//	a key holds what the library did not write  ErrCorrupt           repair the key
//
// After a Release or Refresh whose outcome is unknown (ErrUnavailable),
// the Lock is not ended, and Release may be called again. Until a Refresh
// succeeds it no longer counts as certainly held: a Refresh that may have
// shortened the lock brings the heartbeat's deadline forward, and a Lock
// whose heartbeat a failed Release stopped ends as lost when its lease
// runs out by the local clock. A call whose ctx was done before it sent
// anything changes nothing.
//
// # Observing
//
// WithLogger logs through log/slog: at Warn what no caller hears of (a
// lock found lost, a heartbeat refresh that failed and will be retried,
// a failed cleanup), at Debug grants, waits, releases and hand-overs.
// WithObserver reports the same events, and ObserveStore a store's
// writes, to an Observer: the fencedotel module turns them into
// OpenTelemetry metrics and spans. Neither costs anything when absent.
// Locker.Inspect reads what Redis holds for a resource (holder, token,
// TTL, waiting processes, counter): a snapshot for dashboards, never a
// reason to write.
//
// # What is promised
//
// A fenced store never accepts a write for a resource with a token lower
// than one it has already accepted for that resource. This holds whatever
// happens in between: process pauses, network delays, clock jumps, Redis
// restarts, flushes and failovers. It rests on the store alone, so it
// holds only if the store keeps its tokens durably and commits each token
// in the same atomic step as its value.
//
// What is not promised: that two processes never believe at the same time
// that they hold the lock. No lock based on leases can promise that, since
// a paused holder cannot learn that its lease ran out; fencing makes the
// overlap harmless. Nor are tokens promised to rise by one, to be unique
// across resources, or to be comparable between resources.
//
// Tokens follow the Redis clock. When the counter key is missing (first
// use, FLUSHALL, eviction, a restart without persistence) or behind the
// clock (a failover to a replica that missed some INCRs), the grant first
// raises it to the server's TIME in microseconds, then increments it. So a
// token is above every token granted before, unless the clock of the
// server that grants it is behind the clock of the one that granted them.
// If it is, stores refuse the new holders' writes
// (safety holds), each refusal reports the store's token in
// StaleTokenError.Current, and [Locker.Advance] raises the counter past it.
// [WithReplicas] makes each acquire wait until replicas confirm the grant
// (Redis's WAIT), so that a failover is less likely to lose it.
//
// # Keys and Redis Cluster
//
// The keys of resource R are "<prefix>:{R}:lock", which holds a random
// 128-bit owner nonce and the grant's token ("<nonce>:<token>") so that
// only the holder can refresh or release the lock; "<prefix>:{R}:token",
// the counter, which expires once R has been idle (see [WithIdleExpiry]:
// the next token is then seeded from the clock, as after FLUSHALL, which
// assumes the server clock does not step back by more than the idle
// expiry); "<prefix>:{R}:queue" and
// "<prefix>:{R}:deadlines", the waiters, which expire with their last
// waiter; "<prefix>:{R}:abandoned:<nonce>", short-lived markers of acquire
// attempts whose reply was lost; and, for a RedisStore,
// "<prefix>:{R}:value". Releases publish on the channel
// "<prefix>:{R}:grants". The prefix is [DefaultPrefix] unless
// [WithPrefix] or [WithStorePrefix] sets another; Lockers exclude each
// other only when they share Redis and prefix. The braces are a Redis
// Cluster hash tag: all keys of one resource are in one hash slot, so the
// library's multi-key scripts are legal on a cluster, and the client can
// be any redis.UniversalClient: a single node, a Sentinel failover client
// or a cluster client. A resource whose name begins with "}" is refused
// with [ErrInvalidArgument], because its keys would have an empty hash
// tag and be spread over slots.
//
// # Locks of other libraries
//
// A lock that another library holds (redsync, redislock, a plain SET NX
// PX) gets its tokens from [Locker.IssueToken], which checks that the
// lock key still holds the grant's value and issues the grant's token in
// one script: the same token when the same grant asks again, a higher one
// for each new grant. Its counter and grant record sit in the lock key's
// hash slot, under the lock key's own hash tag when it has one.
//
// # Writing a Store
//
// A store of your own (a SQL row, a document, a file) calls [CheckToken]
// inside its own transaction, with the current token read under the same
// lock or snapshot as the write, and stores the writer's token next to the
// value in that transaction. Package
// [github.com/fencedlock/fencedlock/fencetest] checks a Store against the
// contract, concurrent writes included; run it with -race.
//
// # Concurrency
//
// [Locker], [Lock], [MemoryStore] and [RedisStore] are safe for concurrent
// use by multiple goroutines. The state of the locks is all in Redis, so
// Lockers in many processes coordinate through one Redis; a Locker keeps
// in the process only its queue of waiting goroutines and its
// subscription. A Lock with a heartbeat runs one goroutine until it is
// released or lost; a Locker with waiters runs two per subscription
// connection (one sends its requests, one reads what it receives, besides
// go-redis's own), which end a second after the last waiter left. A call
// whose ctx ends before Redis answers leaves its command to finish in the
// background within the client's timeouts.
package fencedlock
