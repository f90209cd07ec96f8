package fencedlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// ltRequireReleased checks that err says the Lock was released, and not
// that it was lost.
func ltRequireReleased(t *testing.T, err error, what string, args ...any) {
	t.Helper()
	assert.ErrorIs(t, err, fencedlock.ErrReleased, append([]any{what}, args...)...)
	assert.NotErrorIs(t, err, fencedlock.ErrLockLost, append([]any{what}, args...)...)
}

// After a Release that returned nil, the Lock reports ErrReleased, never
// ErrLockLost, even when a Refresh or the heartbeat raced the Release;
// every later call on it says so too.
func TestReleasedMeansReleased(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := ltCtx(t)
		l := ltLocker(b)
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

		lock := ltTryAcquire(t, ctx, l, "twice", ltLongTTL)
		require.NoError(t, lock.Release(ctx))
		ltRequireReleased(t, lock.Err(), "Err")
		ltRequireReleased(t, lock.Release(ctx), "second Release")
		ltRequireReleased(t, lock.Refresh(ctx, ltLongTTL), "Refresh")
		_, err := lock.TTL(ctx)
		ltRequireReleased(t, err, "TTL")
	})
}

// TryAcquire with a done ctx, or one whose deadline has passed, sends
// nothing and wraps ctx's error the way Acquire does.
func TestTryAcquireWithDoneContext(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		l := ltLocker(b)
		cancelled, cancel := context.WithCancel(context.Background())
		cancel()
		past, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		defer cancel2()
		for name, ctx := range map[string]context.Context{"cancelled": cancelled, "past deadline": past} {
			_, tryErr := l.TryAcquire(ctx, "done", ltLongTTL)
			_, waitErr := l.Acquire(ctx, "done", ltLongTTL)
			for call, err := range map[string]error{"TryAcquire": tryErr, "Acquire": waitErr} {
				require.Error(t, err, call)
				assert.ErrorIs(t, err, ctx.Err(), "%s with a %s ctx", call, name)
				assert.Equal(t, errorsIs(waitErr, fencedlock.ErrNotAcquired), errorsIs(err, fencedlock.ErrNotAcquired), "%s with a %s ctx: %v", call, name, err)
				assert.NotErrorIs(t, err, fencedlock.ErrUnavailable, call)
			}
		}
		assert.Empty(t, ltKeys(t, b), "a call with a done ctx wrote to Redis")
	})
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }

// A Release whose ctx is done before the call sends nothing and changes
// nothing: the heartbeat goes on and the Lock stays held.
func TestReleaseWithDoneContextChangesNothing(t *testing.T) {
	b := redistest.Real(t)
	ctx := ltCtx(t)
	l := ltLocker(b)
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
	ltRequireReleased(t, lock.Err(), "Err")
}

// A Release without an answer stops the heartbeat; the Lock then ends as
// lost once its lease runs out by the local clock, rather than claiming to
// be held for ever.
func TestReleaseWithoutAnswerEndsTheLockAtItsLease(t *testing.T) {
	b := redistest.Real(t)
	ctx := ltCtx(t)
	s := ltNewStalled(t, b, false)
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
	ltNoGoroutinesLeftWithin(t, 10*time.Second)
}
