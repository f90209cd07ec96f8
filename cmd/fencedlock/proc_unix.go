//go:build unix

package main

import (
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
)

// handledSignals are the signals fencedlock catches, to pass them on to
// CMD, or to stop waiting for the lock.
var handledSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// notifySignals returns a channel of the handled signals. SIGHUP and
// SIGINT, when fencedlock was started with them ignored (by nohup, by a
// shell's &), are left out: they stay ignored, for fencedlock and for
// CMD. (The Go runtime keeps only those two ignored: signal.Ignored
// reports false for another.)
func notifySignals() (chan os.Signal, func()) {
	ch := make(chan os.Signal, 8)
	var sigs []os.Signal
	for _, s := range handledSignals {
		if !signal.Ignored(s) {
			sigs = append(sigs, s)
		}
	}
	if len(sigs) > 0 {
		signal.Notify(ch, sigs...)
	}
	// A write to a stderr (or stdout) that is a pipe nobody reads would
	// otherwise kill fencedlock with SIGPIPE, in the middle of saying
	// that the lock is lost, before it stops CMD and what CMD started.
	// Caught, the write fails with EPIPE instead, and fencedlock goes on.
	// CMD gets SIGPIPE's default action, as a caught signal is reset by
	// exec. It stays caught until fencedlock exits.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	return ch, func() { signal.Stop(ch) }
}

// prepare sets how cmd starts, and reports whether it gets a process
// group of its own. It does, so that signals reach the processes CMD
// starts too, unless fencedlock is the foreground job of its terminal:
// then CMD stays in fencedlock's group, the terminal's foreground, so
// that it can read from the terminal and gets the terminal's signals.
func prepare(cmd *exec.Cmd) bool {
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	parentDeath(cmd.SysProcAttr)
	if foregroundJob() {
		return false
	}
	cmd.SysProcAttr.Setpgid = true
	return true
}

// reapGroup waits until the process group pgid is empty, and kills what
// is left in it with SIGKILL when kill fires first (a nil kill: SIGKILL
// was sent already). It waits at most a second after SIGKILL: a process
// in an uninterruptible sleep cannot be made to go sooner.
func reapGroup(pgid int, kill <-chan time.Time) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var giveUp <-chan time.Time
	if kill == nil {
		giveUp = time.After(time.Second)
	}
	for reapZombies(pgid); syscall.Kill(-pgid, 0) == nil; reapZombies(pgid) {
		select {
		case <-kill:
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			kill, giveUp = nil, time.After(time.Second)
		case <-giveUp:
			return
		case <-tick.C:
		}
	}
}

// forwards reports whether sig, caught by fencedlock, is to be sent on
// to CMD. In a group of its own CMD gets every signal from fencedlock. In
// fencedlock's group, the terminal sends SIGINT (Ctrl-C) and SIGHUP (the
// terminal hung up) to CMD as well as to fencedlock, so only SIGTERM is
// sent on.
func forwards(group bool, sig os.Signal) bool {
	return group || sig == syscall.SIGTERM
}

// signalProcess sends sig to p, or to the process group it leads.
func signalProcess(p *os.Process, group bool, sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return p.Signal(sig)
	}
	if group {
		return syscall.Kill(-p.Pid, s)
	}
	return p.Signal(s)
}

// exitStatus is the exit status of a process that has exited: its own,
// or 128 plus the number of the signal that ended it.
func exitStatus(state *os.ProcessState) int {
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitSignal + int(ws.Signal())
	}
	return state.ExitCode()
}
