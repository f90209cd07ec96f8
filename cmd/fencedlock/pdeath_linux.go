package main

import "syscall"

// parentDeath makes the kernel kill CMD when fencedlock dies without
// stopping it (SIGKILL, the OOM killer): nothing would keep its lock
// then, and another run could take it while CMD still works. The
// processes CMD starts are not covered.
func parentDeath(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
