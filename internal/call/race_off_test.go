//go:build !race

package call

const raceEnabled = false
