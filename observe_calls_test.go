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
	"github.com/fencedlock/fencedlock/observe"
)

// count returns how many recorded events are of kind.
func (r *obsRecorder) count(kind observe.Kind) int {
	n := 0
	for _, k := range r.kinds() {
		if k == kind {
			n++
		}
	}
	return n
}

// Every acquire event, and the end of the Lock it granted, names the call
// that acquired: TryAcquire, Acquire, Do, or a call of another package's
// that WithCall names (election's Campaign).
func TestObserverNamesTheCall(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rec := &obsRecorder{}
		l := fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix), fencedlock.WithObserver(rec))
		release := func(lock *fencedlock.Lock, err error) error {
			if err != nil {
				return err
			}
			return lock.Release(ctx)
		}
		for _, tc := range []struct {
			want observe.Call
			run  func() error
		}{
			{observe.CallTry, func() error { return release(l.TryAcquire(ctx, "call", longTTL)) }},
			{observe.CallAcquire, func() error { return release(l.Acquire(ctx, "call", longTTL)) }},
			{observe.CallAcquire, func() error { return release(l.Acquire(ctx, "call", longTTL, fencedlock.WithCall(observe.CallTry))) }},
			{observe.CallCampaign, func() error {
				return release(l.Acquire(ctx, "call", longTTL, fencedlock.WithCall(observe.CallCampaign)))
			}},
			{observe.CallDo, func() error {
				return l.Do(ctx, "call", longTTL, func(context.Context, *fencedlock.Lock) error { return nil })
			}},
		} {
			require.NoError(t, tc.run())
			waitUntil(t, func() bool { return rec.count(observe.LockEnd) == 1 }, "the lock's end")
			for _, e := range rec.take() {
				switch e.Kind {
				case observe.AcquireStart, observe.AcquireEnd, observe.LockEnd:
					assert.Equal(t, tc.want, e.Call, "%v of a %v", e.Kind, tc.want)
				default:
					assert.Equal(t, observe.CallNone, e.Call, "%v of a %v", e.Kind, tc.want)
				}
			}
		}
	})
}

// A goroutine that waits in Acquire is reported when it begins to wait
// (refused, or queued behind another waiter of the Locker) and when the
// wait ends, granted or not, before its AcquireEnd; an Acquire granted at
// once does not wait.
func TestObserverReportsWaits(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rec := &obsRecorder{}
		l := fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix), fencedlock.WithObserver(rec))
		holder, err := l.Acquire(ctx, "wait", longTTL)
		require.NoError(t, err)
		assert.Zero(t, rec.count(observe.WaitStart), "an Acquire granted at once waited")

		first := acquireAsync(ctx, l, "wait", longTTL, hourRetryDelay)
		waitUntil(t, func() bool { return rec.count(observe.WaitStart) == 1 }, "the first waiter's wait_start")
		second := acquireAsync(ctx, l, "wait", longTTL, hourRetryDelay, fencedlock.WithCall(observe.CallCampaign))
		waitUntil(t, func() bool { return rec.count(observe.WaitStart) == 2 }, "the second waiter's wait_start (queued behind the first)")
		tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_, err = l.Acquire(tctx, "wait", longTTL)
		require.ErrorIs(t, err, context.DeadlineExceeded)

		require.NoError(t, holder.Release(ctx))
		lock := awaitAcquired(t, first)
		require.NoError(t, lock.Release(ctx))
		lock = awaitAcquired(t, second)
		require.NoError(t, lock.Release(ctx))

		waiting := 0
		ended := map[observe.Call]int{}
		for _, e := range rec.take() {
			switch e.Kind {
			case observe.WaitStart:
				waiting++
				assert.Equal(t, "wait", e.Resource)
				assert.Equal(t, longTTL, e.TTL)
			case observe.WaitEnd:
				waiting--
				require.GreaterOrEqual(t, waiting, 0, "a wait_end without its wait_start")
				assert.Positive(t, e.Duration)
				ended[e.Call]++
			case observe.AcquireEnd:
				if e.Outcome == observe.Timeout {
					assert.Equal(t, 1, ended[observe.CallAcquire], "the waiter that timed out ended its wait first")
				}
			}
		}
		assert.Zero(t, waiting, "waits still open")
		assert.Equal(t, map[observe.Call]int{observe.CallAcquire: 2, observe.CallCampaign: 1}, ended)
	})
}

// ctxMark marks the ctx an observer returns for a Lock's AcquireEnd.
type ctxMark struct{}

// The ctx an Observer returns for the AcquireEnd of a granted lock,
// without its cancellation, is the one the Lock's later events get: a
// failed heartbeat refresh, and the Lock's end.
func TestObserverLockEventsGetTheAcquireCtx(t *testing.T) {
	b := redistest.Real(t)
	ctx, cancel := context.WithCancel(testCtx(t))
	rec := &obsRecorder{}
	marked := map[observe.Kind]bool{}
	obs := observe.Func(func(ctx context.Context, e observe.Event) context.Context {
		rec.Observe(ctx, e)
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if ctx.Value(ctxMark{}) != nil {
			assert.NoError(t, ctx.Err(), "%v got a ctx that had ended", e.Kind)
			marked[e.Kind] = true
		}
		if e.Kind == observe.AcquireEnd {
			return context.WithValue(ctx, ctxMark{}, true)
		}
		return ctx
	})
	p := redistest.NewProxy(t, b.Client.Options().Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ReadTimeout: 100 * time.Millisecond})
	defer c.Close()
	l := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix), fencedlock.WithObserver(obs))
	lock, err := l.Acquire(ctx, "ctx", 3*time.Second, fencedlock.WithHeartbeat(100*time.Millisecond))
	require.NoError(t, err)
	cancel() // the acquire's ctx ends; the Lock's events do not see it
	p.DropReplies(1)
	waitUntil(t, func() bool { return rec.count(observe.RefreshFailed) > 0 }, "a refresh_failed event")
	require.NoError(t, lock.Release(testCtx(t)))
	rec.mu.Lock()
	defer rec.mu.Unlock()
	assert.Equal(t, map[observe.Kind]bool{observe.RefreshFailed: true, observe.LockEnd: true}, marked)
}

// A Lock whose lease runs out by the local clock is reported lost at
// once, without a heartbeat and without any call on it: an Observer
// watches it.
func TestObserverSeesALeaseRunOut(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rec := &obsRecorder{}
		l := fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix), fencedlock.WithObserver(rec))
		lock, err := l.TryAcquire(ctx, "ranout", 100*time.Millisecond)
		require.NoError(t, err)
		waitUntil(t, func() bool { return rec.count(observe.LockEnd) == 1 }, "the lock_end of a lease that ran out")
		e, _ := rec.find(observe.LockEnd)
		assert.Equal(t, observe.Lost, e.Outcome)
		assert.Equal(t, observe.CallTry, e.Call)
		require.ErrorIs(t, e.Err, fencedlock.ErrLockLost)
		assert.Contains(t, e.Err.Error(), "the TTL ran out")
		assert.Equal(t, e.Err, lock.Err())
	})
}
