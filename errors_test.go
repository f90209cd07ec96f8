package fencedlock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// requireUnavailable checks that err says the backend is down, not who
// holds the lock.
func requireUnavailable(t *testing.T, err error, what string) {
	t.Helper()
	require.Error(t, err, what)
	assert.ErrorIs(t, err, fencedlock.ErrUnavailable, what)
	assert.NotErrorIs(t, err, fencedlock.ErrNotAcquired, what)
	assert.NotErrorIs(t, err, fencedlock.ErrLockLost, what)
}

// A Redis that refuses connections reads as unavailable, never as a lock
// held by another owner or a lock lost; the error says the connection was
// refused, and does not speak of a grant that no request could carry.
func TestRefusedConnectionIsUnavailable(t *testing.T) {
	srv := redistest.Start(t)
	ctx := testCtx(t)
	c := srv.Client(t)
	l := fencedlock.New(c)
	store := fencedlock.NewRedisStore(c)
	held := mustTryAcquire(t, ctx, l, "held", longTTL)
	srv.Kill()

	check := func(what string, err error) {
		t.Helper()
		requireUnavailable(t, err, what)
		var op *net.OpError
		assert.ErrorAs(t, err, &op, what)
		assert.Contains(t, err.Error(), "refused", what)
		assert.NotContains(t, err.Error(), "the grant the lost reply may have carried", what)
	}
	// A ctx that ends while go-redis still retries its dial: go-redis
	// itself then returns ctx's error, so only ErrUnavailable can be said.
	checkShort := func(what string, err error) {
		t.Helper()
		requireUnavailable(t, err, what)
		assert.ErrorIs(t, err, context.DeadlineExceeded, what)
	}
	_, err := l.TryAcquire(ctx, "r", longTTL)
	check("TryAcquire", err)
	actx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = l.Acquire(actx, "r", longTTL)
	cancel()
	checkShort("Acquire", err)
	// Acquire rides out the refusals while its ctx lasts, then reports
	// the last of them with ctx's error. (go-redis takes about two
	// seconds to give up dialing, retries included.)
	actx, cancel = context.WithTimeout(ctx, 5*time.Second)
	_, err = l.Acquire(actx, "r", longTTL)
	cancel()
	check("Acquire", err)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "Acquire")
	check("Refresh", held.Refresh(ctx, longTTL))
	_, err = held.TTL(ctx)
	check("TTL", err)
	_, err = l.IssueToken(ctx, "other", "owner")
	check("IssueToken", err)
	check("Advance", l.Advance(ctx, "r", 10))
	check("AdvanceIssued", l.AdvanceIssued(ctx, "other", 10))
	check("Put", store.Put(ctx, "r", 1, []byte("v")))
	_, _, err = store.Get(ctx, "r")
	check("Get", err)
	check("Release", held.Release(ctx))
	assert.NoError(t, held.Err(), "an unreachable Redis ended the Lock")
}

// Error replies that are not about the lock (here OOM and READONLY) are
// ErrUnavailable, with the redis.Error.
func TestErrorRepliesAreUnavailable(t *testing.T) {
	for name, setup := range map[string][]any{
		"OOM":      {"CONFIG", "SET", "maxmemory", "1"},
		"READONLY": {"REPLICAOF", "127.0.0.1", "1"},
	} {
		t.Run(name, func(t *testing.T) {
			srv := redistest.Start(t)
			ctx := testCtx(t)
			c := srv.Client(t)
			l := fencedlock.New(c)
			store := fencedlock.NewRedisStore(c)
			held := mustTryAcquire(t, ctx, l, "held", longTTL)
			require.NoError(t, c.Do(ctx, setup...).Err())
			check := func(what string, err error) {
				t.Helper()
				requireUnavailable(t, err, what)
				var rerr redis.Error
				assert.ErrorAs(t, err, &rerr, what)
				assert.Contains(t, err.Error(), name, what)
			}
			_, err := l.TryAcquire(ctx, "r", longTTL)
			check("TryAcquire", err)
			actx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			_, err = l.Acquire(actx, "r", longTTL)
			cancel()
			check("Acquire", err)
			check("Put", store.Put(ctx, "r", 1, []byte("v")))
			if name == "READONLY" { // OOM lets commands that free or keep memory run
				check("Refresh", held.Refresh(ctx, longTTL))
				check("Release", held.Release(ctx))
			}
			assert.NoError(t, held.Err())
		})
	}
}

func TestStaleTokenErrorMessage(t *testing.T) {
	err := &fencedlock.StaleTokenError{Resource: "order-queue", Token: 1795969516343361, Current: 1795969516343362}
	msg := err.Error()
	assert.Contains(t, msg, `"order-queue"`)
	assert.Contains(t, msg, "1795969516343361")
	assert.Contains(t, msg, "1795969516343362")
	assert.Contains(t, msg, "fencedlock:")
}

func TestStaleTokenErrorWrapping(t *testing.T) {
	orig := fencedlock.CheckToken("r", 3, 7)
	require.Error(t, orig)

	wrapped := fmt.Errorf("saving order: %w", fmt.Errorf("put: %w", orig))
	assert.ErrorIs(t, wrapped, fencedlock.ErrStaleToken)
	assert.NotErrorIs(t, wrapped, fencedlock.ErrLockLost)
	assert.NotErrorIs(t, wrapped, fencedlock.ErrNotAcquired)

	var se *fencedlock.StaleTokenError
	require.True(t, errors.As(wrapped, &se))
	assert.Equal(t, "r", se.Resource)
	assert.Equal(t, fencedlock.Token(3), se.Token)
	assert.Equal(t, fencedlock.Token(7), se.Current)
	assert.Contains(t, wrapped.Error(), se.Error())

	joined := errors.Join(errors.New("other"), orig)
	assert.ErrorIs(t, joined, fencedlock.ErrStaleToken)
	require.True(t, errors.As(joined, &se))

	// A StaleTokenError matches only ErrStaleToken, not other sentinels,
	// and other errors do not match it.
	for _, sentinel := range []error{fencedlock.ErrLockLost, fencedlock.ErrNotFound, fencedlock.ErrInvalidToken, fencedlock.ErrCorrupt, fencedlock.ErrInvalidArgument} {
		assert.NotErrorIs(t, orig, sentinel)
		assert.False(t, errors.As(sentinel, &se))
	}
	// A formatted copy of the message is not the error.
	assert.NotErrorIs(t, errors.New(orig.Error()), fencedlock.ErrStaleToken)
}
