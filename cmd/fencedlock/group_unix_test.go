//go:build unix

package main

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// newGroup starts a process in a process group of its own.
func newGroup() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// processGone reports whether the process pid has exited: it no longer
// exists, or is a zombie that nobody has waited for yet.
func processGone(pid int) bool {
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil {
		// The state follows the command name in parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
	} else if _, serr := os.Stat("/proc/self/stat"); serr == nil {
		return true // /proc works, and has no such process
	}
	return syscall.Kill(pid, 0) == syscall.ESRCH
}
