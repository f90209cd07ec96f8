package fencedlock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// A Refresh that makes an uncertain Lock certain again tells its Locker's
// waiters that the Lock holds the lock (they then wait for its release
// without asking Redis). When a Release ends the Lock before that news
// has reached them, the Release's own news comes first, and the Refresh's
// must not stand after it: the next Acquire of the Locker gets the free
// lock at once, not when its timer fires (here: an hour) or the released
// Lock's lease would have run out.
func TestRefreshHoldOvertakenByReleaseIsUndone(t *testing.T) {
	b := redistest.Real(t)
	ctx := testCtx(t)
	p := redistest.NewProxy(t, b.Client.Options().Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	l := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix))
	const res = "hold-overtaken"
	lock := mustTryAcquire(t, ctx, l, res, longTTL)

	// A Refresh whose reply is lost: the Lock is uncertain.
	p.DropReplies(1)
	require.Error(t, lock.Refresh(ctx, longTTL))
	require.Equal(t, 1, p.Dropped())

	// The next Refresh succeeds, and stops before it tells the waiters.
	reached, proceed := make(chan struct{}), make(chan struct{})
	// The first of the Lock's news after this point is the Refresh's; the
	// Release's comes after it and must not wait.
	var first atomic.Bool
	restore := fencedlock.SetSyncHook(func(resource string) {
		if resource != res || !first.CompareAndSwap(false, true) {
			return // another test's Lock, or news after the Refresh's
		}
		close(reached)
		<-proceed
	})
	defer restore()
	refreshed := make(chan error, 1)
	go func() { refreshed <- lock.Refresh(ctx, longTTL) }()
	select {
	case <-reached:
	case <-time.After(5 * time.Second):
		t.Fatal("the Refresh did not make the Lock certain again")
	}
	require.NoError(t, lock.Release(ctx))
	close(proceed)
	require.NoError(t, <-refreshed)

	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	next, err := l.Acquire(actx, res, longTTL, hourRetryDelay)
	require.NoError(t, err, "the Locker's waiter was held back by a Lock already released")
	require.NoError(t, next.Release(ctx))
}
