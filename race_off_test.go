//go:build !race

package fencedlock_test

// raceSlack is 0 without the race detector: see race_on_test.go.
const raceSlack = 0
