package main

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
)

// A run stopped (SIGSTOP) past its TTL loses the lock: another run takes
// it over with a higher token and writes. The first run's CMD, still
// running, writes with its stale token and is refused. When the first
// run resumes, it stops its CMD and exits 1, saying the lock was lost.
func TestRunStoppedPastTTLLosesTheLock(t *testing.T) {
	t.Parallel() // it waits, mostly: for Redis, or for a lock to expire
	e := newEnv(t)
	// A's CMD writes its pid, waits for the file "write", writes with its
	// token, records how that went, and runs until it is stopped.
	stale := `echo $$ > a.pid; while [ ! -e write ]; do sleep 0.02; done; ` +
		helper(t) + ` > a.put; echo $? > a.status; while :; do sleep 0.05; done`
	a := e.start([]string{"run", "-ttl", "2s", "-kill-after", "5s", "stale", "--", "sh", "-c", stale}, envValue+"=from A")
	waitUntil(t, "A's CMD to start", func() bool { return strings.HasSuffix(e.read("a.pid"), "\n") })
	cmdA, err := strconv.Atoi(strings.TrimSpace(e.read("a.pid")))
	if err != nil {
		t.Fatal(err)
	}
	tokenA := e.inspect("stale").Token
	a.signal(syscall.SIGSTOP)
	t.Cleanup(func() { _ = a.cmd.Process.Signal(syscall.SIGCONT) })

	// B waits until A's lock runs out, as A cannot refresh it, and
	// writes with its own token.
	code, out, stderr := e.runStatus([]string{"run", "-ttl", "5s", "-wait", "20s", "stale", "--", "sh", "-c", helper(t)}, envValue+"=from B")
	if code != 0 || !strings.HasPrefix(out, "accepted ") {
		t.Fatalf("B: status %d, stdout %q, stderr %q", code, out, stderr)
	}
	tokenB, err := fencedlock.ParseToken(strings.TrimSpace(strings.TrimPrefix(out, "accepted ")))
	if err != nil || tokenB <= tokenA {
		t.Fatalf("B's token %d (%v), want above A's %d", tokenB, err, tokenA)
	}

	// A's CMD runs on while A is stopped: its write is refused.
	e.touch("write")
	waitUntil(t, "A's CMD to write", func() bool { return strings.HasSuffix(e.read("a.status"), "\n") })
	if status := strings.TrimSpace(e.read("a.status")); status != strconv.Itoa(putRefused) {
		t.Errorf("A's stale write: status %s, want %d (refused); it said %q", status, putRefused, e.read("a.put"))
	}
	if put := e.read("a.put"); !strings.Contains(put, "stale fencing token "+tokenA.String()) {
		t.Errorf("A's stale write said %q; want the stale token error", put)
	}

	// A resumes: it finds the lock lost, stops its CMD, and says why.
	if !a.running() {
		t.Fatalf("A exited while stopped; stderr: %s", a.errText())
	}
	a.signal(syscall.SIGCONT)
	if code := a.wait(); code != exitFailure {
		t.Errorf("A: status %d, want %d", code, exitFailure)
	}
	t.Logf("A said: %s", a.errText())
	oneLine(t, a.errText(), "lock lost", `"stale" (token `+tokenA.String()+")", "stopping CMD: SIGTERM")
	waitUntil(t, "A's CMD to stop", func() bool { return processGone(cmdA) })

	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	value, token, err := fencedlock.NewRedisStore(e.b.Client, fencedlock.WithStorePrefix(e.b.Prefix)).Get(ctx, "stale")
	if err != nil || string(value) != "from B" || token != tokenB {
		t.Errorf("the store holds %q with token %d (%v); want B's write, token %d", value, token, err, tokenB)
	}
	e.noLockLeft("stale")
}

// SIGHUP and SIGINT that fencedlock was started with ignored, as nohup
// and a script's & start it, stay ignored: for fencedlock, which runs on
// when it gets them, and for CMD.
func TestRunKeepsIgnoredSignalsIgnored(t *testing.T) {
	e := newEnv(t)
	script := `grep SigIgn /proc/self/status > sigign; while [ ! -e go ]; do sleep 0.02; done`
	p := e.launch(exec.Command("sh", "-c", `trap '' HUP INT; exec "$0" "$@"`,
		bin, "run", "-prefix", e.b.Prefix, "ignored", "--", "sh", "-c", script))
	waitUntil(t, "CMD to start", func() bool { return strings.HasSuffix(e.read("sigign"), "\n") })
	p.signal(syscall.SIGHUP)
	p.signal(syscall.SIGINT)
	time.Sleep(300 * time.Millisecond) // time for the signals to act, if they did
	if !p.running() {
		t.Fatalf("fencedlock exited on an ignored signal: status %d, stderr %q", p.wait(), p.errText())
	}
	e.touch("go")
	if code := p.wait(); code != 0 {
		t.Errorf("status %d, stderr %q", code, p.errText())
	}
	mask, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(e.read("sigign"), "SigIgn:")), 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	if hupInt := uint64(1)<<(syscall.SIGHUP-1) | 1<<(syscall.SIGINT-1); mask&hupInt != hupInt {
		t.Errorf("CMD's ignored signals %#x; want SIGHUP and SIGINT among them", mask)
	}
	e.noLockLeft("ignored")
}
