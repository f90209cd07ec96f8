//go:build unix

package main

import (
	"context"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/internal/redistest"
)

// untilTerm is a sh script that writes "ready", then runs until SIGTERM,
// which makes it write "TERM" to the file got and exit 0. Its stderr,
// where sh reports its sleep ended by the signal too, goes to a file.
const untilTerm = `exec 2> sh.err; trap 'echo TERM > got; exit 0' TERM; echo ready > ready; while :; do sleep 0.02; done`

// A run keeps its lock while CMD runs four times its TTL, whether it
// tried once (TryAcquire, refreshed by fencedlock's keeper) or waited
// (Acquire's heartbeat): the token never changes, nothing is said, the
// status is CMD's 0, and the lock is released.
func TestRunKeepsTheLock(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags []string
	}{
		{"tried once", nil},
		{"waited", []string{"-wait", "5s"}},
	} {
		tc := tc
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // it waits for four TTLs
			e := newEnv(t)
			const ttl = 500 * time.Millisecond
			args := append(append([]string{"run", "-ttl", ttl.String()}, tc.flags...), "kept", "--", "sh", "-c", "echo $FENCEDLOCK_TOKEN > token; sleep 2; echo > done")
			p := e.start(args)
			waitUntil(t, "CMD to start", func() bool { return e.read("token") != "" })
			granted := e.inspect("kept")
			for !e.fileExists("done") {
				// Inspected before CMD ended, which is before the release.
				if info := e.inspect("kept"); !e.fileExists("done") && (!info.Held || info.Token != granted.Token) {
					t.Fatalf("while CMD runs: %+v; want held with token %d", info, granted.Token)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if code := p.wait(); code != 0 {
				t.Errorf("status %d, want 0; stderr: %s", code, p.errText())
			}
			if stderr := p.errText(); stderr != "" {
				t.Errorf("stderr %q; want nothing", stderr)
			}
			e.noLockLeft("kept")
		})
	}
}

// A lock whose key is deleted while CMD runs (as a flush or a failover
// would) is found lost by the next refresh, well before its TTL: CMD
// gets SIGTERM, and fencedlock exits 1 saying why.
func TestRunLockDeletedStopsCMD(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags []string
	}{
		{"tried once", nil},
		{"waited", []string{"-wait", "5s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			const ttl = 3 * time.Second
			args := append(append([]string{"run", "-ttl", ttl.String()}, tc.flags...), "deleted", "--", "sh", "-c", untilTerm)
			p := e.start(args)
			waitUntil(t, "CMD to be ready", func() bool { return e.read("ready") == "ready\n" })
			if err := e.b.Client.Del(context.Background(), e.b.Prefix+":{deleted}:lock").Err(); err != nil {
				t.Fatal(err)
			}
			deleted := time.Now()
			if code := p.wait(); code != exitFailure {
				t.Errorf("status %d, want %d; stderr: %s", code, exitFailure, p.errText())
			}
			// The next refresh comes within a third of the TTL; the lease
			// would run out, by fencedlock's clock, only after more than
			// half of it.
			if took := time.Since(deleted); took >= ttl/2 {
				t.Errorf("the loss was found %v after the key was deleted: not by a refresh", took)
			}
			oneLine(t, p.errText(), "lock lost", `"deleted"`, "refresh found the lock gone", "stopping CMD: SIGTERM")
			if got := e.read("got"); got != "TERM\n" {
				t.Errorf("CMD's trap wrote %q; want TERM", got)
			}
			e.noLockLeft("deleted")
		})
	}
}

// A run whose Redis stops answering loses its lock by its own clock
// before the TTL Redis keeps it for runs out: CMD gets SIGTERM, and
// fencedlock exits 1 saying no refresh succeeded.
func TestRunRedisSilentLosesTheLock(t *testing.T) {
	t.Parallel() // it waits for a TTL
	e := newEnv(t)
	proxy := redistest.NewProxy(t, e.b.Client.Options().Addr)
	const ttl = time.Second
	p := e.start([]string{"run", "-redis", "redis://" + proxy.Addr(), "-ttl", ttl.String(), "silent", "--", "sh", "-c", untilTerm})
	waitUntil(t, "CMD to be ready", func() bool { return e.read("ready") == "ready\n" })
	proxy.Pause()
	if code := p.wait(); code != exitFailure {
		t.Errorf("status %d, want %d; stderr: %s", code, exitFailure, p.errText())
	}
	oneLine(t, p.errText(), "lock lost", `"silent"`, "no refresh succeeded within the TTL of 1s", "stopping CMD: SIGTERM")
	if got := e.read("got"); got != "TERM\n" {
		t.Errorf("CMD's trap wrote %q; want TERM", got)
	}
	// The proxy stays paused, so that no refresh it holds reaches Redis:
	// the key expires by its TTL.
	waitUntil(t, "the lock key to expire", func() bool {
		n, err := e.b.Client.Exists(context.Background(), e.b.Prefix+":{silent}:lock").Result()
		return err == nil && n == 0
	})
	e.noLockLeft("silent")
}
