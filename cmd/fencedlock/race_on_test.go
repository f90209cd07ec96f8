//go:build race

package main

// raceEnabled builds the fencedlock binary with -race too.
const raceEnabled = true
