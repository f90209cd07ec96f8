package mysqltest

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill cmd when the test binary dies, so
// that a test binary killed by a timeout leaves no mariadbd behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
