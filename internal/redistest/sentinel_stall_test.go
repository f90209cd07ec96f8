//go:build unix

package redistest

import (
	"context"
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
	for _, sn := range s.Sentinels {
		signalProcess(t, sn, syscall.SIGSTOP)
	}
	time.Sleep(3 * time.Second)
	for _, sn := range s.Sentinels {
		signalProcess(t, sn, syscall.SIGCONT)
	}
	// Each Sentinel notices the stall at its next timer tick.
	for i, c := range s.sentinels {
		for {
			cmd := redis.NewStringCmd(ctx, "INFO", "sentinel")
			if err := c.Process(ctx, cmd); err != nil {
				t.Fatalf("INFO sentinel on %s: %v", s.Sentinels[i].Addr, err)
			}
			if strings.Contains(cmd.Val(), "sentinel_tilt:1") {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("Sentinel %s did not enter TILT after the stall", s.Sentinels[i].Addr)
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
