//go:build unix

package main

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/election"
)

// waitForFile is a sh script that appends "TOKEN RESOURCE" to the file
// tokens, then waits until the file named by its first argument exists.
const waitForFile = `echo "$FENCEDLOCK_TOKEN $FENCEDLOCK_RESOURCE" >> tokens; while [ ! -e "$1" ]; do sleep 0.02; done`

// tokenLines parses the lines of the file tokens: a token and a
// resource each.
func tokenLines(t *testing.T, e *env) []fencedlock.Token {
	t.Helper()
	var tokens []fencedlock.Token
	for _, line := range strings.Split(strings.TrimSpace(e.read("tokens")), "\n") {
		token, resource, _ := strings.Cut(line, " ")
		tok, err := fencedlock.ParseToken(token)
		if err != nil {
			t.Fatalf("CMD's token: %v (line %q)", err, line)
		}
		if resource != "report" {
			t.Errorf("CMD's %s = %q; want %q", envResource, resource, "report")
		}
		tokens = append(tokens, tok)
	}
	return tokens
}

func lineCount(e *env, name string) int { return strings.Count(e.read(name), "\n") }

// A second run waits while the first runs its CMD, then runs its own
// with a higher token; both exit 0 and leave no lock behind.
func TestRunWaitsAndTokensRise(t *testing.T) {
	e := newEnv(t)
	first := e.start([]string{"run", "-ttl", "5s", "report", "--", "sh", "-c", waitForFile, "sh", "go1"})
	waitUntil(t, "the first CMD to start", func() bool { return lineCount(e, "tokens") == 1 })
	second := e.start([]string{"run", "-ttl", "5s", "-wait", "20s", "report", "--", "sh", "-c", waitForFile, "sh", "go2"})
	waitUntil(t, "the second run to wait in the queue", func() bool { return e.inspect("report").Waiters == 1 })
	if n := lineCount(e, "tokens"); n != 1 {
		t.Fatalf("the second CMD started while the first held the lock (%d tokens)", n)
	}
	e.touch("go1")
	if code := first.wait(); code != 0 {
		t.Fatalf("first run: status %d; stderr: %s", code, first.errText())
	}
	waitUntil(t, "the second CMD to start", func() bool { return lineCount(e, "tokens") == 2 })
	e.touch("go2")
	if code := second.wait(); code != 0 {
		t.Fatalf("second run: status %d; stderr: %s", code, second.errText())
	}
	tokens := tokenLines(t, e)
	if len(tokens) != 2 || tokens[1] <= tokens[0] {
		t.Errorf("tokens %v: want two, rising", tokens)
	}
	e.noLockLeft("report")
}

// The exit statuses of run: CMD's own, 75 when the lock is held (at once,
// or after -wait), 69 when Redis cannot be reached, 127 and 126 when CMD
// cannot start, 128+n when a signal ended CMD. No lock is left behind,
// and a lock held by another owner stays held.
func TestRunExitStatus(t *testing.T) {
	t.Parallel() // it waits, mostly: for Redis, or for a lock to expire
	e := newEnv(t)
	held := e.hold("held")
	for _, tc := range []struct {
		name     string
		args     []string
		want     int
		says     string // in stderr, "" for nothing on stderr
		resource string
	}{
		{"CMD's status", []string{"run", "own", "--", "sh", "-c", "exit 3"}, 3, "", "own"},
		{"CMD succeeds", []string{"run", "own", "--", "true"}, 0, "", "own"},
		// One attempt, not a wait: it would last the hour.
		{"held", []string{"run", "-redis-timeout", "1h", "held", "--", "touch", "ran"}, exitHeld, "lock not acquired", "held"},
		{"held past -wait", []string{"run", "-wait", "300ms", "held", "--", "touch", "ran"}, exitHeld, "gave up after -wait 300ms", "held"},
		{"Redis unreachable", []string{"run", "-redis", "redis://" + closedAddr(t), "own", "--", "touch", "ran"}, exitUnavailable, "backend unavailable", "own"},
		{"Redis unreachable with -wait", []string{"run", "-wait", "2s", "-redis", "redis://" + closedAddr(t), "own", "--", "touch", "ran"}, exitUnavailable, "backend unavailable", "own"},
		{"CMD not found", []string{"run", "own", "--", "./no-such-command"}, exitNotFound, "starting CMD", "own"},
		{"CMD not executable", []string{"run", "own", "--", "./not-executable"}, exitCannotRun, "starting CMD", "own"},
		{"CMD killed by a signal", []string{"run", "own", "--", "sh", "-c", "kill -TERM $$"}, exitSignal + 15, "", "own"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.touch("not-executable")
			code, _, stderr := e.runStatus(tc.args)
			if code != tc.want {
				t.Errorf("status %d, want %d; stderr: %s", code, tc.want, stderr)
			}
			if tc.says == "" {
				if stderr != "" {
					t.Errorf("stderr: %q; want nothing", stderr)
				}
			} else {
				oneLine(t, stderr, tc.says)
			}
			if e.fileExists("ran") {
				t.Errorf("CMD ran")
			}
			if tc.resource == "held" {
				if info := e.inspect("held"); info.Token != held.Token() || info.Waiters != 0 {
					t.Errorf("the holder's lock changed: %+v, want token %d and no waiters", info, held.Token())
				}
				return
			}
			e.noLockLeft(tc.resource)
		})
	}
}

// A lock found gone only by the release after CMD exited (its key
// deleted, as a flush or a failover would, between two heartbeats) is
// reported as lost: exit 1, whatever CMD's status.
func TestRunLockGoneWhenCMDExits(t *testing.T) {
	e := newEnv(t)
	p := e.start([]string{"run", "-ttl", "1m", "gone", "--", "sh", "-c", waitForFile, "sh", "go"})
	waitUntil(t, "CMD to start", func() bool { return lineCount(e, "tokens") == 1 })
	if err := e.b.Client.Del(context.Background(), e.b.Prefix+":{gone}:lock").Err(); err != nil {
		t.Fatal(err)
	}
	e.touch("go")
	if code := p.wait(); code != exitFailure {
		t.Errorf("status %d, want %d", code, exitFailure)
	}
	oneLine(t, p.errText(), "lost before CMD exited with status 0", "lock lost", `"gone"`)
	e.noLockLeft("gone")
}

// With -leader, CMD runs as the leader of the election named RESOURCE,
// with the term's token; a second candidate campaigns until the first
// CMD exits, then leads with a higher token. A campaign bounded by -wait
// that is not elected exits 75.
func TestRunLeader(t *testing.T) {
	e := newEnv(t)
	first := e.start([]string{"run", "-leader", "-ttl", "5s", "report", "--", "sh", "-c", waitForFile, "sh", "go1"})
	waitUntil(t, "the first leader's CMD", func() bool { return lineCount(e, "tokens") == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	leader, err := election.New(e.locker, "report").Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(leader.Value, ":"+strconv.Itoa(first.cmd.Process.Pid)) {
		t.Errorf("the leader's value is %q; want HOST:%d", leader.Value, first.cmd.Process.Pid)
	}
	code, _, stderr := e.runStatus([]string{"run", "-leader", "-wait", "300ms", "report", "--", "touch", "ran"})
	if code != exitHeld || e.fileExists("ran") {
		t.Errorf("a campaign bounded by -wait: status %d, want %d; stderr: %s", code, exitHeld, stderr)
	}
	second := e.start([]string{"run", "-leader", "-ttl", "5s", "report", "--", "sh", "-c", waitForFile, "sh", "go2"})
	waitUntil(t, "the second candidate to campaign", func() bool { return e.inspect("report").Waiters == 1 })
	e.touch("go1")
	if code := first.wait(); code != 0 {
		t.Fatalf("first leader: status %d; stderr: %s", code, first.errText())
	}
	waitUntil(t, "the second leader's CMD", func() bool { return lineCount(e, "tokens") == 2 })
	e.touch("go2")
	if code := second.wait(); code != 0 {
		t.Fatalf("second leader: status %d; stderr: %s", code, second.errText())
	}
	tokens := tokenLines(t, e)
	if len(tokens) != 2 || tokens[0] != leader.Token || tokens[1] <= tokens[0] {
		t.Errorf("tokens %v: want two, rising, the first the term's %d", tokens, leader.Token)
	}
	e.noLockLeft("report")
}

// Signals to fencedlock reach CMD and the processes it started; CMD's
// status is fencedlock's; a CMD that ignores SIGTERM gets SIGKILL after
// -kill-after; a signal while waiting stops the wait. No lock is left.
func TestRunSignals(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags []string
		trap  string // the script's trap, before it starts a child and waits
		sig   syscall.Signal
		want  int
		got   string // what the trap wrote to the file got
	}{
		{"SIGTERM", nil, `trap 'echo TERM > got; exit 7' TERM`, syscall.SIGTERM, 7, "TERM\n"},
		{"SIGINT", nil, `trap 'echo INT > got; kill $child; exit 5' INT`, syscall.SIGINT, 5, "INT\n"},
		{"SIGHUP", nil, `trap 'echo HUP > got; exit 6' HUP`, syscall.SIGHUP, 6, "HUP\n"},
		{"CMD killed by the signal", nil, ``, syscall.SIGTERM, exitSignal + 15, ""},
		{"SIGKILL after -kill-after", []string{"-kill-after", "300ms"}, `trap '' TERM`, syscall.SIGTERM, exitSignal + 9, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			script := tc.trap + "\n" + `sleep 60 & child=$!; echo $child > child.pid; echo ready > ready; wait`
			p := e.start(append(append([]string{"run"}, tc.flags...), "sig", "--", "sh", "-c", script))
			waitUntil(t, "CMD to be ready", func() bool { return e.read("ready") == "ready\n" })
			child, err := strconv.Atoi(strings.TrimSpace(e.read("child.pid")))
			if err != nil {
				t.Fatal(err)
			}
			sent := time.Now()
			p.signal(tc.sig)
			if code := p.wait(); code != tc.want {
				t.Errorf("status %d, want %d; stderr: %s", code, tc.want, p.errText())
			}
			if got := e.read("got"); got != tc.got {
				t.Errorf("the trap wrote %q, want %q", got, tc.got)
			}
			// The child gets the signal too (sh starts it with SIGINT
			// ignored, so the SIGINT trap kills it).
			waitUntil(t, "CMD's child to stop", func() bool { return processGone(child) })
			if tc.want == exitSignal+9 && time.Since(sent) < 300*time.Millisecond {
				t.Errorf("SIGKILL came %v after SIGTERM, before -kill-after", time.Since(sent))
			}
			e.noLockLeft("sig")
		})
	}

	t.Run("while waiting", func(t *testing.T) {
		e := newEnv(t)
		held := e.hold("busy")
		p := e.start([]string{"run", "-wait", "1h", "busy", "--", "touch", "ran"})
		waitUntil(t, "the run to wait in the queue", func() bool { return e.inspect("busy").Waiters == 1 })
		p.signal(syscall.SIGTERM)
		if code := p.wait(); code != exitSignal+15 {
			t.Errorf("status %d, want %d", code, exitSignal+15)
		}
		oneLine(t, p.errText(), "SIGTERM while waiting")
		if info := e.inspect("busy"); info.Token != held.Token() || info.Waiters != 0 || e.fileExists("ran") {
			t.Errorf("after the interrupted wait: %+v, CMD ran: %v; want the holder's token %d, no waiter", info, e.fileExists("ran"), held.Token())
		}
	})
}
