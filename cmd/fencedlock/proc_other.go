//go:build !unix

package main

import (
	"os"
	"os/exec"
	"os/signal"
	"time"
)

// notifySignals returns a channel of the interrupts fencedlock catches,
// to stop CMD, or to stop waiting for the lock.
func notifySignals() (chan os.Signal, func()) {
	ch := make(chan os.Signal, 8)
	signal.Notify(ch, os.Interrupt)
	return ch, func() { signal.Stop(ch) }
}

// prepare sets how cmd starts; there are no process groups to set here.
func prepare(*exec.Cmd) bool { return false }

// reapGroup has nothing to do: there are no process groups here.
func reapGroup(int, <-chan time.Time) {}

// forwards reports whether sig is to be passed on to CMD: always.
func forwards(bool, os.Signal) bool { return true }

// signalProcess stops p: a process here cannot be sent a signal, so any
// signal kills it.
func signalProcess(p *os.Process, _ bool, _ os.Signal) error { return p.Kill() }

// exitStatus is the exit status of a process that has exited.
func exitStatus(state *os.ProcessState) int { return state.ExitCode() }
