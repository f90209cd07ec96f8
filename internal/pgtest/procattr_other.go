//go:build !unix

package pgtest

import "os/exec"

// setProcAttr does nothing where there are no Unix credentials (os.Getuid
// is -1 there, so o is nil) and no parent-death signal: Close and
// StopShared stop the server.
func setProcAttr(*exec.Cmd, *owner) {}
