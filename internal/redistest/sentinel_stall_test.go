//go:build unix

package redistest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A stall of the whole machine (every Sentinel's timer more than 2s late,
// as on a loaded test run) puts the Sentinels in TILT. With the helper's
// tilt-period they act again within a second, and the master's loss right
// after the stall is repaired in seconds, not after TILT's default 30s.
func TestSentinelPromotesSoonAfterAStall(t *testing.T) {
	s := StartSentinel(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := s.sentinels[0].Process(ctx, redis.NewCmd(ctx, "SENTINEL", "DEBUG"))
	if err != nil && strings.Contains(strings.ToLower(err.Error()), "unknown") {
		t.Skip("no SENTINEL DEBUG on this server (Redis 6.2 and older): TILT lasts its default 30s")
	}
	t.Cleanup(func() {
		// Should the test stop early: the Sentinels must not stay stopped.
		for _, sn := range s.Sentinels {
			sn.mu.Lock()
			if sn.cmd != nil {
				_ = sn.cmd.Process.Signal(syscall.SIGCONT)
			}
			sn.mu.Unlock()
		}
	})
	for _, sn := range s.Sentinels {
		signalProcess(t, sn, syscall.SIGSTOP)
	}
	time.Sleep(3 * time.Second)
	for _, sn := range s.Sentinels {
		signalProcess(t, sn, syscall.SIGCONT)
	}
	// Each Sentinel notices the stall at its next timer tick, and logs it
	// (read from the log: with tilt-period 1s, a slow poll of INFO could
	// miss TILT altogether).
	for _, sn := range s.Sentinels {
		for !strings.Contains(readLog(t, sn), "+tilt") {
			if ctx.Err() != nil {
				t.Fatalf("Sentinel %s did not enter TILT after the stall:\n%s", sn.Addr, sn.logTail())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	old := s.KillMaster(t)
	start := time.Now()
	pctx, pcancel := context.WithTimeout(ctx, 15*time.Second)
	defer pcancel()
	promoted, err := s.WaitPromotion(pctx, old)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s promoted %v after the master's loss", promoted.Addr, time.Since(start).Round(time.Millisecond))
}

// readLog returns srv's log file.
func readLog(t *testing.T, srv *Server) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(srv.dir, "redis.log"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

// signalProcess sends sig to srv's process.
func signalProcess(t *testing.T, srv *Server, sig syscall.Signal) {
	t.Helper()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.cmd == nil {
		t.Fatalf("redistest: %s is not running", srv.Addr)
	}
	if err := srv.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("redistest: signal %v to %s: %v", sig, srv.Addr, err)
	}
}
