//go:build !linux

package mysqltest

import "os/exec"

// dieWithParent does nothing where the kernel offers no parent-death
// signal; Close and StopShared stop the server.
func dieWithParent(*exec.Cmd) {}
