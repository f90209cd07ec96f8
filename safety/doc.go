// Package safety is fencedlock's fault-injection safety suite. It has no
// API: its tests start real redis-servers, run lock clients against them
// under faults, record what every client saw, and check the histories
// mechanically. See
// https://github.com/fencedlock/fencedlock/blob/main/docs/safety.md for
// what the suite does and what a long run found.
//
// The promise under test: a fenced store never accepts a write whose
// token is lower than one it already accepted for that resource, whatever
// pauses, network faults, restarts, flushes and failovers happen.
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
// Flags:
//
//   - -safety.duration: workload per scenario; setting it selects the
//     long mode, where a listed fault without effect fails its scenario.
//   - -safety.seed: the base seed of all random choices; by default taken
//     from the clock and always logged.
//   - -safety.report: where to write the report; porcupine's
//     visualization and the history of a failing scenario go next to it.
//   - -safety.check-timeout: porcupine's limit per scenario; a timeout
//     fails the scenario in both modes.
//
// One scenario runs alone with -run 'TestSafety/^name$'. The seed replays
// the random choices (which resource, which fault, how long a pause), not
// the timing, so a failure may need several runs with its seed to recur;
// its saved history is the exact record.
//
// The histories are timestamped with the wall clock, the only clock the
// test process and its children share: the suite assumes one machine
// whose clock does not step during a run (no NTP step).
//
// # Workload
//
// Lock clients in the test process (two Lockers, each shared by two
// goroutines, each with its own network to Redis) and, in some scenarios,
// two child processes loop over three resources: acquire a lock with a
// 200ms TTL, read the resource, sometimes sleep past the TTL, write a
// unique value with the lock's token, release. The store is served over
// HTTP with package fencehttp through a fault proxy; behind the handler a
// ledger records every write the store applied, in effect order.
//
// # Scenarios
//
// Each scenario injects its faults one at a time, at random, in rounds:
//
//   - pause: holders sleep past their TTL before writing.
//   - sigstop: child processes stopped with SIGSTOP past their TTL
//     (Linux only; elsewhere the scenarios with children skip).
//   - proxy: latency, stalls, lost replies and broken connections on one
//     lock client's network to Redis at a time.
//   - late-write: writes delivered after their clients gave up.
//   - restart, restart-pause: the lock Redis killed and restarted empty,
//     or flushed.
//   - failover, failover-pause, failover-wait: failovers to a replica that
//     missed the latest grants (failover-wait with
//     fencedlock.WithReplicas).
//   - sentinel, sentinel-wait: the master of a Sentinel deployment killed
//     and a replica promoted, the clients on go-redis's failover client.
//   - cluster: a 3-master Redis Cluster, flushed, with pauses and stopped
//     children.
//   - mixed: all the single-node faults together, with late-reply (a
//     Release or Refresh whose reply comes after its ctx ended, then
//     called again, while waiters are queued) and stall (every lock
//     client's network stalled past the waiters' deadline).
//   - redis-store: the clients call a fencedlock.RedisStore themselves
//     through a faulty network.
//   - negative-control: pauses and late writes against a store without
//     the fence; it passes only if the checkers report its violations, so
//     the suite can fail.
//
// The suite also checks that the faults did what they are for (a
// restart left Redis empty, a failover lost grants, a held write was
// delivered, a stop found its child holding a lock) and reports it; in
// the long mode a listed fault with no effect fails its scenario.
//
// # Checkers
//
//   - A, the ledger: per resource, the tokens of the accepted writes never
//     go down, no accepted write is overwritten by a lower token, every
//     refusal is explained by the rule, the clients' answers match the
//     ledger's, and the final value is the last accepted write.
//   - B, the grants: no two grants of a resource carry the same token, and
//     a grant whose acquire began after another's returned carries a
//     higher token.
//   - C, porcupine: the clients' reads and writes, and the final reads,
//     are linearizable for a fenced register per resource.
//   - D, the Locks in Redis: right after a lock call returns a Lock, its
//     key, read past the fault proxies, holds no lower token than the
//     Lock's, and no token is under two owners.
//
// The report counts the stale writes attempted by likely cause (the
// client's own pause, its process stopped, its write delivered late, the
// store's network slowed, its grant delayed, the lock state lost, or
// other), and how many Locks checker D checked, so that no checker passes
// unseen.
package safety
