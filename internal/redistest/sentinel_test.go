package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The Sentinels promote a replica when the master is killed, and again
// after the killed server rejoined as a replica. A write the replicas
// confirmed survives the failover; one made after CutReplication does
// not.
func TestSentinelFailsOverTwice(t *testing.T) {
	start := time.Now()
	s := StartSentinel(t)
	t.Logf("started in %v", time.Since(start))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for round, cut := range []bool{false, true} {
		begin := time.Now()
		m, err := s.Master(ctx)
		if err != nil {
			t.Fatal(err)
		}
		mc := s.client(m)
		confirmed, unconfirmed := fmt.Sprint("confirmed-", round), fmt.Sprint("unconfirmed-", round)
		if err := mc.Set(ctx, confirmed, round, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if n, err := mc.Wait(ctx, 2, 5*time.Second).Result(); err != nil || n != 2 {
			t.Fatalf("WAIT: %d replicas, %v", n, err)
		}
		if cut {
			if err := s.CutReplication(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := mc.Set(ctx, unconfirmed, round, 0).Err(); err != nil {
			t.Fatal(err)
		}
		old := s.KillMaster(t)
		if err := s.RestoreReplication(ctx); err != nil {
			t.Fatal(err)
		}
		promoted, err := s.WaitPromotion(ctx, old)
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(begin)
		pc := s.client(promoted)
		if v, err := pc.Get(ctx, confirmed).Int(); err != nil || v != round {
			t.Errorf("the promoted replica has %s=%d (%v), want %d", confirmed, v, err, round)
		}
		// Without a cut the last write reaches the replicas too, most
		// likely, but nothing waited for it.
		if _, err := pc.Get(ctx, unconfirmed).Result(); cut && !errors.Is(err, redis.Nil) {
			t.Errorf("the promoted replica has %s, written after the cut (%v)", unconfirmed, err)
		}
		s.Rejoin(t, old)
		info, err := Info(ctx, s.client(old), "replication")
		if _, port, _ := net.SplitHostPort(promoted.Addr); err != nil || info["role"] != "slave" || info["master_port"] != port {
			t.Errorf("the rejoined server is not a replica of %s: %v (%v)", promoted.Addr, info, err)
		}
		t.Logf("round %d (cut %v): %s killed, %s promoted after %v, the killed server rejoined after %v", round, cut, old.Addr, promoted.Addr, took, time.Since(begin))
	}
}
