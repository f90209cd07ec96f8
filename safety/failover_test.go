package safety

import (
	"context"
	"fmt"
	"math/rand"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock/internal/redistest"
)

// The failover fault: two redis-servers, a master and a replica that
// replicates through a proxy. The nemesis cuts the replication link, lets
// clients take locks on the master alone (the replica misses those
// grants' INCRs and lock keys), promotes the replica and moves the
// clients to it. Holders granted on the old master still believe they
// hold their locks and write; the new master's grants must carry higher
// tokens (the counter is raised to the clock when it lags), so the store
// refuses the old holders. Then the old master is made a replica of the
// new one, through the proxy, and once it has caught up the same happens
// the other way.

// failoverRig is the two servers and their proxies. The test goroutine
// drives it; the clients only read keys through it (epoch, read).
type failoverRig struct {
	servers [2]*redistest.Server
	admin   [2]*redis.Client // direct clients, for REPLICAOF and INFO
	clients *redistest.Proxy // the lock clients' way to the current master
	repl    *redistest.Proxy // the replica's way to the current master

	// mu guards master and gen. A promotion and the move of the clients
	// happen under it, so a reader that finds gen unchanged since a lock
	// call knows that call's commands all ran on master.
	mu     sync.RWMutex
	master int    // index of the current master
	gen    uint64 // promotions so far
}

// epoch returns the count of promotions so far: see keyReader.
func (f *failoverRig) epoch() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.gen
}

// read reads key on the current master, or skips it when a promotion
// happened since epoch: the grant may have run on the old master.
func (f *failoverRig) read(ctx context.Context, key string, epoch uint64) (string, keyRead, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.gen != epoch {
		return "", keySkipped, nil
	}
	return getKey(ctx, f.admin[f.master], key)
}

func newFailoverRig(t *testing.T) *failoverRig {
	t.Helper()
	f := &failoverRig{}
	for i := range f.servers {
		// No delay before a diskless full sync: the default waits 5s for
		// more replicas to come.
		f.servers[i] = redistest.Start(t, "--repl-diskless-sync-delay", "0")
		f.admin[i] = redis.NewClient(&redis.Options{
			Addr: f.servers[i].Addr, DialTimeout: redisTimeout, ReadTimeout: redisTimeout, WriteTimeout: redisTimeout,
		})
		c := f.admin[i]
		t.Cleanup(func() { c.Close() })
	}
	f.clients = redistest.NewProxy(t, f.servers[0].Addr)
	f.repl = redistest.NewProxy(t, f.servers[0].Addr)
	if err := f.replicaOf(1); err != nil {
		t.Fatal(err)
	}
	if err := f.waitInSync(); err != nil {
		t.Fatal(err)
	}
	return f
}

// replicaOf makes server i a replica of the current master, through the
// replication proxy.
func (f *failoverRig) replicaOf(i int) error {
	host, port, err := net.SplitHostPort(f.repl.Addr())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return f.admin[i].Do(ctx, "REPLICAOF", host, port).Err()
}

// step is one failover: cut, let the master run alone for a while,
// promote the replica, move the clients, and make the old master a
// replica of the new one. It reports whether the promoted replica had
// lost grants: a token counter below the old master's, compared when
// neither could change (the replica cut off before its promotion, the old
// master cut off from the clients after).
func (f *failoverRig) step(rng *rand.Rand, ttl time.Duration) (lost bool, err error) {
	old, next := f.master, 1-f.master

	// The replica falls behind: grants on the master are not replicated.
	f.repl.Pause()
	time.Sleep(ttl + time.Duration(100+rng.Intn(400))*time.Millisecond)

	// Promotion, and the clients move over; their connections to the old
	// master are closed.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	newCounters, err := tokenCounters(ctx, f.admin[next])
	if err != nil {
		return false, fmt.Errorf("reading the replica's counters: %w", err)
	}
	f.mu.Lock()
	f.gen++
	if err := f.admin[next].Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		f.mu.Unlock()
		return false, fmt.Errorf("promoting %s: %w", f.servers[next].Addr, err)
	}
	f.clients.Retarget(f.servers[next].Addr)
	f.master = next
	f.mu.Unlock()
	oldCounters, err := tokenCounters(ctx, f.admin[old])
	if err != nil {
		return false, fmt.Errorf("reading the old master's counters: %w", err)
	}
	for key, v := range oldCounters {
		if newCounters[key] < v {
			lost = true
		}
	}

	// The old master goes on alone for a moment (nobody reaches it), then
	// follows the new one and drops what it had.
	time.Sleep(time.Duration(100+rng.Intn(300)) * time.Millisecond)
	f.repl.Retarget(f.servers[next].Addr)
	f.repl.Resume()
	if err := f.replicaOf(old); err != nil {
		return lost, fmt.Errorf("making %s a replica: %w", f.servers[old].Addr, err)
	}
	return lost, f.waitInSync()
}

// tokenCounters returns the token counters a server holds, by key.
func tokenCounters(ctx context.Context, c *redis.Client) (map[string]int64, error) {
	keys, err := c.Keys(ctx, tokenKeys).Result()
	if err != nil || len(keys) == 0 {
		return map[string]int64{}, err
	}
	vals, err := c.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(keys))
	for i, v := range vals {
		if s, ok := v.(string); ok {
			out[keys[i]], _ = strconv.ParseInt(s, 10, 64)
		}
	}
	return out, nil
}

// waitInSync waits until the replica's link to the master is up and the
// replica has applied everything the master had sent when the wait began.
// (The clients keep writing, so the offsets need not ever be equal.)
func (f *failoverRig) waitInSync() error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return redistest.WaitInSync(ctx, f.admin[f.master], f.admin[1-f.master])
}
