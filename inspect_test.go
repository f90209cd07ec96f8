package fencedlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// Inspect tells a free resource from a held one, with the holder's token,
// its TTL, the processes waiting and the counter, and changes nothing.
func TestInspect(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l := newLocker(b)
		info, err := l.Inspect(ctx, "inspect")
		require.NoError(t, err)
		assert.Equal(t, fencedlock.Info{}, info, "a resource never locked")

		lock := mustTryAcquire(t, ctx, l, "inspect", longTTL)
		before := testKeys(t, b)
		info, err = l.Inspect(ctx, "inspect")
		require.NoError(t, err)
		assert.True(t, info.Held)
		assert.Equal(t, lock.Token(), info.Token)
		assert.Equal(t, lock.Token(), info.Counter, "the counter is at the last grant")
		assert.Positive(t, info.TTL)
		assert.LessOrEqual(t, info.TTL, longTTL)
		assert.Zero(t, info.Waiters)
		assert.Equal(t, before, testKeys(t, b), "Inspect wrote a key")

		// A waiter of another Locker (another process) is counted; the
		// goroutine queued behind it in the same Locker is not.
		other := newLocker(b)
		wctx, cancel := context.WithCancel(ctx)
		first := acquireAsync(wctx, other, "inspect", longTTL)
		awaitQueued(t, b, other, "inspect")
		second := acquireAsync(wctx, other, "inspect", longTTL)
		requireStillWaiting(t, second)
		info, err = l.Inspect(ctx, "inspect")
		require.NoError(t, err)
		assert.Equal(t, 1, info.Waiters)
		cancel()
		for _, done := range []<-chan acquireResult{first, second} {
			r := <-done
			require.Error(t, r.err)
			awaitCleanupAfterCtxEnd(t, r.err, func() bool { return queuedCount(t, b, other, "inspect") == 0 })
		}
		require.NoError(t, lock.Release(ctx))
		info, err = l.Inspect(ctx, "inspect")
		require.NoError(t, err)
		assert.False(t, info.Held)
		assert.Zero(t, info.Token)
		assert.Zero(t, info.TTL)
		assert.Zero(t, info.Waiters)
		assert.Equal(t, lock.Token(), info.Counter, "the counter outlives the lock")
	})
}

// A waiter whose deadline has passed (its process died) is not counted.
func TestInspectSkipsDeadWaiters(t *testing.T) {
	b := redistest.Mini(t)
	ctx := testCtx(t)
	l := newLocker(b)
	_, deadlines := queueKeys(l, "dead")
	past := time.Now().Add(-time.Minute).UnixMilli()
	future := time.Now().Add(time.Minute).UnixMilli()
	require.NoError(t, b.Client.HSet(ctx, deadlines, "a:1000", past, "b:1000", future, "c:1000", "junk").Err())
	info, err := l.Inspect(ctx, "dead")
	require.NoError(t, err)
	assert.Equal(t, 1, info.Waiters)
}

// Keys holding what the library did not write are ErrCorrupt; an invalid
// resource is ErrInvalidArgument; a ctx that has ended sends nothing.
func TestInspectErrors(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l := newLocker(b)
		require.NoError(t, b.Client.Set(ctx, l.LockKey("bad"), "no-token-here", 0).Err())
		_, err := l.Inspect(ctx, "bad")
		assert.ErrorIs(t, err, fencedlock.ErrCorrupt)

		require.NoError(t, b.Client.Set(ctx, l.TokenKey("counter"), "x1", 0).Err())
		_, err = l.Inspect(ctx, "counter")
		assert.ErrorIs(t, err, fencedlock.ErrCorrupt)

		require.NoError(t, b.Client.HSet(ctx, l.LockKey("hash"), "f", "v").Err())
		_, err = l.Inspect(ctx, "hash")
		assert.ErrorIs(t, err, fencedlock.ErrCorrupt)

		_, err = l.Inspect(ctx, "")
		assert.ErrorIs(t, err, fencedlock.ErrInvalidArgument)

		done, cancel := context.WithCancel(ctx)
		cancel()
		_, err = l.Inspect(done, "free")
		assert.ErrorIs(t, err, context.Canceled)
		assert.Contains(t, err.Error(), "nothing sent")
	})
}
