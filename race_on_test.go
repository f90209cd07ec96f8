//go:build race

package fencedlock_test

// raceSlack is added to the deadline tests' slack: the race detector
// slows every goroutine switch, and CI runs the packages' tests at once
// on two cores. Without -race the tests hold calls to deadlineSlack.
const raceSlack = 50_000_000 // 50ms, as a time.Duration in nanoseconds
