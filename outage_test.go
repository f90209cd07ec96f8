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
// connection refused, nor when Redis last said another owner held it.
func TestAcquireEndingInAnOutageSaysWhy(t *testing.T) {
	srv := redistest.Start(t)
	ctx := testCtx(t)
	holders, waiters := fencedlock.New(srv.Client(t)), fencedlock.New(srv.Client(t))
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

// A call stopped by a ctx cancelled with a cause of its own wraps that
// cause and ctx's error, and does not say the backend is unavailable;
// a plain cancel still does.
func TestCallsStoppedByACauseWrapIt(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		stalled := newStalledRedis(t, b, false)
		l, rs := stalled.l, stalled.store
		held := mustTryAcquire(t, ctx, l, "held", longTTL)
		other := mustTryAcquire(t, ctx, newLocker(b), "busy", longTTL)
		defer other.Release(ctx)
		ms := fencedlock.NewMemoryStore()
		cause := fencedlock.ErrLockLost // a term ended, say

		calls := map[string]func(ctx context.Context) error{
			"TryAcquire": func(ctx context.Context) error { return noLock(l.TryAcquire(ctx, "r", longTTL)) },
			"Acquire":    func(ctx context.Context) error { return noLock(l.Acquire(ctx, "r", longTTL)) },
			"Refresh":    func(ctx context.Context) error { return held.Refresh(ctx, longTTL) },
			"TTL":        func(ctx context.Context) error { _, err := held.TTL(ctx); return err },
			"Inspect":    func(ctx context.Context) error { _, err := l.Inspect(ctx, "r"); return err },
			"Put":        func(ctx context.Context) error { return rs.Put(ctx, "r", 5, []byte("v")) },
			"Get":        func(ctx context.Context) error { _, _, err := rs.Get(ctx, "r"); return err },
			"Fence":      func(ctx context.Context) error { return rs.Fence(ctx, "r", 5) },
			"Update": func(ctx context.Context) error {
				return fencedlock.Update(ctx, rs, "r", 5, func(v []byte, _ bool) ([]byte, error) { return v, nil })
			},
			"MemoryStore.Put": func(ctx context.Context) error { return ms.Put(ctx, "r", 5, []byte("v")) },
		}
		waiting := fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix))
		calls["Acquire while waiting"] = func(ctx context.Context) error { return noLock(waiting.Acquire(ctx, "busy", longTTL)) }
		for name, call := range calls {
			name, call := name, call
			t.Run(name, func(t *testing.T) {
				stalled.p.Pause()
				defer stalled.p.Resume()
				cctx, cancel := context.WithCancelCause(ctx)
				if name == "MemoryStore.Put" {
					cancel(cause) // a MemoryStore never waits: cancelled before
				} else {
					time.AfterFunc(50*time.Millisecond, func() { cancel(cause) })
				}
				err := call(cctx)
				require.Error(t, err)
				assert.ErrorIs(t, err, cause, "the cause")
				assert.ErrorIs(t, err, context.Canceled, "ctx's error")
				assert.NotErrorIs(t, err, fencedlock.ErrUnavailable, "Redis did not fail: the caller's ctx ended, for its cause")

				// A plain cancel keeps saying what it says.
				pctx, pcancel := context.WithCancel(ctx)
				if name == "MemoryStore.Put" {
					pcancel()
				} else {
					time.AfterFunc(50*time.Millisecond, pcancel)
				}
				err = call(pctx)
				require.Error(t, err)
				assert.ErrorIs(t, err, context.Canceled)
				assert.NotErrorIs(t, err, cause)
			})
		}
		// The Release of a stalled lock last: it ends nothing on failure.
		stalled.p.Pause()
		cctx, cancel := context.WithCancelCause(ctx)
		time.AfterFunc(50*time.Millisecond, func() { cancel(cause) })
		err := held.Release(cctx)
		stalled.p.Resume()
		assert.ErrorIs(t, err, cause)
		assert.NotErrorIs(t, err, fencedlock.ErrUnavailable)
	})
}
