//go:build !linux

package redistest

import "os/exec"

// dieWithParent does nothing where the kernel offers no parent-death
// signal; Close and StopShared stop the server.
func dieWithParent(*exec.Cmd) {}
