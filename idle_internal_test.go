package fencedlock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock/internal/redistest"
)

// An attempt that finds its own grant (a resent attempt, or a waiter's
// attempt after a hand-over whose message it missed) renews the lock and,
// with it, the counter: a held lock's counter never expires before it.
func TestRenewedGrantKeepsItsCounter(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		l := New(b.Client, WithPrefix(b.Prefix), WithIdleExpiry(time.Second))
		lock, err := l.newLock("own")
		require.NoError(t, err)
		a, err := l.attempt(ctx, lock, 5000, 0)
		require.NoError(t, err)
		require.True(t, a.Granted)
		b.FastForward(t, 3*time.Second)
		a, err = l.attempt(ctx, lock, 5000, 0)
		require.NoError(t, err)
		require.True(t, a.Granted, "its own grant")
		lockLeft, err := b.Client.PTTL(ctx, lock.keys[keyLock]).Result()
		require.NoError(t, err)
		counterLeft, err := b.Client.PTTL(ctx, lock.keys[keyToken]).Result()
		require.NoError(t, err)
		assert.Greater(t, counterLeft, lockLeft+900*time.Millisecond, "the counter would expire before the lock plus the idle expiry")
	})
}
