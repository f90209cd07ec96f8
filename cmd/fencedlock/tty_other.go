//go:build unix && !(linux || darwin || freebsd || netbsd || dragonfly)

package main

// foregroundJob reports false: here fencedlock does not ask the terminal,
// and CMD always gets a process group of its own.
func foregroundJob() bool { return false }
