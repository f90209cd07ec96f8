//go:build linux || darwin || freebsd || netbsd || dragonfly

package main

import (
	"os"
	"syscall"
	"unsafe"
)

// foregroundJob reports whether fencedlock has a controlling terminal
// whose foreground process group is fencedlock's own.
func foregroundJob() bool {
	tty, err := os.Open("/dev/tty")
	if err != nil {
		return false // no controlling terminal: cron, a service, ssh without -t
	}
	defer tty.Close()
	var pgrp int32
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, tty.Fd(), uintptr(syscall.TIOCGPGRP), uintptr(unsafe.Pointer(&pgrp)))
	return errno == 0 && int(pgrp) == syscall.Getpgrp()
}
