package fencedlock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// requireReleased checks that err says the Lock was released, and not
// that it was lost.
func requireReleased(t *testing.T, err error, what string, args ...any) {
	t.Helper()
	assert.ErrorIs(t, err, fencedlock.ErrReleased, append([]any{what}, args...)...)
	assert.NotErrorIs(t, err, fencedlock.ErrLockLost, append([]any{what}, args...)...)
}

// After a Release that returned nil, the Lock reports ErrReleased, never
// ErrLockLost, even when a Refresh or the heartbeat raced the Release;
// every later call on it says so too.
func TestReleasedMeansReleased(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l := newLocker(b)
		rounds := 300
		if testing.Short() {
			rounds = 50
		}
		lostAfterRelease := 0
		for i := 0; i < rounds; i++ {
			lock, err := l.Acquire(ctx, "race", time.Second, fencedlock.WithHeartbeat(time.Millisecond))
			require.NoError(t, err)
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := 0; j < 3; j++ {
					_ = lock.Refresh(ctx, time.Second)
				}
			}()
			relErr := lock.Release(ctx)
			wg.Wait()
			if relErr != nil {
				continue // the Refresh found it gone first: not this test's case
			}
			if !assert.ErrorIs(t, lock.Err(), fencedlock.ErrReleased, "round %d", i) {
				lostAfterRelease++
			}
			assert.NotErrorIs(t, lock.Err(), fencedlock.ErrLockLost, "round %d", i)
		}
		assert.Zero(t, lostAfterRelease, "rounds of %d whose released Lock reported another error", rounds)

		lock := mustTryAcquire(t, ctx, l, "twice", longTTL)
		require.NoError(t, lock.Release(ctx))
		requireReleased(t, lock.Err(), "Err")
		requireReleased(t, lock.Release(ctx), "second Release")
		requireReleased(t, lock.Refresh(ctx, longTTL), "Refresh")
		_, err := lock.TTL(ctx)
		requireReleased(t, err, "TTL")

		// An ended Lock says so whatever the ctx of the call.
		done, cancel := context.WithCancel(ctx)
		cancel()
		requireReleased(t, lock.Release(done), "second Release with a done ctx")
		requireReleased(t, lock.Refresh(done, longTTL), "Refresh with a done ctx")
		_, err = lock.TTL(done)
		requireReleased(t, err, "TTL with a done ctx")
	})
}

// A Release whose ctx is done before the call sends nothing and changes
// nothing: the heartbeat goes on and the Lock stays held.
func TestReleaseWithDoneContextChangesNothing(t *testing.T) {
	b := redistest.Real(t)
	ctx := testCtx(t)
	l := newLocker(b)
	const ttl = 300 * time.Millisecond
	lock, err := l.Acquire(ctx, "done", ttl, fencedlock.WithHeartbeat(0))
	require.NoError(t, err)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	err = lock.Release(cancelled)
	assert.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, fencedlock.ErrUnavailable, "nothing was sent")
	time.Sleep(2 * ttl)
	require.NoError(t, lock.Err(), "the heartbeat stopped")
	left, err := lock.TTL(ctx)
	require.NoError(t, err)
	assert.Greater(t, left, ttl/3)
	require.NoError(t, lock.Release(ctx))
	requireReleased(t, lock.Err(), "Err")
}

// A Release without an answer stops the heartbeat; the Lock then ends as
// lost once its lease runs out by the local clock, rather than claiming to
// be held for ever.
func TestReleaseWithoutAnswerEndsTheLockAtItsLease(t *testing.T) {
	b := redistest.Real(t)
	ctx := testCtx(t)
	s := newStalledRedis(t, b, false)
	const ttl = 300 * time.Millisecond
	lock, err := s.l.Acquire(ctx, "unknown", ttl, fencedlock.WithHeartbeat(0))
	require.NoError(t, err)
	s.p.Pause()
	rctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	err = lock.Release(rctx)
	cancel()
	assert.ErrorIs(t, err, fencedlock.ErrUnavailable)
	require.NoError(t, lock.Err(), "a Release without an answer ended the Lock")
	select {
	case <-lock.Done():
	case <-time.After(2 * ttl):
		t.Fatal("the Lock did not end when its lease ran out")
	}
	assert.ErrorIs(t, lock.Err(), fencedlock.ErrLockLost)
	s.p.Resume()
	requireNoGoroutinesLeftWithin(t, 10*time.Second)
}

func TestNilAndZeroLock(t *testing.T) {
	ctx := testCtx(t)
	for name, lock := range map[string]*fencedlock.Lock{"nil": nil, "zero": {}} {
		lock := lock
		t.Run(name, func(t *testing.T) {
			for op, fn := range map[string]func() error{
				"Refresh": func() error { return lock.Refresh(ctx, longTTL) },
				"Release": func() error { return lock.Release(ctx) },
				"TTL": func() error {
					d, err := lock.TTL(ctx)
					if d != 0 {
						return fmt.Errorf("TTL %v", d)
					}
					return err
				},
			} {
				err := noPanic(fn)
				if assert.Error(t, err, op) {
					assert.ErrorIs(t, err, fencedlock.ErrInvalidArgument, op)
				}
			}
			require.NoError(t, noPanic(func() error {
				assert.Zero(t, lock.Token())
				assert.Empty(t, lock.Resource())
				assert.NotEmpty(t, lock.String())
				return nil
			}))
		})
	}
}

// Refresh, TTL and Release act only on the lock they hold.
func TestRefreshTTLRelease(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l := newLocker(b)

		t.Run("Refresh sets the TTL and keeps the token", func(t *testing.T) {
			lock := mustTryAcquire(t, ctx, l, "refresh", 10*time.Second)
			tok := lock.Token()
			b.FastForward(t, 5*time.Second)
			ttl, err := lock.TTL(ctx)
			require.NoError(t, err)
			assert.LessOrEqual(t, ttl, 5*time.Second)
			assert.Greater(t, ttl, 4*time.Second)

			require.NoError(t, lock.Refresh(ctx, 20*time.Second))
			ttl, err = lock.TTL(ctx)
			require.NoError(t, err)
			assert.LessOrEqual(t, ttl, 20*time.Second)
			assert.Greater(t, ttl, 19*time.Second)
			assert.Equal(t, tok, lock.Token())

			// The refreshed lock outlives its first TTL.
			b.FastForward(t, 10*time.Second)
			_, err = l.TryAcquire(ctx, "refresh", time.Second)
			assert.ErrorIs(t, err, fencedlock.ErrNotAcquired)

			// Refresh may shorten the TTL too.
			require.NoError(t, lock.Refresh(ctx, 2*time.Second))
			ttl, err = lock.TTL(ctx)
			require.NoError(t, err)
			assert.LessOrEqual(t, ttl, 2*time.Second)
			require.NoError(t, lock.Release(ctx))
		})

		t.Run("expired lock is lost", func(t *testing.T) {
			lock := mustTryAcquire(t, ctx, l, "expired", 10*time.Second)
			b.FastForward(t, 11*time.Second)
			_, err := lock.TTL(ctx)
			assert.ErrorIs(t, err, fencedlock.ErrLockLost)
			assert.Contains(t, err.Error(), `"expired"`)
			assert.ErrorIs(t, lock.Refresh(ctx, longTTL), fencedlock.ErrLockLost)
			assert.False(t, keyExists(t, b, l.LockKey("expired")), "Refresh of a lost lock recreated it")
			assert.ErrorIs(t, lock.Release(ctx), fencedlock.ErrLockLost)
		})

		t.Run("Release twice", func(t *testing.T) {
			lock := mustTryAcquire(t, ctx, l, "twice", longTTL)
			require.NoError(t, lock.Release(ctx))
			assert.False(t, keyExists(t, b, l.LockKey("twice")))
			requireReleased(t, lock.Release(ctx), "second Release")
			_, err := lock.TTL(ctx)
			requireReleased(t, err, "TTL")
		})

		t.Run("late Release and Refresh leave the new owner's lock", func(t *testing.T) {
			old := mustTryAcquire(t, ctx, l, "takeover", 10*time.Second)
			b.FastForward(t, 11*time.Second)
			cur := mustTryAcquire(t, ctx, l, "takeover", 10*time.Second)
			owner, _ := getKey(t, b, l.LockKey("takeover"))

			assert.ErrorIs(t, old.Release(ctx), fencedlock.ErrLockLost)
			assert.ErrorIs(t, old.Refresh(ctx, time.Hour), fencedlock.ErrLockLost)
			after, ok := getKey(t, b, l.LockKey("takeover"))
			require.True(t, ok, "a late Release deleted the new owner's lock")
			assert.Equal(t, owner, after)
			ttl, err := cur.TTL(ctx)
			require.NoError(t, err)
			assert.LessOrEqual(t, ttl, 10*time.Second, "a late Refresh extended the new owner's lock")
			require.NoError(t, cur.Release(ctx))
		})

		t.Run("String shows resource and token, not the owner", func(t *testing.T) {
			lock := mustTryAcquire(t, ctx, l, "str", longTTL)
			owner, _ := getKey(t, b, l.LockKey("str"))
			require.NotEmpty(t, owner)
			s := lock.String()
			assert.Contains(t, s, `"str"`)
			assert.Contains(t, s, lock.Token().String())
			assert.NotContains(t, s, owner)
			require.NoError(t, lock.Release(ctx))
		})
	})
}

// Done and Err of nil, zero and fresh Locks.
func TestDoneAndErr(t *testing.T) {
	var nilLock *fencedlock.Lock
	assert.True(t, isClosed(nilLock.Done()))
	assert.ErrorIs(t, nilLock.Err(), fencedlock.ErrInvalidArgument)
	assert.True(t, isClosed((&fencedlock.Lock{}).Done()))
	assert.ErrorIs(t, (&fencedlock.Lock{}).Err(), fencedlock.ErrInvalidArgument)

	b := redistest.Mini(t)
	ctx := testCtx(t)
	l := newLocker(b)
	lock := mustTryAcquire(t, ctx, l, "r", longTTL)
	assert.NoError(t, lock.Err())
	done := lock.Done()
	assert.False(t, isClosed(done))
	require.NoError(t, lock.Release(ctx))
	assert.True(t, isClosed(done))
	assert.True(t, isClosed(lock.Done()))
	assert.Equal(t, fencedlock.ErrReleased, lock.Err())
}

// A Lock knows its own lease: once its TTL (less a twentieth) has passed
// by the local clock since its grant or last successful Refresh was sent,
// it ends as lost, with or without a heartbeat. One whose Done was asked
// for ends on time; one that nobody watches finds it at its next call,
// which then sends nothing (but for a Release, which deletes the key if
// it is still its own). A successful Refresh moves the lease on.
func TestLockEndsWhenItsLeaseRunsOut(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l := newLocker(b)
		const ttl = 200 * time.Millisecond
		requireRanOut := func(t *testing.T, err error) {
			t.Helper()
			require.ErrorIs(t, err, fencedlock.ErrLockLost)
			assert.Contains(t, err.Error(), "the TTL ran out")
		}

		t.Run("watched by Done", func(t *testing.T) {
			start := time.Now()
			lock := mustTryAcquire(t, ctx, l, "done", ttl)
			done := lock.Done()
			time.Sleep(ttl / 2)
			require.False(t, isClosed(done), "Done closed halfway through the lease")
			require.NoError(t, lock.Err())
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("Done not closed when the lease ran out")
			}
			assert.GreaterOrEqual(t, time.Since(start), ttl-ttl/20, "ended before its lease ran out")
			requireRanOut(t, lock.Err())
			requireRanOut(t, lock.Release(ctx))
		})

		t.Run("watched by nobody", func(t *testing.T) {
			lock := mustTryAcquire(t, ctx, l, "unwatched", ttl)
			time.Sleep(ttl + ttl/4)
			// Nothing ran yet: the first call finds the lease ran out.
			requireRanOut(t, lock.Refresh(ctx, ttl))
			requireRanOut(t, lock.Err())
			assert.True(t, isClosed(lock.Done()))
			requireRanOut(t, lock.Release(ctx))
			if !b.Real {
				// miniredis's clock stood still: the key was there, still
				// this owner's, and the Release deleted it.
				assert.False(t, keyExists(t, b, l.LockKey("unwatched")), "a Release of a Lock whose lease ran out left its key, still this owner's")
			}
		})

		t.Run("a Refresh moves it on", func(t *testing.T) {
			lock := mustTryAcquire(t, ctx, l, "refreshed", ttl)
			done := lock.Done()
			time.Sleep(ttl / 2)
			refreshed := time.Now()
			require.NoError(t, lock.Refresh(ctx, ttl))
			time.Sleep(ttl/2 + ttl/4) // past the first lease, within the second
			require.False(t, isClosed(done), "ended at the lease the Refresh had moved on")
			require.NoError(t, lock.Err())
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("Done not closed when the refreshed lease ran out")
			}
			assert.GreaterOrEqual(t, time.Since(refreshed), ttl-ttl/20)
			requireRanOut(t, lock.Err())
		})

		t.Run("a Refresh for a shorter TTL brings it nearer", func(t *testing.T) {
			lock := mustTryAcquire(t, ctx, l, "shortened", 20*ttl)
			done := lock.Done()
			refreshed := time.Now()
			require.NoError(t, lock.Refresh(ctx, ttl))
			select {
			case <-done:
			case <-time.After(5 * ttl):
				// Redis has let the key expire long ago: Done must say so.
				t.Fatalf("Done not closed %v after a Refresh for %v; Err: %v", time.Since(refreshed), ttl, lock.Err())
			}
			assert.GreaterOrEqual(t, time.Since(refreshed), ttl-ttl/20)
			requireRanOut(t, lock.Err())
		})
	})
}
