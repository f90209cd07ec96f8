//go:build aix

package main

// reapZombies does nothing on AIX, whose syscall package has no WNOHANG:
// there a zombie that fencedlock, as a subreaper, has not waited for
// keeps reapGroup waiting until -kill-after, as before.
func reapZombies(pgid int) {}
