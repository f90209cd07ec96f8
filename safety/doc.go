// Package safety is fencedlock's fault-injection safety suite. It has no
// API: its tests start real redis-servers, run lock clients against them
// under faults, record what every client saw, and check the histories
// mechanically against the promise of fencedlock's package documentation
// (a fenced store never accepts a lower token than one it has accepted),
// and against what fencedlock.Update promises a read-modify-write (no
// holder's write lands between its read and its write: an update it
// acknowledged is never lost). The workloads, the scenarios, the five
// checkers (A to E) and what long runs found are described in
// https://github.com/fencedlock/fencedlock/blob/main/docs/safety.md.
//
// # Running
//
// The suite needs redis-server on PATH, like the library's other
// real-Redis tests, and PostgreSQL and MariaDB for the append-postgres
// and append-mariadb scenarios (found as internal/pgtest and
// internal/mysqltest find them): without them the scenarios that need
// them skip, and with CI=true they fail.
// Without flags it runs in quick mode, four seconds of workload per
// scenario, for CI:
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
//     from the clock and always logged. A scenario's seed is the base seed
//     plus its place in the list of scenarios.
//   - -safety.report: where to write the report; porcupine's
//     visualization and the history of a failing scenario go next to it.
//   - -safety.check-timeout: porcupine's limit per scenario; a timeout
//     fails the scenario in both modes.
//
// One scenario runs alone with -run 'TestSafety/^name$', with the names
// of docs/safety.md. The seed replays the random choices (which resource,
// which fault, how long a pause), not the timing, so a failure may need
// several runs with its seed to recur; its saved history is the exact
// record.
//
// The histories are timestamped with the wall clock, the only clock the
// test process and its children share: the suite assumes one machine
// whose clock does not step during a run (no NTP step).
package safety
