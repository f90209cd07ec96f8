//go:build unix && !linux

package pgtest

import (
	"os/exec"
	"syscall"
)

// setProcAttr runs cmd as o (when not nil). Where the kernel offers no
// parent-death signal, Close and StopShared stop the server.
func setProcAttr(cmd *exec.Cmd, o *owner) {
	if o != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Credential: &syscall.Credential{Uid: o.uid, Gid: o.gid, Groups: []uint32{o.gid}},
		}
	}
}
