//go:build !linux

package main

import "os/exec"

// dieWithParent does nothing here: the bench kills its processes on its
// own exit paths, and children also exit when their standard input closes.
func dieWithParent(cmd *exec.Cmd) {}
