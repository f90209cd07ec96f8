//go:build race

package racetest

// Enabled says that the race detector is on.
const Enabled = true
