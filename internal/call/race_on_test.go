//go:build race

package call

const raceEnabled = true
