package fencedlock_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// Advance raises the counter, never lowers it, and gets a holder past a
// store that is ahead of the counter.
func TestAdvance(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l := newLocker(b)

		t.Run("raises the counter past the floor", func(t *testing.T) {
			tok := grantAndRelease(t, ctx, l, "up")
			floor := tok + 1_000_000
			require.NoError(t, l.Advance(ctx, "up", floor))
			next := grantAndRelease(t, ctx, l, "up")
			assert.Greater(t, next, floor)
			assert.Greater(t, grantAndRelease(t, ctx, l, "up"), next)
		})

		t.Run("below or at the counter changes nothing", func(t *testing.T) {
			// A counter behind the clock (seeded by a grant), and one ahead
			// of it, where the next grant takes exactly the next token.
			pastTheClock := fencedlock.Token(serverMicros(t, b) + 1_000_000_000_000)
			for _, ahead := range []fencedlock.Token{0, pastTheClock} {
				res := fmt.Sprintf("below-%d", ahead)
				if ahead != 0 {
					require.NoError(t, l.Advance(ctx, res, ahead))
				}
				tok := grantAndRelease(t, ctx, l, res)
				for _, floor := range []fencedlock.Token{1, tok - 1000, tok - 1, tok} {
					require.NoError(t, l.Advance(ctx, res, floor))
					c, _ := getKey(t, b, l.TokenKey(res))
					assert.Equal(t, tok.String(), c, "Advance(%d) changed the counter", floor)
				}
				next := grantAndRelease(t, ctx, l, res)
				if ahead != 0 {
					assert.Equal(t, ahead+1, tok)
					assert.Equal(t, tok+1, next, "the counter is ahead of the clock: the next grant is its INCR")
				} else {
					assert.Greater(t, next, tok)
				}
			}
		})

		t.Run("on a missing counter with a low floor seeds from the clock", func(t *testing.T) {
			before := time.Now().UnixMicro()
			require.NoError(t, l.Advance(ctx, "missing-low", 5))
			tok := grantAndRelease(t, ctx, l, "missing-low")
			assert.Greater(t, uint64(tok), uint64(before))
		})

		t.Run("on a missing counter with a high floor", func(t *testing.T) {
			// Above 2^53, where Lua numbers are not exact: every digit counts.
			floor := fencedlock.Token(1<<62 + 12345)
			require.NoError(t, l.Advance(ctx, "missing-high", floor))
			assert.Equal(t, floor+1, grantAndRelease(t, ctx, l, "missing-high"))
			assert.Equal(t, floor+2, grantAndRelease(t, ctx, l, "missing-high"))
		})

		t.Run("up to the highest floor", func(t *testing.T) {
			const maxFloor = fencedlock.Token(math.MaxInt64 - 1)
			require.NoError(t, l.Advance(ctx, "top", maxFloor))
			assert.Equal(t, fencedlock.Token(math.MaxInt64), grantAndRelease(t, ctx, l, "top"))
			// The counter cannot rise further: refused, and no lock is left.
			_, err := l.TryAcquire(ctx, "top", longTTL)
			assert.ErrorIs(t, err, fencedlock.ErrCorrupt)
			assert.False(t, keyExists(t, b, l.LockKey("top")))
		})

		t.Run("floor out of range is refused and changes nothing", func(t *testing.T) {
			tok := grantAndRelease(t, ctx, l, "range")
			for _, floor := range []fencedlock.Token{0, math.MaxInt64, math.MaxInt64 + 1, math.MaxUint64} {
				err := l.Advance(ctx, "range", floor)
				assert.ErrorIs(t, err, fencedlock.ErrInvalidToken, "floor %d", floor)
				if err != nil {
					assert.Contains(t, err.Error(), "floor")
				}
				c, _ := getKey(t, b, l.TokenKey("range"))
				assert.Equal(t, tok.String(), c, "Advance(%d) changed the counter", floor)
			}
			err := l.Advance(ctx, "range-missing", 0)
			assert.ErrorIs(t, err, fencedlock.ErrInvalidToken)
			assert.False(t, keyExists(t, b, l.TokenKey("range-missing")))
		})

		// The recovery flow: a store holds a token above the counter (the
		// counter was lost and the Redis clock is behind the store).
		for _, s := range bothStores(b) {
			s := s
			t.Run("recovery via "+s.name, func(t *testing.T) {
				res := "recover-" + s.name
				lock := mustTryAcquire(t, ctx, l, res, longTTL)
				ahead := lock.Token() + 1_000_000_000
				require.NoError(t, s.store.Put(ctx, res, ahead, []byte("from the future")))

				err := s.store.Put(ctx, res, lock.Token(), []byte("mine"))
				requireStale(t, err, res, lock.Token(), ahead)
				var se *fencedlock.StaleTokenError
				require.True(t, errors.As(err, &se))

				require.NoError(t, lock.Release(ctx))
				require.NoError(t, l.Advance(ctx, res, se.Current))
				again := mustTryAcquire(t, ctx, l, res, longTTL)
				require.Greater(t, again.Token(), se.Current)
				require.NoError(t, s.store.Put(ctx, res, again.Token(), []byte("mine")))
				requireValue(t, ctx, s.store, res, "mine", again.Token())
				require.NoError(t, again.Release(ctx))
			})
		}
	})
}

func TestNilClient(t *testing.T) {
	ctx := testCtx(t)
	clients := []struct {
		name   string
		client redis.UniversalClient
	}{
		{"nil interface", nil},
		{"typed nil *redis.Client", (*redis.Client)(nil)},
		{"typed nil *redis.ClusterClient", (*redis.ClusterClient)(nil)},
	}
	for _, c := range clients {
		c := c
		t.Run(c.name, func(t *testing.T) {
			var l *fencedlock.Locker
			var s *fencedlock.RedisStore
			require.NoError(t, noPanic(func() error {
				l = fencedlock.New(c.client)
				s = fencedlock.NewRedisStore(c.client)
				return nil
			}))
			require.NotNil(t, l)
			require.NotNil(t, s)
			requireAllRefuse(t, ctx, l, s, fencedlock.ErrInvalidArgument, "nil")
		})
	}
	t.Run("nil Locker and RedisStore", func(t *testing.T) {
		requireAllRefuse(t, ctx, nil, nil, fencedlock.ErrInvalidArgument, "nil")
	})
}

// A Locker{} or RedisStore{} built without New has no client. Its methods
// must refuse, as those of a New(nil) do, instead of panicking.
func TestZeroLockerAndRedisStore(t *testing.T) {
	requireAllRefuse(t, testCtx(t), &fencedlock.Locker{}, &fencedlock.RedisStore{}, fencedlock.ErrInvalidArgument, "")
}

// requireAllRefuse checks that every method of l and s fails with want.
func requireAllRefuse(t *testing.T, ctx context.Context, l *fencedlock.Locker, s *fencedlock.RedisStore, want error, mention string) {
	t.Helper()
	calls := map[string]func() error{
		"TryAcquire": func() error { return noLock(l.TryAcquire(ctx, "r", longTTL)) },
		"Acquire":    func() error { return noLock(l.Acquire(ctx, "r", longTTL)) },
		"Advance":    func() error { return l.Advance(ctx, "r", 5) },
		"Put":        func() error { return s.Put(ctx, "r", 5, []byte("v")) },
		"Get": func() error {
			v, tok, err := s.Get(ctx, "r")
			if v != nil || tok != 0 {
				return fmt.Errorf("Get returned %q, %d", v, tok)
			}
			return err
		},
	}
	names := make([]string, 0, len(calls))
	for name := range calls {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		err := noPanic(calls[name])
		if assert.Error(t, err, name) {
			assert.ErrorIs(t, err, want, name)
			assert.Contains(t, err.Error(), mention, name)
		}
	}
}

func TestKeyNames(t *testing.T) {
	// New and NewRedisStore do not contact Redis: nothing listens here.
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { c.Close() })
	l := fencedlock.New(c)
	assert.Equal(t, fencedlock.DefaultPrefix+":{r}:lock", l.LockKey("r"))
	assert.Equal(t, fencedlock.DefaultPrefix+":{r}:token", l.TokenKey("r"))
	s := fencedlock.NewRedisStore(c)
	assert.Equal(t, fencedlock.DefaultPrefix+":{r}:value", s.Key("r"))

	p := fencedlock.New(nil, fencedlock.WithPrefix("app"))
	assert.Equal(t, "app:{a b}:lock", p.LockKey("a b"))
}

func TestEmptyPrefix(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		res := b.Prefix + "-noprefix" // unique on the shared server
		l := fencedlock.New(b.Client, fencedlock.WithPrefix(""))
		s := fencedlock.NewRedisStore(b.Client, fencedlock.WithStorePrefix(""))
		require.Equal(t, "{"+res+"}:lock", l.LockKey(res))
		require.Equal(t, "{"+res+"}:token", l.TokenKey(res))
		require.Equal(t, "{"+res+"}:value", s.Key(res))
		t.Cleanup(func() { b.Client.Del(context.Background(), l.LockKey(res), l.TokenKey(res), s.Key(res)) })

		lock := mustTryAcquire(t, ctx, l, res, longTTL)
		assert.True(t, keyExists(t, b, l.LockKey(res)))
		assert.True(t, keyExists(t, b, l.TokenKey(res)))
		require.NoError(t, s.Put(ctx, res, lock.Token(), []byte("v")))
		assert.True(t, keyExists(t, b, s.Key(res)))
		requireValue(t, ctx, s, res, "v", lock.Token())
		require.NoError(t, l.Advance(ctx, res, lock.Token()+10))
		require.NoError(t, lock.Release(ctx))
		assert.False(t, keyExists(t, b, l.LockKey(res)))
		assert.Greater(t, grantAndRelease(t, ctx, l, res), lock.Token()+10)

		_, err := l.TryAcquire(ctx, "}"+res, longTTL)
		assert.ErrorIs(t, err, fencedlock.ErrInvalidArgument)
	})
}

// Resource names longer than MaxResourceLen are refused before anything is
// sent, and no error repeats a long name whole.
func TestResourceNameLimit(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l := newLocker(b)
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
			_, err := l.TryAcquire(ctx, name, longTTL)
			check("TryAcquire", err)
			_, err = l.Acquire(ctx, name, longTTL)
			check("Acquire", err)
			check("Do", l.Do(ctx, name, longTTL, func(context.Context, *fencedlock.Lock) error { return nil }))
			check("Advance", l.Advance(ctx, name, 5))
			_, err = l.IssueToken(ctx, name, "owner")
			check("IssueToken", err)
			check("AdvanceIssued", l.AdvanceIssued(ctx, name, 5))
			for _, s := range bothStores(b) {
				check(s.name+".Put", s.store.Put(ctx, name, 1, []byte("v")))
				_, _, err = s.store.Get(ctx, name)
				check(s.name+".Get", err)
			}
		}
		assert.Empty(t, testKeys(t, b), "a refused name wrote to Redis")

		longest := strings.Repeat("m", fencedlock.MaxResourceLen)
		lock := mustTryAcquire(t, ctx, l, longest, longTTL)
		for _, s := range bothStores(b) {
			require.NoError(t, s.store.Put(ctx, longest, lock.Token(), []byte("v")), s.name)
			_, tok, err := s.store.Get(ctx, longest)
			require.NoError(t, err, s.name)
			assert.Equal(t, lock.Token(), tok)
		}
		_, err := l.IssueToken(ctx, longest, "owner")
		assert.ErrorIs(t, err, fencedlock.ErrLockLost, "IssueToken on a lock key of MaxResourceLen bytes")
		require.NoError(t, lock.Release(ctx))
		// Errors about a long name quote only its start.
		_, err = newLocker(b).TryAcquire(ctx, longest, longTTL)
		require.NoError(t, err)
		_, err = newLocker(b).TryAcquire(ctx, longest, longTTL)
		require.ErrorIs(t, err, fencedlock.ErrNotAcquired)
		assert.Less(t, len(err.Error()), 400, "%.400s", err)
	})
}

// Locker.Key names keys beside a resource's lock keys, in their hash
// slot, and refuses what the Locker's calls would refuse.
func TestLockerKey(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // nothing is sent
	t.Cleanup(func() { c.Close() })
	l := fencedlock.New(c, fencedlock.WithPrefix("app"))
	k, err := l.Key("orders", "leader")
	require.NoError(t, err)
	assert.Equal(t, "app:{orders}:leader", k)
	assert.Equal(t, fencedlock.HashSlot(l.LockKey("orders")), fencedlock.HashSlot(k), "the lock key's slot")
	k, err = fencedlock.New(c, fencedlock.WithPrefix("")).Key("orders", "x")
	require.NoError(t, err)
	assert.Equal(t, "{orders}:x", k)
	assert.Same(t, c, l.Client())

	for name, call := range map[string]func() (string, error){
		"empty resource": func() (string, error) { return l.Key("", "x") },
		"empty suffix":   func() (string, error) { return l.Key("orders", "") },
		"empty hash tag": func() (string, error) { return l.Key("}orders", "x") },
		"too long":       func() (string, error) { return l.Key(string(make([]byte, fencedlock.MaxResourceLen+1)), "x") },
		"zero Locker":    func() (string, error) { return (&fencedlock.Locker{}).Key("orders", "x") },
		"nil Locker":     func() (string, error) { return (*fencedlock.Locker)(nil).Key("orders", "x") },
		"nil client":     func() (string, error) { return fencedlock.New(nil).Key("orders", "x") },
	} {
		k, err := call()
		assert.ErrorIs(t, err, fencedlock.ErrInvalidArgument, name)
		assert.Empty(t, k, name)
	}
	assert.Nil(t, (*fencedlock.Locker)(nil).Client())
}
