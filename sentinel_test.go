package fencedlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// snHolderTTL is the TTL of the holder whose master is killed: it runs
// out soon after a failover, so that a lock the promoted replica kept
// ends without a release. It outlasts a failover (about 2 seconds, 3 on
// servers before Redis 7), so that the waiter whose timer is capped by the
// holder's TTL meets the failover only through its subscription.
const snHolderTTL = 5 * time.Second

// snClient returns a client that finds the master of s through its
// Sentinels and follows a failover, as an application's would; it is
// closed when t ends.
func snClient(t *testing.T, s *redistest.Sentinel) *redis.Client {
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.Name, SentinelAddrs: s.SentinelAddrs()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// snCounter returns the token counter of resource on srv, "" when it has
// none.
func snCounter(t *testing.T, ctx context.Context, srv *redistest.Server, l *fencedlock.Locker, resource string) string {
	t.Helper()
	v, err := srv.Client(t).Get(ctx, l.TokenKey(resource)).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	require.NoError(t, err)
	return v
}

// snAwaitQueued waits until the one waiter of l for resource is queued
// in Redis and subscribed, and has made the attempt that follows the
// subscription's confirmation: from then on it asks Redis only when woken.
func snAwaitQueued(t *testing.T, ctx context.Context, s *redistest.Sentinel, l *fencedlock.Locker, resource string) {
	t.Helper()
	m, err := s.Master(ctx)
	require.NoError(t, err)
	mc := m.Client(t)
	waitUntil(t, func() bool {
		return l.WaiterRefused(resource) && channelSubscribers(t, mc, l, resource) == 1
	}, "the waiter to queue and subscribe")
	time.Sleep(50 * time.Millisecond)
}

// A real failover under Sentinel, through go-redis's failover client: A
// holds the lock and has written, a waiter W of another client is queued
// behind it, and the master is killed with SIGKILL. Once the Sentinels
// have promoted a replica, W gets the lock within a bounded time, with a
// token above every earlier grant's, and A's late write is refused.
//
// Without WithReplicas, the replicas are cut off just before A's grant,
// as a master's last writes before it dies may never reach them: the
// promoted replica has neither A's lock nor W's place in the queue, and
// its counter lags behind A's token. W's grant raises it to the server
// clock. With WithReplicas(1), A's grant waits for a replica, and the
// promoted replica has it: W gets the lock when A's TTL runs out.
//
// W survives the failover whether or not its attempts fall in it: woken
// by its subscription with its fallback timer set past the failover, or
// asking every 100 ms at most, riding out the refused connections and
// READONLY replies until a master answers.
func TestSentinelFailover(t *testing.T) {
	t.Run("failovers", func(t *testing.T) {
		t.Run("replicas cut off", func(t *testing.T) {
			t.Parallel()
			snFailover(t, false)
		})
		t.Run("WithReplicas", func(t *testing.T) {
			t.Parallel()
			snFailover(t, true)
		})
		t.Run("waiter asking through the failover", func(t *testing.T) {
			t.Parallel()
			snFailover(t, false, fencedlock.WithRetryDelay(2*time.Millisecond, 100*time.Millisecond))
		})
	})
	// The subtests have closed their clients: nothing of the Lockers, nor
	// of go-redis's subscriptions to the Sentinels, may be left.
	requireNoGoroutinesLeft(t)
}

// snFailover runs the failover; waitOpts are the waiter's, by default
// hourRetryDelay.
func snFailover(t *testing.T, withReplicas bool, waitOpts ...fencedlock.AcquireOption) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := redistest.StartSentinel(t)
	var opts []fencedlock.Option
	if withReplicas {
		opts = append(opts, fencedlock.WithReplicas(1, 2*time.Second))
	}
	la := fencedlock.New(snClient(t, s), opts...)
	wc := snClient(t, s)
	if len(waitOpts) > 0 {
		// Without go-redis's own retries, which would hide the
		// failover from the waiter's attempts.
		wc = redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.Name, SentinelAddrs: s.SentinelAddrs(), MaxRetries: -1})
		t.Cleanup(func() { _ = wc.Close() })
	}
	lw := fencedlock.New(wc, opts...)
	const res = "sentinel"
	var earlier []fencedlock.Token
	for i := 0; i < 3; i++ {
		earlier = append(earlier, grantAndRelease(t, ctx, la, res))
	}
	if !withReplicas {
		require.NoError(t, s.CutReplication(ctx))
	}

	a := mustTryAcquire(t, ctx, la, res, snHolderTTL)
	earlier = append(earlier, a.Token())
	store := fencedlock.NewMemoryStore()
	require.NoError(t, store.Put(ctx, res, a.Token(), []byte("A")))
	// W waits with its fallback timer out of the way (capped by A's TTL):
	// it asks Redis again when its subscription is confirmed, which it is
	// again once its client has reconnected to the new master.
	if len(waitOpts) == 0 {
		waitOpts = []fencedlock.AcquireOption{hourRetryDelay}
	}
	done := acquireAsync(ctx, lw, res, longTTL, waitOpts...)
	snAwaitQueued(t, ctx, s, lw, res)

	killed := s.KillMaster(t)
	require.NoError(t, s.RestoreReplication(ctx))
	// The replicas hold now what a promotion will find.
	counters := map[*redistest.Server]string{}
	for _, srv := range s.Servers {
		if srv != killed {
			counters[srv] = snCounter(t, ctx, srv, la, res)
		}
	}
	killedAt := time.Now()
	promoted, err := s.WaitPromotion(ctx, killed)
	require.NoError(t, err)
	promotedAt := time.Now()
	if withReplicas {
		require.Equal(t, a.Token().String(), counters[promoted], "WithReplicas: the promoted replica must hold A's grant")
	} else {
		require.Equal(t, earlier[len(earlier)-2].String(), counters[promoted], "the promoted replica must have missed A's grant, and nothing before it")
	}

	w := awaitAcquired(t, done)
	t.Logf("master %s killed; %s promoted after %v; W granted %v later; tokens: earlier %v, W %d",
		killed.Addr, promoted.Addr, promotedAt.Sub(killedAt).Round(time.Millisecond), time.Since(promotedAt).Round(time.Millisecond), earlier, w.Token())
	for _, e := range earlier {
		require.Greater(t, w.Token(), e, "the first grant after the failover must be above every earlier one")
	}
	require.NoError(t, store.Put(ctx, res, w.Token(), []byte("W")))
	requireStale(t, store.Put(ctx, res, a.Token(), []byte("A, late")), res, a.Token(), w.Token())
	requireValue(t, ctx, store, res, "W", w.Token())
	require.ErrorIs(t, a.Release(ctx), fencedlock.ErrLockLost)
	require.NoError(t, w.Release(ctx))
	require.Greater(t, grantAndRelease(t, ctx, la, res), w.Token())
}
