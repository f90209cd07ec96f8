package pgtest

import (
	"os/exec"
	"syscall"
)

// setProcAttr runs cmd as o (when not nil) and makes the kernel kill it
// when the test binary dies, so that a test binary killed by a timeout
// leaves no postgres behind. Go sets the parent-death signal after
// changing the credentials, which would clear it.
func setProcAttr(cmd *exec.Cmd, o *owner) {
	attr := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if o != nil {
		attr.Credential = &syscall.Credential{Uid: o.uid, Gid: o.gid, Groups: []uint32{o.gid}}
	}
	cmd.SysProcAttr = attr
}
