package fencedlock_test

// Odd values in a resource's keys: Inspect and IssueToken read them as
// the scripts do.

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// A counter every script refuses as corrupt (leading zeros, above 2^63-1)
// is ErrCorrupt to Inspect too, not a counter.
func TestInspectRefusesACounterTheScriptsRefuse(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l := newLocker(b)
		for _, c := range []string{"00012", "9999999999999999999"} {
			res := "odd-counter-" + c
			require.NoError(t, b.Client.Set(ctx, l.TokenKey(res), c, 0).Err())
			info, ierr := l.Inspect(ctx, res)
			_, aerr := l.TryAcquire(ctx, res, longTTL)
			require.ErrorIs(t, aerr, fencedlock.ErrCorrupt, "the scripts refuse counter %q", c)
			assert.ErrorIs(t, ierr, fencedlock.ErrCorrupt, "Inspect of counter %q = %+v, %v", c, info, ierr)
		}
	})
}

// A deadlines entry that is no waiter (malformed: not "owner:ttl", and in
// no queue) is not counted as one, though its deadline is ahead.
func TestInspectCountsOnlyWellFormedWaiters(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l := newLocker(b)
		_, deadlines := queueKeys(l, "odd")
		future := time.Now().Add(time.Minute).UnixMilli()
		require.NoError(t, b.Client.HSet(ctx, deadlines, "garbage", future).Err())
		info, err := l.Inspect(ctx, "odd")
		require.NoError(t, err)
		assert.Equal(t, 0, info.Waiters)
	})
}

// A new grant whose record of the previous grant holds 2^63-1, its
// counter missing (deleted, evicted): no higher token exists, and the
// script refuses (ErrCorrupt) before it writes anything.
func TestIssueTokenAfterTheHighestTokenWritesNothing(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := newIssueEnv(t, b, "maxother")
		e.grant(t, "mine")
		record := e.locker.IssuedRecordKey(e.lockKey)
		require.NoError(t, b.Client.HSet(e.ctx, record, "v", "other", "t", "9223372036854775807").Err())
		before := dumpKeys(t, b)
		_, err := e.locker.IssueToken(e.ctx, e.lockKey, "mine")
		assert.ErrorIs(t, err, fencedlock.ErrCorrupt)
		assert.Equal(t, before, dumpKeys(t, b), "nothing changed")
	})
}
