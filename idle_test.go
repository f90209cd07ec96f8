package fencedlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

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

// A counter ahead of the clock (raised by Advance) expires once the clock
// has passed it by the idle expiry: a counter seeded from the clock after
// its expiry gives higher tokens. One more than 30 days ahead is kept for
// ever.
func TestIdleExpiryOfACounterAheadOfTheClock(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		const idle, ahead, ttl = time.Second, 3 * time.Second, 10 * time.Second
		l := fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix), fencedlock.WithIdleExpiry(idle))
		floor := fencedlock.Token(serverMicros(t, b) + uint64(ahead/time.Microsecond))
		require.NoError(t, l.Advance(ctx, "ahead", floor))
		left := keyPTTL(t, b, l.TokenKey("ahead"))
		assert.Greater(t, left, ahead+idle-200*time.Millisecond, "a counter 3s ahead expires 3s + idle after Advance")
		assert.LessOrEqual(t, left, ahead+idle)
		passIdle(t, b, ahead+idle+100*time.Millisecond)
		assert.Empty(t, testKeys(t, b), "a counter 3s ahead outlived 3s + idle")
		lock := mustTryAcquire(t, ctx, l, "ahead", ttl)
		assert.Greater(t, lock.Token(), floor, "the clock that seeds the counter again is past it")
		require.NoError(t, lock.Release(ctx))

		// A grant from a counter ahead: the lock's TTL too.
		floor = fencedlock.Token(serverMicros(t, b) + uint64(time.Hour/time.Microsecond))
		require.NoError(t, l.Advance(ctx, "grant", floor))
		lock = mustTryAcquire(t, ctx, l, "grant", ttl)
		require.Equal(t, floor+1, lock.Token())
		left = keyPTTL(t, b, l.TokenKey("grant"))
		assert.Greater(t, left, time.Hour+ttl+idle-200*time.Millisecond)
		assert.LessOrEqual(t, left, time.Hour+ttl+idle)
		require.NoError(t, lock.Release(ctx))

		// More than 30 days ahead, or far beyond 2^53: kept for ever, by
		// Advance and by the grants that follow.
		for name, floor := range map[string]fencedlock.Token{
			"month": fencedlock.Token(serverMicros(t, b) + uint64(31*24*time.Hour/time.Microsecond)),
			"huge":  1 << 62,
		} {
			require.NoError(t, l.Advance(ctx, name, floor))
			assert.Equal(t, time.Duration(-1), keyPTTL(t, b, l.TokenKey(name)), "%s: Advance gave an expiry", name)
			lock := mustTryAcquire(t, ctx, l, name, ttl)
			assert.Equal(t, floor+1, lock.Token(), name)
			assert.Equal(t, time.Duration(-1), keyPTTL(t, b, l.TokenKey(name)), "%s: a grant gave an expiry", name)
			require.NoError(t, lock.Release(ctx))
		}

		// Advance to a floor behind the clock: the counter expires as usual.
		require.NoError(t, l.Advance(ctx, "behind", 5))
		left = keyPTTL(t, b, l.TokenKey("behind"))
		assert.Greater(t, left, time.Duration(0), "a counter behind the clock got no expiry")
		assert.LessOrEqual(t, left, idle)
	})
}

// On a frozen clock, the expiry of a counter ahead is exact: the
// microseconds it is ahead of the token a fresh counter would give,
// rounded up to milliseconds, plus the lock's TTL and the idle expiry;
// 30 days ahead at most, beyond which it is kept for ever.
func TestIdleExpiryOfACounterAheadOnAFrozenClock(t *testing.T) {
	b := redistest.Mini(t)
	ctx := testCtx(t)
	at := time.Date(2031, 5, 6, 7, 8, 9, 123456000, time.UTC)
	b.Miniredis().SetTime(at)
	us := fencedlock.Token(at.UnixMicro())
	const idle, ttl, bound = time.Hour, 10 * time.Second, 30 * 24 * time.Hour
	l := fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix), fencedlock.WithIdleExpiry(idle))
	for _, c := range []struct {
		floor fencedlock.Token
		want  time.Duration // by Advance; -1: kept for ever
	}{
		{us, idle},
		{us + 1, idle},
		{us + 2, idle + time.Millisecond},
		{us + 1001, idle + time.Millisecond},
		{us + 1002, idle + 2*time.Millisecond},
		{us + 1 + fencedlock.Token(bound/time.Microsecond), idle + bound},
		{us + 2 + fencedlock.Token(bound/time.Microsecond), -1},
	} {
		name := c.floor.String()
		require.NoError(t, l.Advance(ctx, name, c.floor))
		assert.Equal(t, c.want, keyPTTL(t, b, l.TokenKey(name)), "Advance to the clock + %d µs", c.floor-us)
	}

	// A grant: its token, one above the counter, is what is ahead.
	for _, c := range []struct {
		counter fencedlock.Token
		want    time.Duration
	}{
		{us - 7, ttl + idle},
		{us, ttl + idle},
		{us + 1, ttl + idle + time.Millisecond},
		{us + 1000, ttl + idle + time.Millisecond},
		{us + 1001, ttl + idle + 2*time.Millisecond},
		{us + fencedlock.Token(bound/time.Microsecond), ttl + idle + bound},
		{us + 1 + fencedlock.Token(bound/time.Microsecond), -1},
	} {
		name := "grant-" + c.counter.String()
		require.NoError(t, b.Client.Set(ctx, l.TokenKey(name), c.counter.String(), 0).Err())
		lock := mustTryAcquire(t, ctx, l, name, ttl)
		assert.Equal(t, max(c.counter, us)+1, lock.Token())
		assert.Equal(t, c.want, keyPTTL(t, b, l.TokenKey(name)), "a grant from a counter at the clock + %d µs", int64(c.counter-us))
	}

	// IssueToken's counter and record, when AdvanceIssued raised the
	// counter: the lock key's TTL is the lock's.
	key := b.Prefix + ":other-lib"
	require.NoError(t, b.Client.Set(ctx, key, "grant", ttl).Err())
	require.NoError(t, l.AdvanceIssued(ctx, key, us+5000))
	assert.Equal(t, idle+5*time.Millisecond, keyPTTL(t, b, l.IssuedTokenKey(key)))
	tok, err := l.IssueToken(ctx, key, "grant")
	require.NoError(t, err)
	assert.Equal(t, us+5001, tok)
	for _, k := range []string{l.IssuedTokenKey(key), l.IssuedRecordKey(key)} {
		assert.Equal(t, ttl+idle+5*time.Millisecond, keyPTTL(t, b, k), k)
	}
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

		// A lock key that loses its expiry after the grant asked: the
		// same grant asking again, or the Locker's next check, keeps both
		// keys for ever, and the Locker has nothing left to keep.
		for _, ask := range []bool{true, false} {
			value := fmt.Sprintf("owner-4-%v", ask)
			require.NoError(t, b.Client.Set(ctx, key, value, time.Minute).Err())
			_, err = l.IssueToken(ctx, key, value)
			require.NoError(t, err)
			require.Greater(t, keyPTTL(t, b, l.IssuedRecordKey(key)), time.Duration(0))
			require.NoError(t, b.Client.Persist(ctx, key).Err())
			if ask {
				_, err = l.IssueToken(ctx, key, value)
				require.NoError(t, err)
			}
			waitUntil(t, func() bool { return keyPTTL(t, b, l.IssuedRecordKey(key)) == -1 }, "the record to be kept for ever")
			assert.Equal(t, time.Duration(-1), keyPTTL(t, b, l.IssuedTokenKey(key)), "asked again: %v", ask)
			waitUntil(t, func() bool { return l.KeptIssuedGrants() == 0 }, "the grant to be forgotten")
			require.NoError(t, b.Client.Del(ctx, key).Err())
		}
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

// A hand-over on a frozen clock (miniredis's SetTime) grants the waiter
// the clock plus two: a counter a microsecond ahead of the clock. It
// expires as any other once its resource has been idle, a microsecond
// later.
func TestIdleExpiryOfACounterAheadAfterAHandOver(t *testing.T) {
	b := redistest.Mini(t)
	ctx := testCtx(t)
	b.Miniredis().SetTime(time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC))
	l := newLocker(b) // DefaultIdleExpiry: a day
	const ttl = time.Second
	holder := mustTryAcquire(t, ctx, l, "queue", ttl)
	// A waiter of another Locker, which queues in Redis at once (one of
	// l's own would be held back until the holder's release).
	other := newLocker(b)
	waiter := acquireAsync(ctx, other, "queue", ttl, hourRetryDelay)
	awaitQueued(t, b, other, "queue")
	require.NoError(t, holder.Release(ctx))
	next := awaitAcquired(t, waiter)
	require.Equal(t, holder.Token()+1, next.Token(), "handed over in the same microsecond")
	require.NoError(t, next.Release(ctx))

	b.FastForward(t, fencedlock.DefaultIdleExpiry+ttl)
	assert.Equal(t, []string{l.TokenKey("queue")}, testKeys(t, b), "the counter went before ttl + idle + 1µs")
	b.FastForward(t, time.Millisecond)
	assert.Empty(t, testKeys(t, b), "keys left a day after the last use")
}
