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

// Hand-overs: the release that hands the lock to the first waiter and
// wakes it, waiters that give up as the lock is handed to them, releases
// that must hand nothing over, and waiters that get only the grants
// Redis made.

// A waiter is woken by the release that hands it the lock, within
// milliseconds, without polling: in the same Locker (the release's reply
// carries the grant, and the waiter sends no attempt at all) and in
// another one (the grant is published on the waiter's Locker's channel).
func TestWaiterWakesOnRelease(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		for _, sameLocker := range []bool{true, false} {
			name := "another Locker"
			if sameLocker {
				name = "same Locker"
			}
			sameLocker := sameLocker
			t.Run(name, func(t *testing.T) {
				ctx := testCtx(t)
				holderLocker := newLocker(b)
				counter := &acquireAttemptCounter{tokenKey: holderLocker.TokenKey("wake")}
				c := redis.NewClient(&redis.Options{Addr: b.Client.Options().Addr})
				c.AddHook(counter)
				t.Cleanup(func() { c.Close() })
				waiterLocker := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix))
				if sameLocker {
					holderLocker = waiterLocker
				}
				holder := mustTryAcquire(t, ctx, holderLocker, "wake", longTTL)
				before := counter.count()
				done := acquireAsync(ctx, waiterLocker, "wake", longTTL, hourRetryDelay)
				if sameLocker {
					waitUntil(t, func() bool { return waiterLocker.WaiterHeldBack("wake") }, "the waiter to wait for the release")
					assert.Zero(t, queuedCount(t, b, waiterLocker, "wake"), "the waiter queued in Redis")
				} else {
					waitUntil(t, func() bool {
						return queuedCount(t, b, waiterLocker, "wake") == 1 && grantSubscribers(t, b, waiterLocker, "wake") == 1
					}, "the waiter to queue and subscribe")
					assert.Zero(t, grantSubscribers(t, b, holderLocker, "wake"), "the holder's Locker subscribed")
				}
				requireStillWaiting(t, done)

				released := time.Now()
				require.NoError(t, holder.Release(ctx))
				lock := awaitAcquired(t, done)
				woke := time.Since(released)
				t.Logf("woken %v after the release", woke)
				assert.Less(t, woke, 100*time.Millisecond, "the waiter was not woken by the release")
				assert.Greater(t, lock.Token(), holder.Token())
				v, _ := getKey(t, b, waiterLocker.LockKey("wake"))
				assert.True(t, strings.HasSuffix(v, ":"+lock.Token().String()), "lock key %q is not the waiter's grant", v)
				assert.Zero(t, queuedCount(t, b, waiterLocker, "wake"))
				if sameLocker {
					// The release handed it the lock in its reply.
					assert.Zero(t, counter.count()-before, "the waiter sent attempts")
				} else {
					// The first attempt queued it; one more once
					// subscribed; the release handed it the lock: no
					// polling.
					assert.LessOrEqual(t, counter.count()-before, 2, "the waiter polled")
				}
				left, err := lock.TTL(ctx)
				require.NoError(t, err)
				assert.Greater(t, left, longTTL-5*time.Second, "the handed-on lock did not get the waiter's TTL")
				require.NoError(t, lock.Release(ctx))
				requireNoGoroutinesLeft(t)
			})
		}
	})
}

// A waiter that gives up while the release hands it the lock passes the
// lock on: the resource is never left locked by nobody.
func TestWaiterGivingUpAsTheLockIsHandedToIt(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l, holders := newLocker(b), newLocker(b)
		got := 0
		for i := 0; i < 30; i++ {
			holder := mustTryAcquire(t, ctx, holders, "race", longTTL)
			wctx, cancel := context.WithCancel(ctx)
			done := acquireAsync(wctx, l, "race", longTTL)
			waitUntil(t, func() bool { return queuedCount(t, b, l, "race") == 1 }, "the waiter to queue")
			// The waiter gives up a little before, at, or a little after
			// the release.
			late := time.Duration(i%4) * 300 * time.Microsecond
			go func() {
				time.Sleep(late)
				cancel()
			}()
			time.Sleep(time.Duration(i%3) * 300 * time.Microsecond)
			require.NoError(t, holder.Release(ctx))
			r := <-done
			if r.err == nil {
				got++
				require.NoError(t, r.lock.Release(ctx))
			} else {
				require.ErrorIs(t, r.err, context.Canceled)
				// Leaving the queue may outlive the cancelled ctx.
				awaitCleanupAfterCtxEnd(t, r.err, func() bool {
					return !keyExists(t, b, l.LockKey("race")) && queuedCount(t, b, l, "race") == 0
				})
			}
			require.False(t, keyExists(t, b, l.LockKey("race")), "round %d: the lock stayed with a waiter that gave up", i)
			require.Zero(t, queuedCount(t, b, l, "race"), "round %d: queue entry left", i)
		}
		t.Logf("the waiter got the lock in %d of 30 rounds", got)
		requireNoGoroutinesLeft(t)
	})
}

// When the first waiter gives up while the lock is free (its holder
// crashed) and promised to it, the lock goes on to the next waiter at
// once, not when the next one's timer fires.
func TestFirstWaiterGivingUpHandsAFreeLockOn(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		first, second := newLocker(b), newLocker(b)
		mustTryAcquire(t, ctx, newLocker(b), "crashed", longTTL)
		fctx, cancel := context.WithCancel(ctx)
		defer cancel()
		firstDone := acquireAsync(fctx, first, "crashed", longTTL, hourRetryDelay)
		waitUntil(t, func() bool { return queuedCount(t, b, first, "crashed") == 1 }, "the first waiter to queue")
		secondDone := acquireAsync(ctx, second, "crashed", longTTL, hourRetryDelay)
		waitUntil(t, func() bool {
			return queuedCount(t, b, first, "crashed") == 2 && grantSubscribers(t, b, first, "crashed") == 1 && grantSubscribers(t, b, second, "crashed") == 1
		}, "the second waiter to queue and subscribe")
		time.Sleep(20 * time.Millisecond)
		// The holder crashed: its key expires (deleted here, as a real
		// Redis would at the end of the TTL). The first waiter, whose timer
		// has an hour to go, gives up.
		require.NoError(t, b.Client.Del(ctx, first.LockKey("crashed")).Err())
		cancel()
		r := <-firstDone
		require.ErrorIs(t, r.err, context.Canceled)
		left := time.Now()
		lock := awaitAcquired(t, secondDone)
		assert.Less(t, time.Since(left), 100*time.Millisecond, "the second waiter was not handed the free lock")
		require.NoError(t, lock.Release(ctx))
		requireNoGoroutinesLeft(t)
	})
}

// A holder that is not sure it still holds the lock (its TTL ran out by
// the local clock) hands nothing over: a late Release must not let the
// next waiter write with a token Redis never granted while another owner
// holds the lock.
func TestLateReleaseHandsNothingOver(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l, other := newLocker(b), newLocker(b)
		store := newRedisStore(b)
		const ttl = 100 * time.Millisecond
		stale := mustTryAcquire(t, ctx, l, "late", ttl)
		time.Sleep(ttl + 20*time.Millisecond)
		b.FastForward(t, ttl+20*time.Millisecond) // miniredis expires keys only when told
		owner := mustTryAcquire(t, ctx, other, "late", longTTL)
		require.NoError(t, store.Put(ctx, "late", owner.Token(), []byte("owner")))
		done := acquireAsync(ctx, l, "late", longTTL, hourRetryDelay)
		awaitQueued(t, b, l, "late")

		assert.ErrorIs(t, stale.Release(ctx), fencedlock.ErrLockLost)
		requireStillWaiting(t, done)
		require.NoError(t, store.Put(ctx, "late", owner.Token(), []byte("owner again")), "the owner's write was refused")
		require.NoError(t, owner.Release(ctx))
		lock := awaitAcquired(t, done)
		assert.Greater(t, lock.Token(), owner.Token())
		require.NoError(t, lock.Release(ctx))
		requireNoGoroutinesLeft(t)
	})
}

// A Release whose context is done hands nothing over and changes
// nothing; a later Release hands the lock on.
func TestReleaseWithDoneContextHandsNothingOver(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l := newLocker(b)
		holder := mustTryAcquire(t, ctx, l, "done-ctx", longTTL)
		done := acquireAsync(ctx, l, "done-ctx", longTTL, hourRetryDelay)
		waitUntil(t, func() bool { return l.WaiterHeldBack("done-ctx") }, "the waiter to wait for the release")
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		assert.ErrorIs(t, holder.Release(cancelled), context.Canceled)
		requireStillWaiting(t, done)
		assert.True(t, l.WaiterHeldBack("done-ctx"), "the waiter stopped waiting for the release")
		assert.Equal(t, holder.Token(), heldToken(t, b, l, "done-ctx"))
		require.NoError(t, holder.Release(ctx))
		lock := awaitAcquired(t, done)
		assert.Greater(t, lock.Token(), holder.Token())
		require.NoError(t, lock.Release(ctx))
		requireNoGoroutinesLeft(t)
	})
}

// heldToken returns the token the lock key of resource holds in Redis
// now, or 0 when the key is missing.
func heldToken(t *testing.T, b *redistest.Backend, l *fencedlock.Locker, resource string) fencedlock.Token {
	t.Helper()
	v, ok := getKey(t, b, l.LockKey(resource))
	if !ok {
		return 0
	}
	m := lockValuePattern.FindStringSubmatch(v)
	require.NotNil(t, m, "lock key value %q", v)
	tok, err := fencedlock.ParseToken(m[2])
	require.NoError(t, err)
	return tok
}

// An Acquire returns only a Lock that Redis granted and whose answer came
// back, even after a Release or Refresh of the holder in the same Locker
// whose outcome is unknown: its reply was delayed past its context while
// Redis handed the lock to another process's waiter.
func TestAcquireReturnsOnlyGrantedLocksAfterAnUnknownOutcome(t *testing.T) {
	for _, how := range []string{"release", "refresh"} {
		t.Run(how, func(t *testing.T) {
			b := redistest.Real(t)
			ctx := testCtx(t)
			p := redistest.NewProxy(t, b.Client.Options().Addr)
			c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			l := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix))
			x := newLocker(b)
			const res = "r"
			// Loads the scripts: a NOSCRIPT reply delayed like the others
			// would keep the release from running at all.
			warm := mustTryAcquire(t, ctx, l, "warm-up", longTTL)
			require.NoError(t, warm.Refresh(ctx, longTTL))
			require.NoError(t, warm.Release(ctx))

			holder := mustTryAcquire(t, ctx, l, res, longTTL)
			xDone := acquireAsync(ctx, x, res, longTTL, fencedlock.WithRetryDelay(5*time.Millisecond, 20*time.Millisecond))
			waitUntil(t, func() bool { return queuedCount(t, b, x, res) == 1 }, "X to queue")

			p.DelayReplies(300 * time.Millisecond)
			short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			var err error
			if how == "release" {
				err = holder.Release(short)
			} else {
				// The refresh runs in Redis and shortens the lock to 5ms:
				// it expires and X takes it, while the reply is on its way.
				err = holder.Refresh(short, 5*time.Millisecond)
			}
			cancel()
			require.Error(t, err, "the %s's reply came back in time: the proxy did not delay it", how)
			xLock := awaitAcquired(t, xDone)
			require.Equal(t, xLock.Token(), heldToken(t, b, l, res), "X holds the lock in Redis")

			// A goroutine of L waits, and the holder releases again while
			// replies are still delayed.
			lDone := acquireAsync(ctx, l, res, longTTL, hourRetryDelay)
			// Its refusal comes back, delayed.
			waitUntil(t, func() bool { return l.WaiterRefused(res) }, "L's waiter to hear its refusal")
			// and its subscription's confirmation, and its next refusal.
			time.Sleep(1500 * time.Millisecond)
			again, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			rerr := holder.Release(again)
			cancel()
			t.Logf("second release: %v; holder.Err %v", rerr, holder.Err())
			select {
			case r := <-lDone:
				held := heldToken(t, b, l, res)
				if r.err == nil {
					t.Fatalf("Acquire returned a Lock with token %d while Redis holds token %d (X's is %d)", r.lock.Token(), held, xLock.Token())
				}
				t.Logf("waiter's Acquire: %v", r.err)
				// An error is fine; the waiter is not waiting any more.
				lDone = nil
			case <-time.After(500 * time.Millisecond):
			}
			p.DelayReplies(0)
			requireNotHolding(t, holder)
			require.NoError(t, xLock.Release(ctx))
			if lDone != nil {
				lock := awaitAcquired(t, lDone)
				assert.Greater(t, lock.Token(), xLock.Token())
				assert.Equal(t, lock.Token(), heldToken(t, b, l, res), "the waiter's Lock is Redis's grant")
				require.NoError(t, lock.Release(ctx))
			}
			requireNoGoroutinesLeft(t)
		})
	}
}

// requireNotHolding checks that lock no longer claims to hold its lock
// once a call asks Redis.
func requireNotHolding(t *testing.T, lock *fencedlock.Lock) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := lock.TTL(ctx)
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "lost") || strings.Contains(err.Error(), "released"), "%v", err)
}
