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

// A waiter rides out an outage while its ctx lasts: Redis is killed
// with SIGKILL and started again, empty, seconds later, and the waiter
// gets the lock from the new server with a token above the lost
// holder's, whatever its retry delays.
func TestAcquireRidesOutARestart(t *testing.T) {
	for _, c := range []struct {
		name string
		down time.Duration
		opts []fencedlock.AcquireOption
	}{
		{"2s down", 2 * time.Second, nil},
		{"4s down", 4 * time.Second, nil},
		{"2s down, short retry delays", 2 * time.Second, []fencedlock.AcquireOption{fencedlock.WithRetryDelay(2*time.Millisecond, 100*time.Millisecond)}},
		{"4s down, short retry delays", 4 * time.Second, []fencedlock.AcquireOption{fencedlock.WithRetryDelay(2*time.Millisecond, 100*time.Millisecond)}},
	} {
		c := c
		t.Run(c.name, func(t *testing.T) {
			srv := redistest.Start(t)
			ctx := testCtx(t)
			holders, waiters := fencedlock.New(srv.Client(t)), fencedlock.New(srv.Client(t))
			holder := mustTryAcquire(t, ctx, holders, "r", longTTL)
			wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			done := acquireAsync(wctx, waiters, "r", 5*time.Second, c.opts...)
			waitUntil(t, func() bool { return waiters.WaiterRefused("r") }, "the waiter to queue")

			srv.Kill()
			time.Sleep(c.down)
			srv.Restart(t)
			restarted := time.Now()
			w := awaitAcquired(t, done)
			t.Logf("%s: the waiter got the lock %v after the restart", c.name, time.Since(restarted).Round(time.Millisecond))
			assert.Greater(t, w.Token(), holder.Token(), "the counter is seeded from the clock again")
			require.NoError(t, w.Release(ctx))
		})
	}
}

// Once its ctx ends during an outage, Acquire returns ErrUnavailable with
// the last backend error and ctx's, and speaks of a grant a lost reply
// may have carried only when its last request got no answer: not for a
// connection refused by a client that sends each command once (one that
// resends may have sent a copy first), nor when Redis last said another
// owner held it.
func TestAcquireEndingInAnOutageSaysWhy(t *testing.T) {
	redistest.ClientSide(t)
	srv := redistest.Start(t)
	ctx := testCtx(t)
	once := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { once.Close() })
	holders, waiters := fencedlock.New(srv.Client(t)), fencedlock.New(once)
	mustTryAcquire(t, ctx, holders, "r", longTTL)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	done := acquireAsync(wctx, waiters, "r", longTTL, fencedlock.WithRetryDelay(2*time.Millisecond, 100*time.Millisecond))
	waitUntil(t, func() bool { return waiters.WaiterRefused("r") }, "the waiter to queue")
	srv.Kill()
	r := <-done
	require.Error(t, r.err)
	requireUnavailable(t, r.err, "Acquire")
	assert.ErrorIs(t, r.err, context.DeadlineExceeded)
	assert.Contains(t, r.err.Error(), "refused", "the last backend error")
	assert.NotContains(t, r.err.Error(), "the grant the lost reply may have carried")
}

// TryAcquire stays one attempt: an error that means "not now" is
// returned at once.
func TestTryAcquireDoesNotRideOut(t *testing.T) {
	srv := redistest.Start(t)
	ctx := testCtx(t)
	c := srv.Client(t)
	l := fencedlock.New(c)
	require.NoError(t, c.Do(ctx, "REPLICAOF", "127.0.0.1", "1").Err())
	t.Cleanup(func() { c.Do(context.Background(), "REPLICAOF", "NO", "ONE") })
	start := time.Now()
	_, err := l.TryAcquire(ctx, "r", longTTL)
	requireUnavailable(t, err, "TryAcquire")
	assert.Contains(t, err.Error(), "READONLY")
	assert.Less(t, time.Since(start), time.Second)
}

// A waiter rides out error replies that mean "not now": here READONLY,
// while its Redis is a replica for a while, as during a failover.
func TestAcquireRidesOutReadOnly(t *testing.T) {
	srv := redistest.Start(t)
	ctx := testCtx(t)
	admin := srv.Client(t)
	holders, waiters := fencedlock.New(admin), fencedlock.New(srv.Client(t))
	holder := mustTryAcquire(t, ctx, holders, "r", longTTL)
	done := acquireAsync(ctx, waiters, "r", longTTL, fencedlock.WithRetryDelay(2*time.Millisecond, 50*time.Millisecond))
	waitUntil(t, func() bool { return waiters.WaiterRefused("r") }, "the waiter to queue")
	require.NoError(t, admin.Do(ctx, "REPLICAOF", "127.0.0.1", "1").Err())
	time.Sleep(300 * time.Millisecond) // several attempts get READONLY
	requireStillWaiting(t, done)
	require.NoError(t, admin.Do(ctx, "REPLICAOF", "NO", "ONE").Err())
	// A replica that gave up its master kept its data: the holder's lock
	// is still there. Its release hands the lock on.
	require.NoError(t, holder.Release(ctx))
	w := awaitAcquired(t, done)
	require.NoError(t, w.Release(ctx))
}
