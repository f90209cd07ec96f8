//go:build !race

package fencedlock

// raceEnabled says that the tests run under the race detector.
const raceEnabled = false
