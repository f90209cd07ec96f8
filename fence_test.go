package fencedlock_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

func TestCheckToken(t *testing.T) {
	tests := []struct {
		name           string
		current, token fencedlock.Token
		wantStale      bool
		wantInvalid    bool
	}{
		{name: "lower is stale", current: 10, token: 9, wantStale: true},
		{name: "much lower is stale", current: math.MaxUint64, token: 1, wantStale: true},
		{name: "equal passes", current: 10, token: 10},
		{name: "higher passes", current: 10, token: 11},
		{name: "no value yet passes", current: 0, token: 1},
		{name: "max over max passes", current: math.MaxUint64, token: math.MaxUint64},
		{name: "zero token is invalid", current: 0, token: 0, wantInvalid: true},
		{name: "zero token against a value is invalid", current: 5, token: 0, wantInvalid: true},
	}
	for _, tc := range tests {
		tc := tc
		t.Run(tc.name, func(t *testing.T) {
			err := fencedlock.CheckToken("res", tc.token, tc.current)
			switch {
			case tc.wantStale:
				var se *fencedlock.StaleTokenError
				require.True(t, errors.As(err, &se), "want *StaleTokenError, got %v", err)
				assert.Equal(t, fencedlock.StaleTokenError{Resource: "res", Token: tc.token, Current: tc.current}, *se)
				assert.ErrorIs(t, err, fencedlock.ErrStaleToken)
				assert.NotErrorIs(t, err, fencedlock.ErrInvalidToken)
			case tc.wantInvalid:
				require.Error(t, err)
				assert.ErrorIs(t, err, fencedlock.ErrInvalidToken)
				assert.NotErrorIs(t, err, fencedlock.ErrStaleToken)
				assert.Contains(t, err.Error(), `"res"`)
			default:
				assert.NoError(t, err)
			}
		})
	}
}

// The scenario fencing exists for: holder A pauses past its TTL, B takes
// over and writes, and A's late write, refresh and release all fail
// without touching B's value or lock.
func TestPausedHolderIsFenced(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l := newLocker(b)
		const res = "order-queue"
		stores := bothStores(b)

		a := mustTryAcquire(t, ctx, l, res, 30*time.Second)
		for _, s := range stores {
			require.NoError(t, s.store.Put(ctx, res, a.Token(), []byte("A1")), s.name)
		}

		// A pauses past its TTL; B takes over.
		b.FastForward(t, 31*time.Second)
		bl := mustTryAcquire(t, ctx, l, res, 30*time.Second)
		require.Greater(t, bl.Token(), a.Token(), "a new grant must carry a higher token")

		for _, s := range stores {
			s := s
			t.Run(s.name, func(t *testing.T) {
				require.NoError(t, s.store.Put(ctx, res, bl.Token(), []byte("B")))
				// A resumes and writes with its old token.
				err := s.store.Put(ctx, res, a.Token(), []byte("A2"))
				requireStale(t, err, res, a.Token(), bl.Token())
				requireValue(t, ctx, s.store, res, "B", bl.Token())
			})
		}

		owner, ok := getKey(t, b, l.LockKey(res))
		require.True(t, ok, "B's lock key must exist")

		// A's late Refresh asks for far more than B's TTL, so an extension
		// of B's lock would show in B's TTL below.
		assert.ErrorIs(t, a.Refresh(ctx, time.Hour), fencedlock.ErrLockLost)
		assert.ErrorIs(t, a.Release(ctx), fencedlock.ErrLockLost)
		_, err := a.TTL(ctx)
		assert.ErrorIs(t, err, fencedlock.ErrLockLost)

		// B's lock is untouched.
		after, ok := getKey(t, b, l.LockKey(res))
		require.True(t, ok, "A's late Release deleted B's lock")
		assert.Equal(t, owner, after, "A's calls changed B's lock key")
		ttl, err := bl.TTL(ctx)
		require.NoError(t, err)
		assert.Greater(t, ttl, time.Duration(0))
		assert.LessOrEqual(t, ttl, 30*time.Second, "A's late Refresh extended B's lock")
		_, err = l.TryAcquire(ctx, res, longTTL)
		assert.ErrorIs(t, err, fencedlock.ErrNotAcquired, "B's lock must still exclude others")
		require.NoError(t, bl.Refresh(ctx, 30*time.Second))
		require.NoError(t, bl.Release(ctx))
		assert.False(t, keyExists(t, b, l.LockKey(res)))
	})
}
