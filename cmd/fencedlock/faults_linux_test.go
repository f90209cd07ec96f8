package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
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

func init() { helperModes["subreaper"] = subreaperHelper }

// subreaperHelper makes the test binary a child subreaper, as a
// container's PID 1 is, and executes its arguments: the processes that
// the program's children leave become its children when their parent
// exits.
func subreaperHelper() int {
	const prSetChildSubreaper = 36
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		fmt.Fprintln(os.Stderr, "prctl:", errno)
		return 3
	}
	err := syscall.Exec(os.Args[1], os.Args[1:], os.Environ())
	fmt.Fprintln(os.Stderr, "exec:", err)
	return 3
}

// fencedlock is a container's PID 1 (or a subreaper): a process CMD
// started that exits after CMD becomes fencedlock's child, a zombie
// until fencedlock waits for it. SIGTERM to fencedlock stops CMD and that
// process at once: fencedlock must then release the lock and exit, not
// take the zombie for a live process and wait out -kill-after (and a
// second more), past what "docker stop" gives it before SIGKILL.
func TestRunAsSubreaperDoesNotWaitForZombies(t *testing.T) {
	e := newEnv(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	script := `exec 2> sh.err; sh -c 'trap "sleep 0.2; exit 0" TERM; echo $$ > gc.pid; while :; do sleep 0.02; done' & trap 'exit 0' TERM; echo ready > ready; wait`
	const killAfter = 5 * time.Second
	p := e.launch(exec.Command(self, bin, "run", "-prefix", e.b.Prefix, "-kill-after", killAfter.String(), "reaped", "--", "sh", "-c", script), envHelper+"=subreaper")
	waitUntil(t, "CMD to be ready", func() bool {
		return e.read("ready") == "ready\n" && strings.HasSuffix(e.read("gc.pid"), "\n")
	})
	gc, _ := strconv.Atoi(strings.TrimSpace(e.read("gc.pid")))
	t.Cleanup(func() { _ = syscall.Kill(gc, syscall.SIGKILL) })
	signaled := time.Now()
	p.signal(syscall.SIGTERM)
	code := p.wait()
	if took := time.Since(signaled); took >= killAfter {
		t.Errorf("fencedlock exited %v after SIGTERM, though CMD and its child exited within a second: it waited out -kill-after %v for a zombie", took.Round(time.Millisecond), killAfter)
	}
	if code != 0 {
		t.Errorf("status %d, want CMD's 0; stderr %s", code, p.errText())
	}
	e.noLockLeft("reaped")
}
