package fencedlock_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// ltRequireUnavailable checks that err says the backend is down, not who
// holds the lock.
func ltRequireUnavailable(t *testing.T, err error, what string) {
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
	ctx := ltCtx(t)
	c := srv.Client(t)
	l := fencedlock.New(c)
	store := fencedlock.NewRedisStore(c)
	held := ltTryAcquire(t, ctx, l, "held", ltLongTTL)
	srv.Kill()

	check := func(what string, err error) {
		t.Helper()
		ltRequireUnavailable(t, err, what)
		var op *net.OpError
		assert.ErrorAs(t, err, &op, what)
		assert.Contains(t, err.Error(), "refused", what)
		assert.NotContains(t, err.Error(), "the grant the lost reply may have carried", what)
	}
	// A ctx that ends while go-redis still retries its dial: go-redis
	// itself then returns ctx's error, so only ErrUnavailable can be said.
	checkShort := func(what string, err error) {
		t.Helper()
		ltRequireUnavailable(t, err, what)
		assert.ErrorIs(t, err, context.DeadlineExceeded, what)
	}
	_, err := l.TryAcquire(ctx, "r", ltLongTTL)
	check("TryAcquire", err)
	actx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = l.Acquire(actx, "r", ltLongTTL)
	cancel()
	checkShort("Acquire", err)
	_, err = l.Acquire(ctx, "r", ltLongTTL)
	check("Acquire", err)
	check("Refresh", held.Refresh(ctx, ltLongTTL))
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
			ctx := ltCtx(t)
			c := srv.Client(t)
			l := fencedlock.New(c)
			store := fencedlock.NewRedisStore(c)
			held := ltTryAcquire(t, ctx, l, "held", ltLongTTL)
			require.NoError(t, c.Do(ctx, setup...).Err())
			check := func(what string, err error) {
				t.Helper()
				ltRequireUnavailable(t, err, what)
				var rerr redis.Error
				assert.ErrorAs(t, err, &rerr, what)
				assert.Contains(t, err.Error(), name, what)
			}
			_, err := l.TryAcquire(ctx, "r", ltLongTTL)
			check("TryAcquire", err)
			actx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			_, err = l.Acquire(actx, "r", ltLongTTL)
			cancel()
			check("Acquire", err)
			check("Put", store.Put(ctx, "r", 1, []byte("v")))
			if name == "READONLY" { // OOM lets commands that free or keep memory run
				check("Refresh", held.Refresh(ctx, ltLongTTL))
				check("Release", held.Release(ctx))
			}
			assert.NoError(t, held.Err())
		})
	}
}

// Resource names longer than MaxResourceLen are refused before anything is
// sent, and no error repeats a long name whole.
func TestResourceNameLimit(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := ltCtx(t)
		l := ltLocker(b)
		huge := strings.Repeat("n", 1<<20)
		over := strings.Repeat("o", fencedlock.MaxResourceLen+1)
		for _, name := range []string{huge, over} {
			check := func(what string, err error) {
				t.Helper()
				assert.ErrorIs(t, err, fencedlock.ErrInvalidArgument, what)
				if err != nil {
					assert.Less(t, len(err.Error()), 400, "%s: the error repeats the name: %.400s", what, err)
				}
			}
			_, err := l.TryAcquire(ctx, name, ltLongTTL)
			check("TryAcquire", err)
			_, err = l.Acquire(ctx, name, ltLongTTL)
			check("Acquire", err)
			check("Do", l.Do(ctx, name, ltLongTTL, func(context.Context, *fencedlock.Lock) error { return nil }))
			check("Advance", l.Advance(ctx, name, 5))
			_, err = l.IssueToken(ctx, name, "owner")
			check("IssueToken", err)
			check("AdvanceIssued", l.AdvanceIssued(ctx, name, 5))
			for _, s := range ltStores(b) {
				check(s.name+".Put", s.store.Put(ctx, name, 1, []byte("v")))
				_, _, err = s.store.Get(ctx, name)
				check(s.name+".Get", err)
			}
		}
		assert.Empty(t, ltKeys(t, b), "a refused name wrote to Redis")

		longest := strings.Repeat("m", fencedlock.MaxResourceLen)
		lock := ltTryAcquire(t, ctx, l, longest, ltLongTTL)
		for _, s := range ltStores(b) {
			require.NoError(t, s.store.Put(ctx, longest, lock.Token(), []byte("v")), s.name)
			_, tok, err := s.store.Get(ctx, longest)
			require.NoError(t, err, s.name)
			assert.Equal(t, lock.Token(), tok)
		}
		_, err := l.IssueToken(ctx, longest, "owner")
		assert.ErrorIs(t, err, fencedlock.ErrLockLost, "IssueToken on a lock key of MaxResourceLen bytes")
		require.NoError(t, lock.Release(ctx))
		// Errors about a long name quote only its start.
		_, err = ltLocker(b).TryAcquire(ctx, longest, ltLongTTL)
		require.NoError(t, err)
		_, err = ltLocker(b).TryAcquire(ctx, longest, ltLongTTL)
		require.ErrorIs(t, err, fencedlock.ErrNotAcquired)
		assert.Less(t, len(err.Error()), 400, "%.400s", err)
	})
}
