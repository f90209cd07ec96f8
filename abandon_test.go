package fencedlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// Acquire requests that reach Redis after their caller gave up on them:
// the abandon marker left by the cleanup makes them lock nothing.

// awaitProxyAnswered waits until the server has answered the n requests the
// proxy held (HoldRequests): they have arrived and run.
func awaitProxyAnswered(t *testing.T, p *redistest.Proxy, n int) {
	t.Helper()
	pollUntil(5*time.Second, func() bool { return p.Answered() >= n })
	require.Equal(t, n, p.Answered(), "the held requests were not answered (%d released)", p.Released())
}

// An acquire request held up in the network reaches Redis only after its
// client gave up on it (its context ended): the cleanup found no grant and
// marked the attempt abandoned, and the late request must lock nothing.
func TestAbandonedAttemptArrivingLateIsRefused(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l := newLocker(b)
		for _, ac := range acquireCalls {
			ac := ac
			t.Run(ac.name, func(t *testing.T) {
				res := "late-" + ac.name
				p := redistest.NewProxy(t, b.Client.Options().Addr)
				// The context's deadline bounds each read: the client gives
				// up when it ends, and does not send the request again.
				c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
				t.Cleanup(func() { c.Close() })
				fl := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix))
				warmProxiedClient(t, ctx, fl, c, p, 2)
				before := grantAndRelease(t, ctx, l, res)

				const hold, wait = 400 * time.Millisecond, 100 * time.Millisecond
				p.HoldRequests(1, hold)
				actx, cancel := context.WithTimeout(ctx, wait)
				defer cancel()
				start := time.Now()
				lock, err := ac.call(actx, fl, res)
				took := time.Since(start)
				assert.Nil(t, lock)
				require.Error(t, err)
				assert.ErrorIs(t, err, context.DeadlineExceeded)
				assert.ErrorIs(t, err, fencedlock.ErrUnavailable)
				assert.NotErrorIs(t, err, fencedlock.ErrNotAcquired)
				awaitCleanupAfterCtxEnd(t, err, func() bool { return len(abandonMarkers(t, b, l, res)) == 1 })
				require.Zero(t, p.Released(), "the held request arrived before the client gave up (after %v)", took)
				assert.Less(t, took, hold)

				// The cleanup found no grant: it marked the attempt.
				assert.False(t, keyExists(t, b, l.LockKey(res)))
				require.Len(t, abandonMarkers(t, b, l, res), 1, "the cleanup left no marker")

				// The request arrives and runs: it must lock nothing.
				awaitProxyAnswered(t, p, 1)
				assert.False(t, keyExists(t, b, l.LockKey(res)), "the request that arrived after its client gave up locked the resource")
				markers := abandonMarkers(t, b, l, res)
				require.Len(t, markers, 1)
				pttl, err := b.Client.PTTL(ctx, markers[0]).Result()
				require.NoError(t, err)
				assert.Greater(t, pttl, longTTL, "the marker must outlive the lock the attempt asked for")
				counter, _ := getKey(t, b, l.TokenKey(res))
				assert.Equal(t, before.String(), counter, "the refused request raised the counter")

				// The resource is free for others.
				assert.Greater(t, grantAndRelease(t, ctx, l, res), before)
			})
		}
	})
}

// go-redis sends a command again when its reply has not come within
// ReadTimeout (here 100ms, MaxRetries 1). When the first copy of an acquire
// is held up in the network, the second one can be answered while the
// first is still on its way. Once TryAcquire has returned without a lock,
// the first copy arriving late must not lock the resource, just as an
// attempt without any reply must not (TestAbandonedAttemptArrivingLateIsRefused).
func TestFirstCopyOfAResentAcquireArrivingLateIsRefused(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l := newLocker(b)
		const hold = 400 * time.Millisecond
		proxied := func(t *testing.T) (*fencedlock.Locker, *redistest.Proxy) {
			t.Helper()
			p := redistest.NewProxy(t, b.Client.Options().Addr)
			c := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 100 * time.Millisecond, MaxRetries: 1})
			t.Cleanup(func() { c.Close() })
			fl := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix))
			// The second copy goes out on the second warm connection.
			warmProxiedClient(t, ctx, fl, c, p, 2)
			return fl, p
		}

		// The second copy is granted and its reply lost: the cleanup
		// deletes its grant. Then the first copy arrives.
		t.Run("second copy granted, its reply lost", func(t *testing.T) {
			const res = "resent-granted"
			fl, p := proxied(t)
			p.HoldRequests(1, hold)
			p.DropReplies(1)
			lock, err := fl.TryAcquire(ctx, res, longTTL)
			assert.Nil(t, lock)
			require.Error(t, err)
			require.Equal(t, 1, p.Dropped(), "the second copy's reply was not dropped")
			require.Zero(t, p.Released(), "the first copy arrived before TryAcquire returned")
			assert.NotContains(t, strings.ToLower(err.Error()), "releas", "the cleanup failed")
			assert.False(t, keyExists(t, b, l.LockKey(res)), "the cleanup left the second copy's grant")

			awaitProxyAnswered(t, p, 1)
			v, locked := getKey(t, b, l.LockKey(res))
			assert.False(t, locked, "the first copy of the acquire, arriving after TryAcquire returned an error, "+
				"locked the resource (lock key %q, TTL %v): the cleanup deleted the second copy's grant but left no marker",
				v, b.Client.PTTL(ctx, l.LockKey(res)).Val())
		})

		// The second copy finds the lock held and TryAcquire reports
		// ErrNotAcquired. The holder releases; then the first copy arrives.
		// Not covered yet (see TryAcquire's doc): marking every refused
		// attempt would cost a write per refusal. This reproduces the case
		// for the work that closes it.
		t.Run("second copy refused", func(t *testing.T) {
			t.Skip("known gap, documented on Locker.TryAcquire: a refused copy sets no marker, so a delayed first copy can lock the resource for one TTL (liveness only)")
			const res = "resent-refused"
			fl, p := proxied(t)
			holder := mustTryAcquire(t, ctx, l, res, longTTL)
			p.HoldRequests(1, hold)
			lock, err := fl.TryAcquire(ctx, res, longTTL)
			assert.Nil(t, lock)
			require.ErrorIs(t, err, fencedlock.ErrNotAcquired)
			require.Zero(t, p.Released(), "the first copy arrived before TryAcquire returned")
			require.NoError(t, holder.Release(ctx))

			awaitProxyAnswered(t, p, 1)
			v, locked := getKey(t, b, l.LockKey(res))
			assert.False(t, locked, "the first copy of the acquire, arriving after TryAcquire returned ErrNotAcquired, "+
				"locked the resource (lock key %q, TTL %v): nothing marked the attempt over", v, b.Client.PTTL(ctx, l.LockKey(res)).Val())
		})
	})
}
