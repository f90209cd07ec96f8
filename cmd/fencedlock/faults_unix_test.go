//go:build unix

package main

// Faults of the commands found by trying to break them: what CMD
// started, a grant answered late, a slow announcement, bad arguments, a
// service's idle expiry.

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// The lock is lost while CMD runs; CMD exits on SIGTERM, but a process
// it started ignores SIGTERM: it must get SIGKILL at -kill-after, before
// fencedlock exits.
func TestRunLostStopsWhatCMDStarted(t *testing.T) {
	e := newEnv(t)
	script := `(trap '' TERM; exec sleep 60) & echo $! > gc.pid; trap 'exit 0' TERM; echo ready > ready; while :; do sleep 0.02; done`
	p := e.start([]string{"run", "-ttl", "3s", "-kill-after", "300ms", "advgc", "--", "sh", "-c", script})
	waitUntil(t, "CMD to be ready", func() bool { return e.read("ready") == "ready\n" })
	gc, err := strconv.Atoi(strings.TrimSpace(e.read("gc.pid")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(gc, syscall.SIGKILL) })
	if err := e.b.Client.Del(context.Background(), e.b.Prefix+":{advgc}:lock").Err(); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(); code != exitFailure {
		t.Errorf("status %d, want %d; stderr %s", code, exitFailure, p.errText())
	}
	time.Sleep(time.Second) // well past -kill-after
	if !processGone(gc) {
		t.Errorf("fencedlock exited 1 (lock lost) but CMD's child %d still runs, more than -kill-after later", gc)
	}
}

// SIGTERM to fencedlock is passed on to CMD's group; CMD exits, but a
// process it started ignores SIGTERM: it must be gone (SIGKILL at
// -kill-after) before the lock is released for a next run.
func TestRunSignalStopsWhatCMDStartedBeforeRelease(t *testing.T) {
	e := newEnv(t)
	script := `(trap '' TERM; exec sleep 60) & echo $! > gc.pid; trap 'exit 0' TERM; echo ready > ready; while :; do sleep 0.02; done`
	p := e.start([]string{"run", "-kill-after", "300ms", "advsig", "--", "sh", "-c", script})
	waitUntil(t, "CMD to be ready", func() bool { return e.read("ready") == "ready\n" })
	gc, err := strconv.Atoi(strings.TrimSpace(e.read("gc.pid")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(gc, syscall.SIGKILL) })
	p.signal(syscall.SIGTERM)
	code := p.wait()
	time.Sleep(time.Second)
	if !processGone(gc) {
		t.Errorf("fencedlock exited %d and released the lock (held: %v) while CMD's child %d still runs, more than -kill-after after SIGTERM", code, e.inspect("advsig").Held, gc)
	}
}

// The grant's reply comes after -redis-timeout: fencedlock exits 69, and
// the release of the grant the lost reply carried, which goes on in the
// background, must have run before it exits.
func TestRunLateGrantIsReleasedBeforeExit(t *testing.T) {
	e := newEnv(t)
	proxy := redistest.NewProxy(t, e.b.Client.Options().Addr)
	proxy.DelayReplies(300 * time.Millisecond)
	for i, timeout := range []string{"500ms", "700ms", "1s", "1300ms", "1600ms"} {
		res := "late" + strconv.Itoa(i)
		code, _, stderr := e.runStatus([]string{"run", "-redis", "redis://" + proxy.Addr(), "-redis-timeout", timeout, "-ttl", "1m", res, "--", "touch", "ran" + res})
		time.Sleep(700 * time.Millisecond) // any release sent has long run
		info := e.inspect(res)
		t.Logf("timeout %s: status %d, held %v ttl %v; stderr: %s", timeout, code, info.Held, info.TTL, stderr)
		if code == exitUnavailable && info.Held {
			t.Errorf("-redis-timeout %s: fencedlock exited %d and the lock is held by nobody for %v more", timeout, code, info.TTL)
		}
	}
}

// A port out of range is a bad URL: status 2 before contacting Redis
// (docs/cli.md).
func TestRunPortOutOfRangeIsUsage(t *testing.T) {
	e := newBareEnv(t)
	code, _, stderr := e.runStatus([]string{"run", "-redis", "redis://127.0.0.1:99999", "-redis-timeout", "1s", "r", "--", "true"})
	if code != exitUsage {
		t.Errorf("status %d, want %d; stderr %s", code, exitUsage, stderr)
	}
}

// -leader with -wait 0 campaigns until elected, without bound: a slow
// round trip as it is elected (its announcement) is campaigned through,
// as election.Run does, not the end of the command.
func TestRunLeaderCampaignsThroughABlip(t *testing.T) {
	e := newEnv(t)
	for n := 1; n <= 4; n++ {
		res := "blip" + strconv.Itoa(n)
		held := e.hold(res)
		proxy := redistest.NewProxy(t, e.b.Client.Options().Addr)
		p := e.start([]string{"run", "-leader", "-ttl", "5s", "-redis", "redis://" + proxy.Addr() + "?read_timeout=300ms", res, "--", "touch", "ran" + res})
		waitUntil(t, "the candidate to wait", func() bool { return e.inspect(res).Waiters == 1 })
		time.Sleep(200 * time.Millisecond)
		proxy.HoldRequests(n, 600*time.Millisecond)
		if err := held.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		code := p.wait()
		t.Logf("n=%d: status %d, ran %v, stderr %s", n, code, e.fileExists("ran"+res), p.errText())
		if !e.fileExists("ran" + res) {
			t.Errorf("n=%d: the candidate gave up (status %d) instead of campaigning until elected", n, code)
		}
	}
}

// An empty CMD ("" after --) is a usage error, found before the lock is
// taken.
func TestRunEmptyCMDIsUsage(t *testing.T) {
	e := newEnv(t)
	code, _, stderr := e.runStatus([]string{"run", "starts", "--", ""})
	if code != exitUsage {
		t.Errorf("empty CMD: status %d, want %d; stderr %s", code, exitUsage, stderr)
	}
	e.noLockLeft("starts")
}

// A service whose Locker keeps counters for ever (WithIdleExpiry(0)):
// `fencedlock advance -idle-expiry 0` keeps its counter for ever too,
// where the default would make it expire after a day. An idle expiry
// the library refuses is a usage error.
func TestAdvanceKeepsTheServicesIdleExpiry(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	app := fencedlock.New(e.b.Client, fencedlock.WithPrefix(e.b.Prefix), fencedlock.WithIdleExpiry(0))
	lock, err := app.TryAcquire(ctx, "forever", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	key := e.b.Prefix + ":{forever}:token"
	if d, _ := e.b.Client.PTTL(ctx, key).Result(); d != -1 {
		t.Fatalf("counter PTTL %v before advance, want none", d)
	}
	floor := lock.Token() + 1_000_000
	if code, _, stderr := e.runStatus([]string{"advance", "-idle-expiry", "0", "forever", floor.String()}); code != 0 {
		t.Fatalf("advance: %d %s", code, stderr)
	}
	if d, _ := e.b.Client.PTTL(ctx, key).Result(); d != -1 {
		t.Errorf("after fencedlock advance -idle-expiry 0, the counter expires in %v", d)
	}
	if code, _, stderr := e.runStatus([]string{"advance", "-idle-expiry", "10ms", "forever", (floor + 1).String()}); code != exitUsage {
		t.Errorf("-idle-expiry 10ms: status %d, want %d; stderr %s", code, exitUsage, stderr)
	}
}

// A signal while the grant's reply is late (before -redis-timeout): the
// release of the grant the reply may carry runs before fencedlock exits.
func TestRunSignalDuringALateGrantReleasesItBeforeExit(t *testing.T) {
	e := newEnv(t)
	proxy := redistest.NewProxy(t, e.b.Client.Options().Addr)
	proxy.DelayReplies(250 * time.Millisecond)
	for i, ms := range []int{1000, 1030, 1060, 1090, 1120, 1150, 1180} {
		res := "sig" + strconv.Itoa(i)
		p := e.start([]string{"run", "-redis", "redis://" + proxy.Addr(), "-redis-timeout", "10s", "-ttl", "1m", res, "--", "touch", "ran" + res})
		time.Sleep(time.Duration(ms) * time.Millisecond)
		_ = p.cmd.Process.Signal(syscall.SIGINT)
		code := p.wait()
		if info := e.inspect(res); code == 130 && info.Held {
			t.Errorf("SIGINT after %dms: fencedlock exited %d and the lock is held by nobody for %v more", ms, code, info.TTL)
		}
	}
}

// -leader campaigns through what may pass (Redis not reached, too slow),
// not through an error reply that stays until an operator acts: a wrong
// password exits 69 at once, even with -wait 0 (no bound).
func TestRunLeaderWithAWrongPasswordExits(t *testing.T) {
	s := redistest.Start(t)
	if err := s.Client(t).ConfigSet(context.Background(), "requirepass", "secret").Err(); err != nil {
		t.Fatal(err)
	}
	e := newBareEnv(t)
	e.url = "redis://:wrong@" + s.Addr
	start := time.Now()
	p := e.start([]string{"run", "-leader", "rr", "--", "true"})
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.signal(syscall.SIGKILL)
		p.wait()
		t.Fatalf("still campaigning 10s after a wrong password; stderr %s", p.errText())
	}
	if code := p.wait(); code != exitUnavailable {
		t.Errorf("status %d after %v, want %d; stderr %s", code, time.Since(start).Round(time.Millisecond), exitUnavailable, p.errText())
	}
}

// fencedlock's stderr is a pipe nobody reads any more (a log pipe whose
// reader died, "2>&1 | head"). The lock is lost while CMD runs: the line
// saying so cannot be written, but fencedlock must still stop CMD and
// what it started, and exit 1, rather than be killed by SIGPIPE, leaving
// them to run without the lock.
func TestRunStderrClosedPipeStillStopsCMD(t *testing.T) {
	e := newEnv(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close() // a write to w now raises SIGPIPE
	// CMD's stderr goes to a file: sh reports its sleep ended by SIGTERM
	// there, which the broken pipe would make its own SIGPIPE.
	script := `exec 2> sh.err; (trap '' TERM; exec sleep 60) & echo $! > gc.pid; trap 'echo TERM > got; exit 0' TERM; echo ready > ready; while :; do sleep 0.02; done`
	cmd := exec.Command(bin, "run", "-prefix", e.b.Prefix, "-ttl", "3s", "-kill-after", "300ms", "epipe", "--", "sh", "-c", script)
	cmd.Stderr = w
	p := e.launch(cmd)
	w.Close()
	waitUntil(t, "CMD to be ready", func() bool { return e.read("ready") == "ready\n" })
	gc, err := strconv.Atoi(strings.TrimSpace(e.read("gc.pid")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(gc, syscall.SIGKILL) })
	if err := e.b.Client.Del(context.Background(), e.b.Prefix+":{epipe}:lock").Err(); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(); code != exitFailure {
		t.Errorf("status %d, want %d", code, exitFailure)
	}
	if got := e.read("got"); got != "TERM\n" {
		t.Errorf("CMD's trap wrote %q; want TERM", got)
	}
	time.Sleep(time.Second) // well past -kill-after
	if !processGone(gc) {
		t.Errorf("CMD's child %d still runs after fencedlock exited with the lock lost", gc)
	}
}
