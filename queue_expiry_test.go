package fencedlock_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// The queue's two keys outlive every place in them, and a queue whose
// waiters died is gone from Redis at most twice the longest place's life
// after its last attempt.
func TestQueueKeysLiveAsLongAsTheirPlaces(t *testing.T) {
	b := redistest.Real(t)
	ctx := testCtx(t)
	p := redistest.NewProxy(t, b.Client.Options().Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { c.Close() })
	dying, other := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix)), newLocker(b)
	const res = "queue-expiry"
	holder := mustTryAcquire(t, ctx, other, res, longTTL)
	queue, deadlines := queueKeys(other, res)

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	const ttl = 600 * time.Millisecond // a place of about 600ms
	done := acquireAsync(wctx, dying, res, ttl)
	waitUntil(t, func() bool { return queuedCount(t, b, other, res) == 1 }, "the waiter to queue")

	// Every enqueue: each key lives at least as long as the place
	// (its deadline from now) and at most twice the place's life.
	var life time.Duration
	for i := 0; i < 5; i++ {
		entries, err := b.Client.HGetAll(ctx, deadlines).Result()
		require.NoError(t, err)
		require.Len(t, entries, 1)
		now := time.Duration(serverMicros(t, b)) * time.Microsecond
		for entry, d := range entries {
			ms, err := strconv.ParseInt(d, 10, 64)
			require.NoError(t, err)
			left := time.Duration(ms)*time.Millisecond - now
			life = max(life, left)
			for _, k := range []string{queue, deadlines} {
				pttl := keyPTTL(t, b, k)
				assert.GreaterOrEqual(t, pttl, left-time.Millisecond, "%s expires before the place of %s", k, entry)
				assert.LessOrEqual(t, pttl, 2*ttl, "%s lives longer than twice a place's life", k)
			}
		}
		time.Sleep(ttl / 5) // the waiter renews its place every third of its life
	}

	// The waiter's process stops: nothing renews its place any more.
	// (The lock stays held: a release would hand it to the waiter and
	// empty the queue.)
	p.Pause()
	stopped := time.Now()
	waitUntil(t, func() bool { return !keyExists(t, b, queue) && !keyExists(t, b, deadlines) }, "the queue's keys to expire")
	gone := time.Since(stopped)
	t.Logf("a place of %v; the queue's keys were gone %v after its waiter stopped", life.Round(time.Millisecond), gone.Round(time.Millisecond))
	assert.Less(t, gone, 2*ttl+500*time.Millisecond)
	require.NoError(t, holder.Release(ctx))
	cancel()
	p.Resume()
	if r := <-done; r.err == nil {
		require.NoError(t, r.lock.Release(ctx))
	}
}
