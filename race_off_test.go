//go:build !race

package fencedlock_test

// ltRaceSlack is 0 without the race detector: see race_on_test.go.
const ltRaceSlack = 0
