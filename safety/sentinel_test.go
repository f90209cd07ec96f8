package safety

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock/internal/redistest"
)

// The kill-master fault: a master, two replicas and three Sentinels
// (redistest.Sentinel), the lock clients on go-redis's failover client,
// which finds the master through the Sentinels. The nemesis kills the
// master with SIGKILL; the Sentinels promote a replica and the clients
// follow. Every other time, the first included, the replicas are cut off
// for a moment first, so that the master's last grants never reach them:
// the promoted replica's counters lag, and its grants must still carry
// higher tokens (the counter is raised to the clock). Holders granted on
// the killed master still believe they hold their locks and write. Then
// the killed server rejoins, empty, as a replica of the new master, so
// that the next round can fail over again.

// sentinelRig is the deployment and what the nemesis knows of it. The
// test goroutine drives it; the clients only read keys through it (epoch,
// read).
type sentinelRig struct {
	s     *redistest.Sentinel
	admin map[*redistest.Server]*redis.Client // direct clients, for counters and checker D

	// mu guards master and gen. A kill and a promotion each change gen,
	// so a reader that finds gen unchanged since a lock call knows that
	// the call's commands all ran on master, which was up throughout.
	mu     sync.RWMutex
	master *redistest.Server // nil from a kill to the promotion
	gen    uint64

	steps int // failovers begun; the test goroutine's own
}

func newSentinelRig(t *testing.T, admin func(addr string) *redis.Client) *sentinelRig {
	t.Helper()
	r := &sentinelRig{s: redistest.StartSentinel(t), admin: map[*redistest.Server]*redis.Client{}}
	for _, srv := range r.s.Servers {
		r.admin[srv] = admin(srv.Addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := r.s.Master(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r.master = m
	return r
}

// epoch returns the count of kills and promotions so far: see keyReader.
func (r *sentinelRig) epoch() uint64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.gen
}

// read reads key on the master, or skips it when a kill or a promotion
// happened since epoch: the grant may have run on the killed master.
func (r *sentinelRig) read(ctx context.Context, key string, epoch uint64) (string, keyRead, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.gen != epoch || r.master == nil {
		return "", keySkipped, nil
	}
	return getKey(ctx, r.admin[r.master], key)
}

// Bounds of the moment the master runs alone, its replicas cut off,
// before it is killed.
const (
	sentinelCutMin = 50 * time.Millisecond
	sentinelCutMax = 300 * time.Millisecond
)

// step is one failover: the replicas cut off for a moment (every other
// step, the first included), the master killed, a replica promoted by the Sentinels, the killed server
// back as a replica. It reports whether the replicas were cut off, and
// whether the promoted replica had lost grants: a token counter below the
// one the master held just before it was killed (compared when neither
// could change: the master read last, the replica once it had noticed the
// kill).
func (r *sentinelRig) step(t *testing.T, rng *rand.Rand) (cut, lost bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	r.mu.RLock()
	m := r.master
	r.mu.RUnlock()
	r.steps++
	if cut = r.steps%2 == 1; cut {
		if err := r.s.CutReplication(ctx); err != nil {
			_ = r.s.RestoreReplication(ctx)
			return cut, false, fmt.Errorf("cutting the replicas off: %w", err)
		}
		time.Sleep(sentinelCutMin + time.Duration(rng.Int63n(int64(sentinelCutMax-sentinelCutMin))))
	}
	before, err := tokenCounters(ctx, r.admin[m])
	if err != nil {
		return cut, false, fmt.Errorf("reading the master's counters: %w", err)
	}
	r.mu.Lock()
	r.gen++
	r.master = nil
	r.mu.Unlock()
	killed := r.s.KillMaster(t)
	if err := r.s.RestoreReplication(ctx); err != nil {
		return cut, false, fmt.Errorf("restoring replication: %w", err)
	}
	after := map[*redistest.Server]map[string]int64{}
	for _, srv := range r.s.Servers {
		if srv == killed {
			continue
		}
		if after[srv], err = tokenCounters(ctx, r.admin[srv]); err != nil {
			return cut, false, fmt.Errorf("reading the counters of replica %s: %w", srv.Addr, err)
		}
	}
	promoted, err := r.s.WaitPromotion(ctx, killed)
	if err != nil {
		return cut, false, err
	}
	r.mu.Lock()
	r.gen++
	r.master = promoted
	r.mu.Unlock()
	for key, v := range before {
		if after[promoted][key] < v {
			lost = true
		}
	}
	r.s.Rejoin(t, killed)
	return cut, lost, nil
}
