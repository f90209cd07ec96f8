//go:build unix && !aix

package main

import "syscall"

// reapZombies waits for the processes of group pgid that have exited and
// are fencedlock's children. CMD was waited for already; others are only
// when fencedlock is a subreaper, as a container's PID 1 is: a process
// CMD started that outlived CMD became its child. Left unwaited, such a
// zombie would keep the group alive for reapGroup until -kill-after.
func reapZombies(pgid int) {
	for {
		pid, err := syscall.Wait4(-pgid, nil, syscall.WNOHANG, nil)
		if err != nil || pid <= 0 {
			return
		}
	}
}
