// Package safety is fencedlock's fault-injection safety suite. It has no
// API: its tests start real redis-servers, run lock clients against them
// under faults, record what every client saw, and check the histories
// mechanically.
//
// The promise under test: a fenced store never accepts a write whose
// token is lower than one it already accepted for that resource, whatever
// pauses, network faults, restarts, flushes and failovers happen.
//
// # Workload
//
// Four clients in the test process (two Lockers, each shared by two
// goroutines, each Locker with its own network to Redis, plus a helper
// goroutine per Locker that the late-reply fault starts) and, in some
// scenarios, two child processes loop over three resources: acquire a
// lock with a 200ms TTL (TryAcquire with retries, or the waiting Acquire
// with a deadline, some with WithHeartbeat), read the resource, sometimes
// sleep past the TTL (a GC pause), write a unique value with the lock's
// token, release. The store is served over HTTP with package fencehttp
// through a fault proxy, so that a write can be delivered after its
// client gave up; behind the handler a ledger records every write the
// store applied, in effect order. Once the workload has drained, every
// resource is read back from the store.
//
// # Scenarios and faults
//
// Each scenario runs the workload under some faults, injected one at a
// time at random, in rounds:
//
//   - pause: holders sleep past their TTL before writing.
//   - sigstop: child processes stopped with SIGSTOP past their TTL,
//     heartbeats included (Linux only; elsewhere the scenarios with
//     children skip).
//   - proxy: latency longer than the TTL, stalls, lost replies and broken
//     connections on ONE lock client's network to Redis at a time: its
//     grants arrive after their TTL while the others take the locks and
//     write.
//   - late-write: writes held in the store's network and delivered after
//     their clients gave up.
//   - restart, restart-pause: the lock Redis killed and restarted empty,
//     or flushed, with and without holders' pauses.
//   - failover, failover-pause: failovers to a replica that missed the
//     latest grants, with and without pauses; failover-wait: the same
//     with fencedlock.WithReplicas.
//   - sentinel, sentinel-wait: a master, two replicas and three
//     Sentinels, the clients on go-redis's failover client; the master
//     killed with SIGKILL (every other time just after its replicas were
//     cut off, so that its last grants are lost), a replica promoted by
//     the Sentinels, the killed server back as a replica of the new
//     master; with pauses, and in sentinel-wait with
//     fencedlock.WithReplicas.
//   - cluster: a real 3-master Redis Cluster, flushed, with pauses and
//     stopped children.
//   - late-reply (in mixed): a Release or a Refresh whose reply is
//     delayed (DelayReplies, 150-300ms) past its 50ms ctx, then called
//     again, on a Locker holding a lock with a long TTL while a waiter of
//     the other Locker is queued and one of its own waits in Acquire: the
//     sequence in which a Locker that hands the lock to its own waiter
//     before Redis answered returns a Lock that another owner holds. Half
//     run on a resource of their own (r-late), half among the workload.
//   - stall (in mixed): every lock client's network stalled longer than
//     the waiters' deadline, then resumed.
//   - mixed: all the single-node faults together, with late-reply and
//     stall.
//   - redis-store: the clients call a fencedlock.RedisStore themselves
//     through a faulty network.
//   - negative-control: pauses and late writes against a store without
//     the fence; it passes only if the checkers report its violations: the
//     suite can fail.
//
// The suite checks that the faults did what they are for, and reports it:
// the lock Redis must be empty after each restart and flush (or the
// scenario fails), with the counters it held counted as lost; each
// failover, and each kill of a master under Sentinel, compares the token
// counters of the old master and the promoted replica (failovers that
// lost grants); held writes are counted when delivered; stops are
// counted when they found their child holding a lock; late-reply cycles
// are counted when the short call timed out and was made again (with the
// waiters present); stalls by the waiting acquires whose deadline fell
// in one (and those of them that returned more than 100ms after it). The
// report also counts the Releases
// called while a goroutine of the same Locker waited for the resource. In
// the long mode a listed fault with no effect at all fails its scenario.
//
// # Checkers
//
//   - A, the ledger: per resource, the tokens of the accepted writes never
//     go down (stale accepted: 0), no accepted write is overwritten by a
//     lower token (lost: 0), and every refusal is explained by the rule
//     (after a store error, by the failed write if it may have landed).
//     The clients' answers must match the ledger's, writes applied after
//     their client gave up are counted as late deliveries, and the final
//     value of each resource must be the last accepted write.
//   - B, the grants: no two grants of a resource carry the same token; a
//     grant whose acquire began after another's returned carries a higher
//     token (no inversions).
//   - C, porcupine: the clients' reads and writes, as they saw them, and
//     the final reads are linearizable for a fenced register per
//     resource; a write with an unknown answer may take effect at any
//     later time before the final reads, or never.
//   - D, the Locks in Redis: right after Acquire or TryAcquire returns a
//     Lock, the client reads its lock key through a direct connection to
//     the lock Redis, past the fault proxies (child processes too). A key
//     holding a token lower than the Lock's means the Lock was returned
//     without its grant in Redis (a grant overwrites the key, and later
//     grants carry higher tokens, even after a restart or a flush): a
//     violation, as is one token under two owners. A missing key or a
//     higher token is fine. In a failover or sentinel scenario a read is
//     skipped when a promotion (or a kill of the master) came between the
//     lock call and the read. The report counts the Locks checked, so
//     that the checker cannot pass unseen.
//
// The report counts the stale writes attempted: the writes that reached
// the store with a token below the highest it had accepted for the
// resource (stale rejected + stale accepted, from the ledger; in
// redis-store, which has no ledger, the refusals the clients saw), by
// likely cause: the client's own pause, its process stopped, its write
// delivered late, the store's network slowed, its grant delayed by its
// network, the lock state lost, or other.
//
// The histories are timestamped with the wall clock, the only clock the
// test process and its children share: the suite assumes one machine
// whose clock does not step during a run (no NTP step), as checker B's
// inversions and the attribution of causes compare timestamps across
// processes.
//
// # Running
//
// The suite needs redis-server on PATH, like the library's other
// real-Redis tests: without it they skip, and with CI=true they fail.
// Without flags it runs in quick mode, four seconds of workload per
// scenario, for CI (about 90 seconds in all, -race or not):
//
//	go test ./safety
//
// The long mode, with two minutes of workload per scenario and a Markdown
// report of the run (the flags work without -args too):
//
//	go test ./safety -v -run TestSafety -timeout 2h -args -safety.duration 2m -safety.report /tmp/safety/report.md
//
// Flags: -safety.duration (workload per scenario; setting it selects the
// long mode, where a fault without effect fails its scenario),
// -safety.seed (the base seed of all random choices; by default taken
// from the clock and always logged), -safety.report (where to write the
// report; porcupine's visualization and the history of a failing
// scenario go next to it), -safety.check-timeout (porcupine's limit per
// scenario; a timeout fails the scenario in both modes). One scenario runs
// alone with -run 'TestSafety/^name$'.
//
// The seed replays the random choices (which resource, which fault, how
// long a pause), not the timing: the same seed gives a run that differs
// in how the clients, the servers and the faults interleave, so a
// failure may need several runs with its seed to recur; its saved
// history is the exact record.
package safety
