package fencedlock_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// A command's reply is cut off (the connection resets), go-redis sends the
// command again on a new connection, and that connection is refused. The
// error is the refused dial's, though the first copy ran in Redis. These
// tests check that the library takes such an error as a round trip whose
// answer never came, and leaves no lock that nobody holds.

// resendingClient is a client of go-redis's default options (it resends
// a command after its connection fails) through p,
// whose new connections are refused (a real ECONNREFUSED) while refuse is
// set, counting them in refused. (Its pool is larger than the dials
// refused: go-redis stops dialling for a second when as many dials as
// its pool's size have failed.) A round trip that fails ends the
// refusal: Redis can be reached again by the time a cleanup runs.
func resendingClient(t *testing.T, p *redistest.Proxy, refuse *atomic.Bool, refused *atomic.Int32) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr:     p.Addr(),
		PoolSize: 16,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			if refuse.Load() {
				refused.Add(1)
				return d.DialContext(ctx, "tcp", "127.0.0.1:1")
			}
			return d.DialContext(ctx, network, addr)
		},
	})
	c.AddHook(endRefusal{refuse})
	t.Cleanup(func() { c.Close() })
	return c
}

// endRefusal is resendingClient's hook: a round trip's error ends the
// refusal of new connections.
type endRefusal struct{ refuse *atomic.Bool }

func (h endRefusal) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h endRefusal) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil {
			h.refuse.Store(false)
		}
		return err
	}
}

func (h endRefusal) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// refusedResend sets up a Locker whose next round trip runs in Redis and
// loses its reply, and whose resends find their dials refused, until the
// round trip fails. done checks that it went so.
func refusedResend(t *testing.T, ctx context.Context) (b *redistest.Backend, l *fencedlock.Locker, start func(), done func()) {
	b = redistest.Real(t)
	p := redistest.NewProxy(t, b.Client.Options().Addr)
	var refuse atomic.Bool
	var refused atomic.Int32
	l = fencedlock.New(resendingClient(t, p, &refuse, &refused), fencedlock.WithPrefix(b.Prefix))
	grantAndRelease(t, ctx, l, "warm-up") // loads the scripts, and makes the one connection
	start = func() {
		refuse.Store(true)
		p.DropReplies(1)
	}
	done = func() {
		require.Equal(t, 1, p.Dropped(), "the reply cut off")
		require.Positive(t, refused.Load(), "no resend's dial refused")
	}
	return b, l, start, done
}

// requireFree checks that resource's lock is free once the cleanups a
// call left in the background (one second each) are over.
func requireFree(t *testing.T, ctx context.Context, b *redistest.Backend, l *fencedlock.Locker, resource string) {
	t.Helper()
	waitUntil(t, func() bool { _, held := getKey(t, b, l.LockKey(resource)); return !held },
		"the lock nobody holds to be released (PTTL "+keyPTTL(t, b, l.LockKey(resource)).String()+")")
	other, err := newLocker(b).TryAcquire(ctx, resource, time.Second)
	require.NoError(t, err)
	require.NoError(t, other.Release(ctx))
}

func TestTryAcquireWhoseResendIsRefusedLeavesNoLock(t *testing.T) {
	ctx := testCtx(t)
	b, l, start, done := refusedResend(t, ctx)
	start()
	_, err := l.TryAcquire(ctx, "res", longTTL)
	done()
	require.ErrorIs(t, err, fencedlock.ErrUnavailable)
	requireFree(t, ctx, b, l, "res")
	assert.NotEmpty(t, abandonMarkers(t, b, l, "res"), "a copy of the attempt still on its way is not refused")
}

func TestAcquireWhoseResendsAreRefusedLeavesNoLock(t *testing.T) {
	ctx := testCtx(t)
	b, l, start, done := refusedResend(t, ctx)
	start()
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := l.Acquire(actx, "res", longTTL, fencedlock.WithRetryDelay(10*time.Second, 10*time.Second))
	done()
	require.Error(t, err)
	requireFree(t, ctx, b, l, "res")
}

// A release hands the lock to its Locker's own waiter in its reply alone,
// and the reply is lost the same way: the waiter, which then gives up,
// must not take the release for one that never ran.
func TestReleaseWhoseResendIsRefusedLeavesNoLockToItsWaiter(t *testing.T) {
	ctx := testCtx(t)
	b, l, start, done := refusedResend(t, ctx)
	holder := mustTryAcquire(t, ctx, l, "res", longTTL)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	mine := acquireAsync(wctx, l, "res", longTTL, hourRetryDelay)
	waitUntil(t, func() bool { return l.WaiterHeldBack("res") }, "the waiter to be held back")
	start()
	err := holder.Release(ctx)
	done()
	require.ErrorIs(t, err, fencedlock.ErrUnavailable)
	cancel()
	if r := <-mine; r.err == nil {
		// It learnt of the grant: it holds the lock.
		require.NoError(t, r.lock.Release(ctx))
	}
	requireFree(t, ctx, b, l, "res")
}
