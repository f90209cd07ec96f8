//go:build linux

package safety

import (
	"os/exec"
	"syscall"
)

// childrenSupported: child processes, and the sigstop fault, run on Linux.
const childrenSupported = true

// prepareChild makes the kernel kill the child when the test process
// dies, so that a test binary killed by a timeout leaves no child behind.
func prepareChild(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// stop stops the whole child process (SIGSTOP): no goroutine of it runs,
// its heartbeats neither, until cont.
func (c *child) stop() error { return c.cmd.Process.Signal(syscall.SIGSTOP) }

// cont resumes a stopped child (SIGCONT).
func (c *child) cont() error { return c.cmd.Process.Signal(syscall.SIGCONT) }
