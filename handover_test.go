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

// ltHeldToken returns the token the lock key of resource holds in Redis
// now, or 0 when the key is missing.
func ltHeldToken(t *testing.T, b *redistest.Backend, l *fencedlock.Locker, resource string) fencedlock.Token {
	t.Helper()
	v, ok := ltGetKey(t, b, l.LockKey(resource))
	if !ok {
		return 0
	}
	m := ltLockValue.FindStringSubmatch(v)
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
			ctx := ltCtx(t)
			p := redistest.NewProxy(t, b.Client.Options().Addr)
			c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			l := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix))
			x := ltLocker(b)
			const res = "r"
			// Loads the scripts: a NOSCRIPT reply delayed like the others
			// would keep the release from running at all.
			warm := ltTryAcquire(t, ctx, l, "warm-up", ltLongTTL)
			require.NoError(t, warm.Refresh(ctx, ltLongTTL))
			require.NoError(t, warm.Release(ctx))

			holder := ltTryAcquire(t, ctx, l, res, ltLongTTL)
			xDone := ltWaitFor(ctx, x, res, ltLongTTL, fencedlock.WithRetryDelay(5*time.Millisecond, 20*time.Millisecond))
			ltEventually(t, func() bool { return ltQueued(t, b, x, res) == 1 }, "X to queue")

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
			xLock := ltAwait(t, xDone)
			require.Equal(t, xLock.Token(), ltHeldToken(t, b, l, res), "X holds the lock in Redis")

			// A goroutine of L waits, and the holder releases again while
			// replies are still delayed.
			lDone := ltWaitFor(ctx, l, res, ltLongTTL, ltHourDelay)
			// Its refusal comes back, delayed.
			ltEventually(t, func() bool { return l.WaiterRefused(res) }, "L's waiter to hear its refusal")
			// and its subscription's confirmation, and its next refusal.
			time.Sleep(1500 * time.Millisecond)
			again, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			rerr := holder.Release(again)
			cancel()
			t.Logf("second release: %v; holder.Err %v", rerr, holder.Err())
			select {
			case r := <-lDone:
				held := ltHeldToken(t, b, l, res)
				if r.err == nil {
					t.Fatalf("Acquire returned a Lock with token %d while Redis holds token %d (X's is %d)", r.lock.Token(), held, xLock.Token())
				}
				t.Logf("waiter's Acquire: %v", r.err)
				// An error is fine; the waiter is not waiting any more.
				lDone = nil
			case <-time.After(500 * time.Millisecond):
			}
			p.DelayReplies(0)
			ltRequireNotHolding(t, holder)
			require.NoError(t, xLock.Release(ctx))
			if lDone != nil {
				lock := ltAwait(t, lDone)
				assert.Greater(t, lock.Token(), xLock.Token())
				assert.Equal(t, lock.Token(), ltHeldToken(t, b, l, res), "the waiter's Lock is Redis's grant")
				require.NoError(t, lock.Release(ctx))
			}
			ltNoGoroutinesLeft(t)
		})
	}
}

// ltRequireNotHolding checks that lock no longer claims to hold its lock
// once a call asks Redis.
func ltRequireNotHolding(t *testing.T, lock *fencedlock.Lock) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := lock.TTL(ctx)
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "lost") || strings.Contains(err.Error(), "released"), "%v", err)
}
