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
// goroutines) and, in some scenarios, two child processes loop over three
// resources: acquire a lock with a 200ms TTL (TryAcquire with retries, or
// the waiting Acquire with a deadline, some with WithHeartbeat), read the
// resource, sometimes sleep past the TTL (a GC pause), write a unique
// value with the lock's token, release. The store is served over HTTP
// with package fencehttp through a fault proxy, so that a write can be
// delivered after its client gave up; behind the handler a ledger records
// every write the store applied, in effect order.
//
// # Faults
//
// Each scenario injects some of: holders paused past their TTL; child
// processes stopped with SIGSTOP past their TTL (Linux only; elsewhere
// those scenarios skip); latency, stalls, lost replies and broken
// connections between the clients and Redis; writes held in the network
// and delivered late; the lock Redis killed and restarted empty, or
// flushed; failovers to a replica that missed the latest grants, with and
// without fencedlock.WithReplicas; a real 3-master Redis Cluster. The
// "mixed" scenario injects them together on one node; in "redis-store"
// the clients call a fencedlock.RedisStore themselves through a faulty
// network. The "negative-control" scenario runs against a store without
// the fence and passes only if the checkers report its violations: the
// suite can fail.
//
// # Checkers
//
//   - A, the ledger: per resource, the tokens of the accepted writes never
//     go down (stale accepted: 0), no accepted write is overwritten by a
//     lower token (lost: 0), and every refusal is explained by the rule.
//     The clients' answers must match the ledger's, and writes applied
//     after their client gave up are counted as late deliveries.
//   - B, the grants: no two grants of a resource carry the same token; a
//     grant whose acquire began after another's returned carries a higher
//     token (no inversions).
//   - C, porcupine: the clients' reads and writes, as they saw them, are
//     linearizable for a fenced register per resource; a write with an
//     unknown answer may take effect at any later time, or never.
//
// # Running
//
// The suite needs redis-server on PATH, like the library's other
// real-Redis tests: without it they skip, and with CI=true they fail.
// Without flags it runs in quick mode, five seconds of workload per
// scenario, for CI (70 to 80 seconds in all, -race or not):
//
//	go test ./safety
//
// The long mode, with two minutes of workload per scenario and a Markdown
// report of the run (the flags work without -args too):
//
//	go test ./safety -v -run TestSafety -timeout 2h -args -safety.duration 2m -safety.report /tmp/safety/report.md
//
// Flags: -safety.duration (workload per scenario; setting it selects the
// long mode, where a porcupine timeout is reported instead of failing),
// -safety.seed (the base seed of all random choices; by default taken from
// the clock and always logged, so that a failure's choices can be
// replayed), -safety.report (where to write the report; porcupine's
// visualization and the history of a failing scenario go next to it),
// -safety.check-timeout (porcupine's limit per scenario). One scenario
// runs alone with -run TestSafety/<name>.
package safety
