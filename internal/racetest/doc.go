// Package racetest tells tests whether they run under the race
// detector: Enabled, set by build tags in on.go and off.go.
package racetest
