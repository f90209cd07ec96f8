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

// keyPTTL returns key's PTTL: -2 when missing, -1 without expiry.
func keyPTTL(t *testing.T, b *redistest.Backend, key string) time.Duration {
	t.Helper()
	d, err := b.Client.PTTL(context.Background(), key).Result()
	require.NoError(t, err)
	if d < 0 {
		return d / time.Nanosecond // go-redis returns -1ns / -2ns for -1 / -2
	}
	return d
}

// passIdle lets idle pass on b: for real on a redis-server, with the
// clocks moved on miniredis (its keys expire only when told, and TIME
// follows SetTime).
func passIdle(t *testing.T, b *redistest.Backend, d time.Duration) {
	t.Helper()
	if b.Real {
		time.Sleep(d)
		return
	}
	b.Miniredis().SetTime(time.Now().Add(d))
	b.FastForward(t, d)
}

// The keys of a resource expire once it has been idle for the Locker's
// idle expiry; the next token is still above every earlier one.
func TestIdleExpiry(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		const idle, ttl = time.Second, 200 * time.Millisecond
		l := fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix), fencedlock.WithIdleExpiry(idle))

		lock := mustTryAcquire(t, ctx, l, "idle", ttl)
		left := keyPTTL(t, b, l.TokenKey("idle"))
		assert.Greater(t, left, idle, "the counter must outlive the lock by the idle expiry")
		assert.LessOrEqual(t, left, ttl+idle)
		require.NoError(t, lock.Release(ctx))

		passIdle(t, b, ttl+idle+100*time.Millisecond)
		assert.Empty(t, testKeys(t, b), "keys left after the resource was idle")
		next := mustTryAcquire(t, ctx, l, "idle", ttl)
		assert.Greater(t, next.Token(), lock.Token(), "a re-seeded counter gave a token not above the last")
		require.NoError(t, next.Release(ctx))
	})
}

// A held lock's counter never expires before the lock: the grant and every
// refresh keep it for the lock's TTL plus the idle expiry.
func TestIdleExpiryKeepsAHeldLocksCounter(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		const idle = time.Second
		l := fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix), fencedlock.WithIdleExpiry(idle))
		lock := mustTryAcquire(t, ctx, l, "held", 10*time.Second)
		assert.Greater(t, keyPTTL(t, b, l.TokenKey("held")), 10*time.Second)
		require.NoError(t, lock.Refresh(ctx, time.Minute))
		assert.Greater(t, keyPTTL(t, b, l.TokenKey("held")), time.Minute)
		// A shorter refresh does not shorten it.
		require.NoError(t, lock.Refresh(ctx, 2*time.Second))
		assert.Greater(t, keyPTTL(t, b, l.TokenKey("held")), time.Minute-time.Second)
		require.NoError(t, lock.Release(ctx))

		// A heartbeat keeps it too.
		hb, err := l.Acquire(ctx, "beat", 300*time.Millisecond, fencedlock.WithHeartbeat(0))
		require.NoError(t, err)
		for i := 0; i < 3; i++ {
			passIdle(t, b, 200*time.Millisecond)
			if !b.Real {
				require.NoError(t, hb.Refresh(ctx, 300*time.Millisecond)) // miniredis: no timers of its own
			}
			assert.Greater(t, keyPTTL(t, b, l.TokenKey("beat")), idle, "round %d", i)
		}
		require.NoError(t, hb.Release(ctx))
	})
}

// A counter ahead of the clock (raised by Advance) never expires: a
// counter seeded from the clock after its expiry would give lower tokens.
func TestIdleExpiryKeepsACounterAheadOfTheClock(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l := fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix), fencedlock.WithIdleExpiry(time.Hour))
		ahead := fencedlock.Token(serverMicros(t, b) + uint64(48*time.Hour/time.Microsecond))
		require.NoError(t, l.Advance(ctx, "ahead", ahead))
		lock := mustTryAcquire(t, ctx, l, "ahead", time.Second)
		assert.Greater(t, lock.Token(), ahead)
		assert.Equal(t, time.Duration(-1), keyPTTL(t, b, l.TokenKey("ahead")), "a counter ahead of the clock got an expiry")
		require.NoError(t, lock.Release(ctx))

		// Kept while ahead, even when the server clock later steps back
		// (by less than the idle expiry): the next token is still higher.
		if !b.Real {
			m := b.Miniredis()
			now := time.Now()
			m.SetTime(now)
			near := fencedlock.Token(serverMicros(t, b) + uint64((time.Hour+time.Second-time.Millisecond)/time.Microsecond))
			require.NoError(t, l.Advance(ctx, "step", near))
			first := mustTryAcquire(t, ctx, l, "step", time.Second)
			require.NoError(t, first.Release(ctx))
			passIdle(t, b, time.Hour+time.Second+time.Millisecond)
			m.SetTime(now.Add(time.Hour + time.Second - 2*time.Second)) // the clock steps back 2s
			next := mustTryAcquire(t, ctx, l, "step", time.Second)
			assert.Greater(t, next.Token(), first.Token(), "a clock step back of 2s (idle 1h) gave a lower token")
			require.NoError(t, next.Release(ctx))
		}

		// Advance to a floor behind the clock: the counter expires as usual.
		require.NoError(t, l.Advance(ctx, "behind", 5))
		left := keyPTTL(t, b, l.TokenKey("behind"))
		assert.Greater(t, left, time.Duration(0), "a counter behind the clock got no expiry")
		assert.LessOrEqual(t, left, time.Hour)
	})
}

// IssueToken's counter and record expire with the lock key's TTL plus the
// idle expiry, and never for a lock key without expiry.
func TestIdleExpiryOfIssuedTokens(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		const idle = time.Second
		l := fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix), fencedlock.WithIdleExpiry(idle))
		key := b.Prefix + ":other-lib"
		require.NoError(t, b.Client.Set(ctx, key, "owner-1", time.Second).Err())
		tok, err := l.IssueToken(ctx, key, "owner-1")
		require.NoError(t, err)
		for _, k := range []string{l.IssuedTokenKey(key), l.IssuedRecordKey(key)} {
			left := keyPTTL(t, b, k)
			assert.Greater(t, left, time.Second, k)
			assert.LessOrEqual(t, left, time.Second+idle, k)
		}
		require.NoError(t, b.Client.Del(ctx, key).Err())
		passIdle(t, b, time.Second+idle+100*time.Millisecond)
		assert.Empty(t, testKeys(t, b), "IssueToken's keys outlived the idle lock key")

		// The same grant asking again after its counter was lost: the
		// counter is rebuilt from the record, with the record's expiry.
		require.NoError(t, b.Client.Set(ctx, key, "owner-3", time.Second).Err())
		tok3, err := l.IssueToken(ctx, key, "owner-3")
		require.NoError(t, err)
		require.NoError(t, b.Client.Del(ctx, l.IssuedTokenKey(key)).Err())
		again, err := l.IssueToken(ctx, key, "owner-3")
		require.NoError(t, err)
		assert.Equal(t, tok3, again)
		assert.Greater(t, keyPTTL(t, b, l.IssuedTokenKey(key)), time.Duration(0), "the rebuilt counter is kept for ever")

		require.NoError(t, b.Client.Set(ctx, key, "owner-2", 0).Err())
		next, err := l.IssueToken(ctx, key, "owner-2")
		require.NoError(t, err)
		assert.Greater(t, next, tok)
		assert.Equal(t, time.Duration(-1), keyPTTL(t, b, l.IssuedTokenKey(key)), "a lock key without expiry keeps its counter")
		assert.Equal(t, time.Duration(-1), keyPTTL(t, b, l.IssuedRecordKey(key)))
	})
}

// WithIdleExpiry(0) keeps the keys for ever; bad values are refused by
// every call; values in a RedisStore never expire.
func TestIdleExpiryOptions(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l := fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix), fencedlock.WithIdleExpiry(0))
		lock := mustTryAcquire(t, ctx, l, "forever", time.Second)
		assert.Equal(t, time.Duration(-1), keyPTTL(t, b, l.TokenKey("forever")))
		store := newRedisStore(b)
		require.NoError(t, store.Put(ctx, "forever", lock.Token(), []byte("v")))
		assert.Equal(t, time.Duration(-1), keyPTTL(t, b, store.Key("forever")))
		require.NoError(t, lock.Release(ctx))

		def := newLocker(b)
		lock = mustTryAcquire(t, ctx, def, "default", time.Second)
		left := keyPTTL(t, b, def.TokenKey("default"))
		assert.Greater(t, left, fencedlock.DefaultIdleExpiry)
		assert.LessOrEqual(t, left, fencedlock.DefaultIdleExpiry+time.Second)
		require.NoError(t, lock.Release(ctx))

		for _, d := range []time.Duration{-time.Second, time.Millisecond, 999 * time.Millisecond} {
			bad := fencedlock.New(b.Client, fencedlock.WithIdleExpiry(d))
			_, err := bad.TryAcquire(ctx, "r", time.Second)
			assert.ErrorIs(t, err, fencedlock.ErrInvalidArgument, "%v", d)
			_, err = bad.Acquire(ctx, "r", time.Second)
			assert.ErrorIs(t, err, fencedlock.ErrInvalidArgument, "%v", d)
			_, err = bad.IssueToken(ctx, "k", "v")
			assert.ErrorIs(t, err, fencedlock.ErrInvalidArgument, "%v", d)
			assert.ErrorIs(t, bad.Advance(ctx, "r", 5), fencedlock.ErrInvalidArgument, "%v", d)
		}
	})
}

// A waiter with a long TTL keeps its place in the queue when a waiter
// with a short one joins and gives up: the queue's keys never get a
// shorter expiry than their longest-lived entry.
func TestIdleExpiryKeepsALongLivedWaitersPlace(t *testing.T) {
	b := redistest.Real(t)
	ctx := testCtx(t)
	mk := func() *fencedlock.Locker {
		return fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix), fencedlock.WithIdleExpiry(time.Second))
	}
	holder := mustTryAcquire(t, ctx, mk(), "q", longTTL)
	longLocker := mk()
	long := acquireAsync(ctx, longLocker, "q", 10*time.Second, hourRetryDelay) // renews its place every 3.3s
	awaitQueued(t, b, longLocker, "q")
	sctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	_, err := mk().Acquire(sctx, "q", 100*time.Millisecond)
	cancel()
	require.ErrorIs(t, err, fencedlock.ErrNotAcquired)
	time.Sleep(1200 * time.Millisecond) // past the short waiter's life and the idle expiry
	require.Equal(t, int64(1), queuedCount(t, b, mk(), "q"), "the long-lived waiter lost its place")
	require.NoError(t, holder.Release(ctx))
	lock := awaitAcquired(t, long)
	require.NoError(t, lock.Release(ctx))
}
