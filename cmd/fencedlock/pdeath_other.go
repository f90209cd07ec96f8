//go:build unix && !linux

package main

import "syscall"

// parentDeath does nothing: only Linux can kill CMD when fencedlock
// dies.
func parentDeath(*syscall.SysProcAttr) {}
