package fencedlock_test

// The release that hands the lock straight to a waiter of its own Locker,
// or puts that waiter at the back of the Redis queue: its waiter sends no
// attempt while its Locker holds the lock, Lockers take turns, and what a
// release gave a waiter that left in the meantime, or whose reply was
// lost, is not left behind.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
	"github.com/fencedlock/fencedlock/observe"
)

// A waiter of the Locker that holds the lock goes to the back of the Redis
// queue when the release hands the lock to another Locker's waiter queued
// there: Lockers take turns, and the waiter sent no attempt before the
// release queued it.
func TestLockersTakeTurns(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		const res = "turns"
		counter := &acquireAttemptCounter{tokenKey: newLocker(b).TokenKey(res)}
		c := redis.NewClient(&redis.Options{Addr: b.Client.Options().Addr})
		c.AddHook(counter)
		t.Cleanup(func() { c.Close() })
		l, m := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix)), newLocker(b)

		holder := mustTryAcquire(t, ctx, l, res, longTTL)
		before := counter.count()
		other := acquireAsync(ctx, m, res, longTTL, hourRetryDelay)
		waitUntil(t, func() bool { return queuedCount(t, b, m, res) == 1 && grantSubscribers(t, b, m, res) == 1 }, "the other Locker's waiter to queue")
		mine := acquireAsync(ctx, l, res, longTTL, hourRetryDelay)
		waitUntil(t, func() bool { return l.WaiterHeldBack(res) }, "the holder's Locker's waiter to wait for the release")
		assert.Equal(t, before, counter.count(), "the waiter of the holder's Locker sent an attempt")

		require.NoError(t, holder.Release(ctx))
		first := awaitAcquired(t, other)
		assert.Greater(t, first.Token(), holder.Token())
		assert.Equal(t, int64(1), queuedCount(t, b, l, res), "the release did not queue its Locker's waiter")
		requireStillWaiting(t, mine)

		require.NoError(t, first.Release(ctx))
		second := awaitAcquired(t, mine)
		assert.Greater(t, second.Token(), first.Token())
		assert.Zero(t, queuedCount(t, b, l, res))
		// Queued by the release, it renewed its place once its
		// subscription was confirmed, at most: no polling.
		assert.LessOrEqual(t, counter.count()-before, 1, "the queued waiter polled")
		require.NoError(t, second.Release(ctx))
		requireNoGoroutinesLeft(t)
	})
}

// A waiter that gives up while its Locker's release is on its way does
// not keep what the release gave it: the lock it was handed is released,
// its place in the queue taken back, and nothing stays in Redis.
func TestWaiterThatLeavesDuringItsLockersRelease(t *testing.T) {
	for _, queued := range []bool{false, true} {
		name := "handed the lock"
		if queued {
			name = "queued behind another Locker's waiter"
		}
		t.Run(name, func(t *testing.T) {
			b := redistest.Real(t)
			ctx := testCtx(t)
			const res = "leaves"
			p := redistest.NewProxy(t, b.Client.Options().Addr)
			c := redis.NewClient(&redis.Options{Addr: p.Addr()})
			t.Cleanup(func() { c.Close() })
			l := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix))
			holder := mustTryAcquire(t, ctx, l, res, longTTL)
			var other <-chan acquireResult
			if queued {
				m := newLocker(b)
				other = acquireAsync(ctx, m, res, longTTL, hourRetryDelay)
				waitUntil(t, func() bool { return queuedCount(t, b, m, res) == 1 }, "the other Locker's waiter to queue")
			}
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			mine := acquireAsync(wctx, l, res, longTTL, hourRetryDelay)
			waitUntil(t, func() bool { return l.WaiterHeldBack(res) }, "the waiter to wait for the release")

			p.DelayReplies(300 * time.Millisecond)
			released := make(chan error, 1)
			go func() { released <- holder.Release(ctx) }()
			time.Sleep(100 * time.Millisecond) // the release has run in Redis; its reply is on its way
			cancel()
			r := <-mine
			require.ErrorIs(t, r.err, fencedlock.ErrNotAcquired)
			require.ErrorIs(t, r.err, context.Canceled)
			require.NoError(t, <-released)
			p.DelayReplies(0)

			if queued {
				lock := awaitAcquired(t, other)
				assert.Greater(t, lock.Token(), holder.Token())
				waitUntil(t, func() bool { return queuedCount(t, b, l, res) == 0 }, "the place of the waiter that left to be taken back")
				require.NoError(t, lock.Release(ctx))
			} else {
				waitUntil(t, func() bool { return !keyExists(t, b, l.LockKey(res)) }, "the lock handed to the waiter that left to be released")
			}
			assert.Zero(t, queuedCount(t, b, l, res))
			assert.Equal(t, []string{l.TokenKey(res)}, testKeys(t, b), "keys left in Redis but the token counter")
			requireNoGoroutinesLeft(t)
		})
	}
}

// A waiter whose Locker's release lost its reply asks Redis at once: the
// release may have handed it the lock, which its attempt then returns.
func TestWaiterAfterItsLockersReleaseLostItsReply(t *testing.T) {
	b := redistest.Real(t)
	ctx := testCtx(t)
	const res = "unsure"
	p := redistest.NewProxy(t, b.Client.Options().Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { c.Close() })
	l := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix))
	holder := mustTryAcquire(t, ctx, l, res, longTTL)
	mine := acquireAsync(ctx, l, res, longTTL, hourRetryDelay)
	waitUntil(t, func() bool { return l.WaiterHeldBack(res) }, "the waiter to wait for the release")

	p.DelayReplies(200 * time.Millisecond)
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	err := holder.Release(short)
	cancel()
	require.ErrorIs(t, err, fencedlock.ErrUnavailable, "the release's reply came back in time")
	lock := awaitAcquired(t, mine)
	p.DelayReplies(0)
	assert.Greater(t, lock.Token(), holder.Token())
	assert.Equal(t, lock.Token(), heldToken(t, b, l, res), "the waiter's Lock is not Redis's grant")
	require.NoError(t, lock.Release(ctx))
	requireNoGoroutinesLeft(t)
}

// A Lock left to run out without a Release holds back none of its
// Locker's waiters once it has run out: not even after another Lock of
// the Locker, taken in the meantime, was released.
func TestHoldBackForgetsALockLeftToRunOut(t *testing.T) {
	b := redistest.Real(t)
	ctx := testCtx(t)
	const res = "left-to-run-out"
	l := newLocker(b)
	mustTryAcquire(t, ctx, l, res, 50*time.Millisecond) // never released
	time.Sleep(100 * time.Millisecond)
	second := mustTryAcquire(t, ctx, l, res, longTTL)
	require.NoError(t, second.Release(ctx))

	// The lock is free: an Acquire gets it at once.
	actx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	start := time.Now()
	lock, err := l.Acquire(actx, res, longTTL, hourRetryDelay)
	require.NoError(t, err, "a free lock was not acquired within %v", time.Since(start))
	assert.Less(t, time.Since(start), 200*time.Millisecond)
	require.NoError(t, lock.Release(ctx))
}

// A release held up in the network reaches Redis only after its
// candidate left and the cleanup of what the release might have given it
// has run: it must give the waiter that left nothing, neither the lock
// nor a place in the queue.
func TestReleaseArrivingAfterItsCandidateLeftGivesItNothing(t *testing.T) {
	for _, queued := range []bool{false, true} {
		name := "handed the lock"
		if queued {
			name = "queued behind another Locker's waiter"
		}
		t.Run(name, func(t *testing.T) {
			b := redistest.Real(t)
			ctx := testCtx(t)
			const res = "late-release"
			p := redistest.NewProxy(t, b.Client.Options().Addr)
			c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			l := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix))
			warmProxiedClient(t, ctx, l, c, p, 2)
			holder := mustTryAcquire(t, ctx, l, res, longTTL)
			var other <-chan acquireResult
			m := newLocker(b)
			if queued {
				other = acquireAsync(ctx, m, res, longTTL, hourRetryDelay)
				waitUntil(t, func() bool { return queuedCount(t, b, m, res) == 1 }, "the other Locker's waiter to queue")
			}
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			mine := acquireAsync(wctx, l, res, longTTL, hourRetryDelay)
			waitUntil(t, func() bool { return l.WaiterHeldBack(res) }, "the waiter to wait for the release")

			const hold = 400 * time.Millisecond
			p.HoldRequests(1, hold)
			rctx, rcancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer rcancel()
			released := make(chan error, 1)
			go func() { released <- holder.Release(rctx) }()
			time.Sleep(30 * time.Millisecond) // the release is held up, its candidate promised to it
			cancel()
			r := <-mine
			require.ErrorIs(t, r.err, context.Canceled)
			require.ErrorIs(t, <-released, fencedlock.ErrUnavailable)
			require.Zero(t, p.Released(), "the held release arrived before its client gave up")
			awaitProxyAnswered(t, p, 1)

			if queued {
				lock := awaitAcquired(t, other)
				assert.Greater(t, lock.Token(), holder.Token())
				require.NoError(t, lock.Release(ctx))
			}
			// Nobody holds the lock and nobody waits: it is free at once.
			assert.False(t, keyExists(t, b, l.LockKey(res)), "the release that arrived late gave the lock to the waiter that left")
			assert.Zero(t, queuedCount(t, b, l, res), "the release that arrived late queued the waiter that left")
			lock, err := m.TryAcquire(ctx, res, longTTL)
			require.NoError(t, err)
			require.NoError(t, lock.Release(ctx))
			requireNoGoroutinesLeft(t)
		})
	}
}

// A release whose reply was lost, held up in the network until after its
// candidate asked Redis and was queued behind it, hands the lock to that
// candidate when it arrives: the candidate hears of it at once, not by
// its timer.
func TestCandidateQueuedBeforeItsLockersLateReleaseHearsOfTheGrant(t *testing.T) {
	b := redistest.Real(t)
	ctx := testCtx(t)
	const res = "late-release-queued"
	p := redistest.NewProxy(t, b.Client.Options().Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	l := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix))
	warmProxiedClient(t, ctx, l, c, p, 3)
	holder := mustTryAcquire(t, ctx, l, res, longTTL)
	mine := acquireAsync(ctx, l, res, longTTL, hourRetryDelay)
	waitUntil(t, func() bool { return l.WaiterHeldBack(res) }, "the waiter to wait for the release")

	const hold = 500 * time.Millisecond
	p.HoldRequests(1, hold)
	rctx, rcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer rcancel()
	require.ErrorIs(t, holder.Release(rctx), fencedlock.ErrUnavailable)
	// The waiter asked Redis, was refused (the release has not run) and
	// queued, and subscribed.
	waitUntil(t, func() bool { return queuedCount(t, b, l, res) == 1 && grantSubscribers(t, b, l, res) == 1 }, "the waiter to queue and subscribe")
	require.Zero(t, p.Released(), "the held release arrived before the waiter queued")
	awaitProxyAnswered(t, p, 1)
	arrived := time.Now()

	select {
	case r := <-mine:
		require.NoError(t, r.err)
		assert.Less(t, time.Since(arrived), 200*time.Millisecond)
		assert.Greater(t, r.lock.Token(), holder.Token())
		require.NoError(t, r.lock.Release(ctx))
	case <-time.After(2 * time.Second):
		t.Fatalf("the waiter did not hear of the grant the late release made (lock key %q)", keySnapshot(t, b, l.LockKey(res)))
	}
	requireNoGoroutinesLeft(t)
}

type gateKey struct{}

// A second waiter of a Locker becomes its first when the first gives up,
// and its Locker's release hands it the lock before its goroutine has
// started to wait (an observer holds it there, as a preemption might);
// then its ctx ends. Its wait ends, and the lock it was given goes on or
// is released: it is not left with nobody for its TTL.
func TestSecondWaiterStoppedAfterItsLockersReleaseGaveItTheLock(t *testing.T) {
	b := redistest.Real(t)
	ctx := testCtx(t)
	for i := 0; i < 10; i++ {
		res := fmt.Sprintf("second-%d", i)
		entered, gate := make(chan struct{}), make(chan struct{})
		obs := observe.Func(func(ctx context.Context, e observe.Event) context.Context {
			if e.Kind == observe.WaitStart && e.Resource == res && ctx.Value(gateKey{}) != nil {
				close(entered)
				<-gate
			}
			return ctx
		})
		l := fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix), fencedlock.WithObserver(obs))
		holder := mustTryAcquire(t, ctx, l, res, longTTL)

		ctx1, cancel1 := context.WithCancel(ctx)
		first := acquireAsync(ctx1, l, res, longTTL, hourRetryDelay)
		waitUntil(t, func() bool { return l.WaiterHeldBack(res) }, "the first waiter to be held back")
		ctx2, cancel2 := context.WithCancel(context.WithValue(ctx, gateKey{}, true))
		second := acquireAsync(ctx2, l, res, longTTL, hourRetryDelay)
		<-entered // the second has joined, behind the first

		cancel1()
		require.Error(t, (<-first).err)
		require.NoError(t, holder.Release(ctx)) // to the second, now the first
		cancel2()
		close(gate)
		if r := <-second; r.err == nil {
			require.NoError(t, r.lock.Release(ctx))
			continue
		}
		other, err := newLocker(b).TryAcquire(ctx, res, time.Second)
		require.NoError(t, err, "round %d: the lock given to the waiter that stopped is held by nobody (PTTL %v)", i, keyPTTL(t, b, l.LockKey(res)))
		require.NoError(t, other.Release(ctx))
	}
}
