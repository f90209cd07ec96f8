package main

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// fencedlock is killed (SIGKILL: the OOM killer, timeout -s KILL): CMD
// must die with it, before its lock's TTL lets a second run in.
func TestRunKilledTakesCMDWithIt(t *testing.T) {
	e := newEnv(t)
	script := `echo $$ > a.pid; while :; do sleep 0.02; done`
	p := e.start([]string{"run", "-ttl", "1s", "advkill", "--", "sh", "-c", script})
	waitUntil(t, "CMD to start", func() bool { return strings.HasSuffix(e.read("a.pid"), "\n") })
	a, _ := strconv.Atoi(strings.TrimSpace(e.read("a.pid")))
	t.Cleanup(func() { _ = syscall.Kill(a, syscall.SIGKILL) })
	p.signal(syscall.SIGKILL)
	p.wait()
	code, _, stderr := e.runStatus([]string{"run", "-ttl", "5s", "-wait", "10s", "advkill", "--", "true"})
	if code != 0 {
		t.Fatalf("second run: %d %s", code, stderr)
	}
	if !processGone(a) {
		t.Errorf("the killed fencedlock's CMD %d still runs after the lock was granted to another run", a)
	}
}
