package fencedlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// A heartbeat keeps a lock through ten times its TTL, while a lock without
// one expires; Release then ends it.
func TestHeartbeatKeepsTheLock(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l := newLocker(b)
		const ttl = 300 * time.Millisecond
		kept, err := l.Acquire(ctx, "kept", ttl, fencedlock.WithHeartbeat(0))
		require.NoError(t, err)
		bare, err := l.Acquire(ctx, "bare", ttl)
		require.NoError(t, err)
		end := time.Now().Add(10 * ttl)
		for time.Now().Before(end) {
			time.Sleep(ttl / 3)
			// miniredis never expires keys on its own: move its clock as
			// far as real time went (a real Redis only gets its own time).
			if !b.Real {
				b.FastForward(t, ttl/3)
			}
		}
		assert.NoError(t, kept.Err())
		assert.False(t, isClosed(kept.Done()), "Done closed while the heartbeat held the lock")
		left, err := kept.TTL(ctx)
		require.NoError(t, err, "the heartbeat did not keep the lock")
		// Any time left shows refreshes: ten TTLs went by. (On miniredis,
		// whose clock moves in steps of ttl/3, a heartbeat that a loaded
		// machine delays past one step leaves exactly ttl/3.)
		assert.Greater(t, left, time.Duration(0))

		// The negative control: the same wait without a heartbeat.
		assert.ErrorIs(t, bare.Refresh(ctx, ttl), fencedlock.ErrLockLost, "the lock without heartbeat did not expire")
		assert.True(t, isClosed(bare.Done()))

		require.NoError(t, kept.Release(ctx))
		assert.Equal(t, fencedlock.ErrReleased, kept.Err())
		assert.True(t, isClosed(kept.Done()))
		assert.False(t, keyExists(t, b, l.LockKey("kept")))
		// A released Lock sends nothing and says why.
		err = kept.Release(ctx)
		assert.NotErrorIs(t, err, fencedlock.ErrLockLost)
		assert.ErrorIs(t, err, fencedlock.ErrReleased)
		requireNoGoroutinesLeft(t)
	})
}

// A refresh that finds the key deleted, or holding another owner's value,
// ends the Lock within one interval, and nothing is sent for it after.
func TestHeartbeatFindsTheLockGone(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steal func(ctx context.Context, c *redis.Client, key string) error
	}{
		{"deleted", func(ctx context.Context, c *redis.Client, key string) error { return c.Del(ctx, key).Err() }},
		{"overwritten", func(ctx context.Context, c *redis.Client, key string) error {
			return c.Set(ctx, key, "someone-else:1", time.Minute).Err()
		}},
	} {
		tc := tc
		t.Run(tc.name, func(t *testing.T) {
			redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
				ctx := testCtx(t)
				log := &commandLog{}
				c := redis.NewClient(&redis.Options{Addr: b.Client.Options().Addr})
				c.AddHook(log)
				t.Cleanup(func() { c.Close() })
				l := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix))
				const interval = 150 * time.Millisecond
				lock, err := l.Acquire(ctx, "stolen", longTTL, fencedlock.WithHeartbeat(interval))
				require.NoError(t, err)
				time.Sleep(interval / 2)
				stolen := time.Now()
				require.NoError(t, tc.steal(ctx, b.Client, l.LockKey("stolen")))
				select {
				case <-lock.Done():
				case <-time.After(5 * time.Second):
					t.Fatal("Done not closed after the key was " + tc.name)
				}
				took := time.Since(stolen)
				assert.Less(t, took, interval+100*time.Millisecond, "the loss was noticed later than one interval")
				err = lock.Err()
				require.ErrorIs(t, err, fencedlock.ErrLockLost)
				after, _ := getKey(t, b, l.LockKey("stolen"))

				lost := time.Now()
				assert.ErrorIs(t, lock.Release(ctx), fencedlock.ErrLockLost)
				assert.ErrorIs(t, lock.Refresh(ctx, time.Minute), fencedlock.ErrLockLost)
				_, err = lock.TTL(ctx)
				assert.ErrorIs(t, err, fencedlock.ErrLockLost)
				time.Sleep(2 * interval)
				assert.Empty(t, log.since(lost), "commands sent for a lost Lock")
				now, _ := getKey(t, b, l.LockKey("stolen"))
				assert.Equal(t, after, now, "the lost Lock changed the key")
				requireNoGoroutinesLeft(t)
			})
		})
	}
}

// When Redis stops answering, the heartbeat keeps trying and gives the
// lock up before its TTL runs out in Redis; nothing is sent after that.
func TestHeartbeatLosesTheLockWhenRedisStopsAnswering(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		p := redistest.NewProxy(t, b.Client.Options().Addr)
		log := &commandLog{}
		c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ReadTimeout: 200 * time.Millisecond})
		c.AddHook(log)
		t.Cleanup(func() { c.Close() })
		l := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix))
		const ttl, interval = 800 * time.Millisecond, 100 * time.Millisecond
		lock, err := l.Acquire(ctx, "cut-off", ttl, fencedlock.WithHeartbeat(interval))
		require.NoError(t, err)
		time.Sleep(2 * interval)
		p.Pause()
		paused := time.Now()
		defer p.Resume()

		var pttl time.Duration
		select {
		case <-lock.Done():
			// Ask Redis directly, not through the proxy, how long the key
			// had left when the holder gave up.
			pttl, err = b.Client.PTTL(ctx, l.LockKey("cut-off")).Result()
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Fatal("the lock was not given up")
		}
		gaveUp := time.Since(paused)
		require.ErrorIs(t, lock.Err(), fencedlock.ErrLockLost)
		assert.Less(t, gaveUp, ttl, "given up after the TTL of the last refresh")
		assert.Greater(t, gaveUp, ttl-2*interval-ttl/20, "given up long before the TTL of the last refresh ran out")
		// The heartbeat kept trying while Redis was silent.
		tries := 0
		for _, cmd := range log.since(paused) {
			if cmd.name == "evalsha" || cmd.name == "eval" {
				tries++
			}
		}
		assert.GreaterOrEqual(t, tries, 2, "the heartbeat did not retry")
		if b.Real {
			assert.Positive(t, pttl, "the key expired in Redis before the holder gave up")
		}
		given := time.Now()
		p.Resume()
		time.Sleep(3 * interval)
		assert.Empty(t, log.since(given), "commands sent for a lost Lock")
		requireNoGoroutinesLeft(t)
	})
}

// Do runs fn under the lock with a heartbeat, cancels fn's context with a
// cause wrapping ErrLockLost when the lock is lost, and releases afterwards
// even when ctx is done or fn panics.
func TestDo(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l := newLocker(b)

		t.Run("runs fn under the lock and releases", func(t *testing.T) {
			var token fencedlock.Token
			err := l.Do(ctx, "job", longTTL, func(ctx context.Context, lock *fencedlock.Lock) error {
				token = lock.Token()
				v, ok := getKey(t, b, l.LockKey("job"))
				assert.True(t, ok)
				assert.True(t, strings.HasSuffix(v, ":"+token.String()))
				return nil
			})
			require.NoError(t, err)
			assert.NotZero(t, token)
			assert.False(t, keyExists(t, b, l.LockKey("job")), "Do did not release")
		})

		t.Run("returns fn's error", func(t *testing.T) {
			boom := errors.New("boom")
			err := l.Do(ctx, "job", longTTL, func(context.Context, *fencedlock.Lock) error { return boom })
			assert.Equal(t, boom, err)
			assert.False(t, keyExists(t, b, l.LockKey("job")))
		})

		t.Run("cancels fn's context when the lock is lost", func(t *testing.T) {
			const ttl = 600 * time.Millisecond // heartbeat every 200ms
			err := l.Do(ctx, "lost", ttl, func(fctx context.Context, lock *fencedlock.Lock) error {
				require.NoError(t, b.Client.Set(ctx, l.LockKey("lost"), "thief:1", time.Minute).Err())
				select {
				case <-fctx.Done():
				case <-time.After(5 * time.Second):
					t.Error("fn's context not cancelled after the lock was lost")
				}
				assert.ErrorIs(t, lock.Err(), fencedlock.ErrLockLost)
				return context.Cause(fctx)
			})
			assert.ErrorIs(t, err, fencedlock.ErrLockLost)
			v, _ := getKey(t, b, l.LockKey("lost"))
			assert.Equal(t, "thief:1", v, "Do's release touched the new owner's lock")
		})

		t.Run("a job that fails after the lock is lost", func(t *testing.T) {
			const ttl = 600 * time.Millisecond
			jobErr := errors.New("job interrupted")
			err := l.Do(ctx, "lostjob", ttl, func(fctx context.Context, lock *fencedlock.Lock) error {
				require.NoError(t, b.Client.Set(ctx, l.LockKey("lostjob"), "thief:1", time.Minute).Err())
				<-fctx.Done()
				// What a job typically returns: its own error, wrapping
				// the ctx's plain error.
				return fmt.Errorf("%w: %w", jobErr, fctx.Err())
			})
			assert.ErrorIs(t, err, fencedlock.ErrLockLost, "Do's error must say the lock was lost")
			assert.ErrorIs(t, err, jobErr, "and carry fn's error")
			assert.ErrorIs(t, err, context.Canceled)
		})

		t.Run("releases when ctx is done", func(t *testing.T) {
			cctx, cancel := context.WithCancel(ctx)
			err := l.Do(cctx, "cancelled", longTTL, func(fctx context.Context, _ *fencedlock.Lock) error {
				cancel()
				<-fctx.Done()
				assert.ErrorIs(t, context.Cause(fctx), context.Canceled)
				return fctx.Err()
			})
			assert.ErrorIs(t, err, context.Canceled)
			assert.False(t, keyExists(t, b, l.LockKey("cancelled")), "Do did not release after ctx ended")
		})

		t.Run("releases when fn panics", func(t *testing.T) {
			assert.PanicsWithValue(t, "oops", func() {
				_ = l.Do(ctx, "panic", longTTL, func(context.Context, *fencedlock.Lock) error { panic("oops") })
			})
			assert.False(t, keyExists(t, b, l.LockKey("panic")), "Do did not release after fn panicked")
		})

		t.Run("acquire error", func(t *testing.T) {
			holder := mustTryAcquire(t, ctx, l, "busy", longTTL)
			defer holder.Release(ctx)
			wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			ran := false
			err := l.Do(wctx, "busy", longTTL, func(context.Context, *fencedlock.Lock) error { ran = true; return nil })
			assert.ErrorIs(t, err, fencedlock.ErrNotAcquired)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.False(t, ran)
		})

		t.Run("bad input", func(t *testing.T) {
			assert.ErrorIs(t, l.Do(ctx, "x", longTTL, nil), fencedlock.ErrInvalidArgument)
			assert.ErrorIs(t, l.Do(ctx, "", longTTL, func(context.Context, *fencedlock.Lock) error { return nil }), fencedlock.ErrInvalidArgument)
			_, err := l.Acquire(ctx, "x", time.Second, fencedlock.WithHeartbeat(time.Second))
			assert.ErrorIs(t, err, fencedlock.ErrInvalidArgument)
			_, err = l.Acquire(ctx, "x", time.Second, fencedlock.WithHeartbeat(600*time.Millisecond))
			assert.ErrorIs(t, err, fencedlock.ErrInvalidArgument, "an interval above half the TTL")
			_, err = l.Acquire(ctx, "x", time.Second, fencedlock.WithHeartbeat(-1))
			assert.ErrorIs(t, err, fencedlock.ErrInvalidArgument)
			_, err = l.Acquire(ctx, "x", time.Second, fencedlock.WithHeartbeat(10))
			assert.ErrorIs(t, err, fencedlock.ErrInvalidArgument, "an interval of 10ns, which would refresh without pause")
		})
		requireNoGoroutinesLeft(t)
	})
}

// failScriptsHook is a client hook that fails every script call at once,
// as a refused connection would, while on is set.
type failScriptsHook struct{ on atomic.Bool }

func (h *failScriptsHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *failScriptsHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *failScriptsHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.on.Load() && strings.HasPrefix(strings.ToLower(cmd.Name()), "eval") {
			err := errors.New("lt: connection refused")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// Refreshes that fail at once are retried, and the lock is given up while
// its key still lives in Redis, not at or after its expiry.
func TestHeartbeatLosesTheLockWhenRefreshesFail(t *testing.T) {
	b := redistest.Real(t)
	ctx := testCtx(t)
	h := &failScriptsHook{}
	c := redis.NewClient(&redis.Options{Addr: b.Client.Options().Addr, MaxRetries: -1})
	c.AddHook(h)
	t.Cleanup(func() { c.Close() })
	l := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix))
	const ttl = 1200 * time.Millisecond
	lock, err := l.Acquire(ctx, "failing", ttl, fencedlock.WithHeartbeat(0))
	require.NoError(t, err)
	time.Sleep(50 * time.Millisecond)
	h.on.Store(true)
	select {
	case <-lock.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the lock was not given up")
	}
	pttl, err := b.Client.PTTL(ctx, l.LockKey("failing")).Result()
	require.NoError(t, err)
	t.Logf("given up with %v left in Redis", pttl)
	assert.Positive(t, pttl, "the key had expired in Redis when the holder gave up")
	assert.ErrorIs(t, lock.Err(), fencedlock.ErrLockLost)
	requireNoGoroutinesLeft(t)
}

// A Refresh to a TTL below twice the interval makes the heartbeat refresh
// every third of that TTL: the lock does not expire under it.
func TestHeartbeatFollowsAShorterRefresh(t *testing.T) {
	b := redistest.Real(t)
	ctx := testCtx(t)
	l := newLocker(b)
	lock, err := l.Acquire(ctx, "shorter", 3*time.Second, fencedlock.WithHeartbeat(time.Second))
	require.NoError(t, err)
	require.NoError(t, lock.Refresh(ctx, 300*time.Millisecond))
	time.Sleep(time.Second)
	assert.NoError(t, lock.Err())
	left, err := lock.TTL(ctx)
	require.NoError(t, err, "the key expired under the heartbeat")
	assert.Greater(t, left, 100*time.Millisecond)
	require.NoError(t, lock.Release(ctx))
	requireNoGoroutinesLeft(t)
}

// Do returns within its ctx even when the release after fn gets no
// answer: the release goes on in the background.
func TestDoKeepsItsDeadlineWhenTheReleaseStalls(t *testing.T) {
	b := redistest.Real(t)
	s := newStalledRedis(t, b, false)
	returnsWithin(t, "Do", 400*time.Millisecond, func(ctx context.Context) error {
		return s.l.Do(ctx, "do", longTTL, func(fctx context.Context, lock *fencedlock.Lock) error {
			s.p.Pause()
			<-fctx.Done()
			return fctx.Err()
		})
	})
	s.p.Resume()
	requireNoGoroutinesLeftWithin(t, 10*time.Second)
}
