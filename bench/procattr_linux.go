package main

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill cmd's process when the bench exits,
// however it exits.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
