package fencedlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// Hand-overs across a failover between servers of different versions:
// one with sharded pub/sub (Redis 7 and later) and one without it (Redis
// 6 and before; here a Redis 7 whose SSUBSCRIBE, SPUBLISH and PUBSUB are
// renamed away, which answers as Redis 6 does). A Locker learns the kind
// of pub/sub once; Lockers that started before the failover and after it
// know different kinds, and each must still hear the other's hand-overs
// by pub/sub, not by its fallback timer (an hour away here).
func TestHandOversAcrossAFailoverToAnotherVersion(t *testing.T) {
	withSharded := redistest.Start(t)
	sharded, err := redistest.ShardedPubSub(context.Background(), withSharded.Client(t))
	require.NoError(t, err)
	if !sharded {
		t.Skip("the server has no sharded pub/sub (Redis before 7): nothing to switch between")
	}
	without := redistest.Start(t, "--rename-command", "SSUBSCRIBE", "", "--rename-command", "SPUBLISH", "", "--rename-command", "PUBSUB", "")

	// handOver makes holders hold resource, waiters wait for it, and
	// returns how long after the release the waiter got the lock.
	handOver := func(t *testing.T, holders, waiters *fencedlock.Locker, resource string) time.Duration {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		defer cancel()
		holder := mustTryAcquire(t, ctx, holders, resource, longTTL)
		done := acquireAsync(ctx, waiters, resource, longTTL, hourRetryDelay)
		waitUntil(t, func() bool { return waiters.WaiterRefused(resource) }, "the waiter to queue")
		time.Sleep(100 * time.Millisecond) // its subscription settles
		released := time.Now()
		require.NoError(t, holder.Release(ctx))
		lock := awaitAcquired(t, done)
		took := time.Since(released)
		require.NoError(t, lock.Release(ctx))
		return took
	}
	proxied := func(t *testing.T, p *redistest.Proxy) *fencedlock.Locker {
		c := redis.NewClient(&redis.Options{Addr: p.Addr()})
		t.Cleanup(func() { c.Close() })
		return fencedlock.New(c)
	}

	t.Run("to a server without sharded pub/sub", func(t *testing.T) {
		p := redistest.NewProxy(t, withSharded.Addr)
		before := proxied(t, p) // learns sharded
		took := handOver(t, fencedlock.New(withSharded.Client(t)), before, "down")
		require.Less(t, took, time.Second, "before the failover")
		p.Retarget(without.Addr)
		after := fencedlock.New(without.Client(t))
		took = handOver(t, after, before, "down")
		assert.Less(t, took, 3*time.Second, "a waiter subscribed with SSUBSCRIBE before the failover")
		took = handOver(t, before, after, "down")
		assert.Less(t, took, time.Second, "a release by a Locker that learnt sharded pub/sub before the failover")
	})

	t.Run("to a server with sharded pub/sub", func(t *testing.T) {
		p := redistest.NewProxy(t, without.Addr)
		before := proxied(t, p) // learns classic
		took := handOver(t, fencedlock.New(without.Client(t)), before, "up")
		require.Less(t, took, time.Second, "before the failover")
		p.Retarget(withSharded.Addr)
		after := fencedlock.New(withSharded.Client(t)) // learns sharded
		took = handOver(t, after, before, "up")
		assert.Less(t, took, time.Second, "a waiter subscribed with SUBSCRIBE, a release by a Locker that did not learn")
		took = handOver(t, before, after, "up")
		assert.Less(t, took, time.Second, "a waiter subscribed with SSUBSCRIBE, a release by a Locker that learnt classic pub/sub")
		took = handOver(t, after, before, "up")
		assert.Less(t, took, time.Second, "a waiter subscribed with SUBSCRIBE, a release by a Locker that learnt sharded pub/sub")
	})
	requireNoGoroutinesLeftWithin(t, 5*time.Second)
}
