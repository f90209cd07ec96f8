package fencedlock_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// Tokens rise across release, expiry and every way to lose the counter.
func TestTokensRise(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l := newLocker(b)

		t.Run("seeded from the server clock in microseconds", func(t *testing.T) {
			before := time.Now().UnixMicro()
			tok := grantAndRelease(t, ctx, l, "fresh")
			after := time.Now().UnixMicro()
			assert.GreaterOrEqual(t, uint64(tok), uint64(before)+1)
			assert.LessOrEqual(t, uint64(tok), uint64(after)+1)
		})

		t.Run("release then acquire", func(t *testing.T) {
			var prev fencedlock.Token
			for i := 0; i < 5; i++ {
				tok := grantAndRelease(t, ctx, l, "release")
				require.Greater(t, tok, prev)
				prev = tok
			}
		})

		t.Run("refresh keeps the token", func(t *testing.T) {
			lock := mustTryAcquire(t, ctx, l, "refresh", longTTL)
			tok := lock.Token()
			require.NoError(t, lock.Refresh(ctx, longTTL))
			assert.Equal(t, tok, lock.Token())
			require.NoError(t, lock.Release(ctx))
			assert.Greater(t, grantAndRelease(t, ctx, l, "refresh"), tok)
		})

		t.Run("expiry then acquire", func(t *testing.T) {
			first := mustTryAcquire(t, ctx, l, "expiry", time.Second)
			_, err := l.TryAcquire(ctx, "expiry", time.Second)
			require.ErrorIs(t, err, fencedlock.ErrNotAcquired)
			b.FastForward(t, 2*time.Second)
			second := mustTryAcquire(t, ctx, l, "expiry", time.Second)
			assert.Greater(t, second.Token(), first.Token())
		})

		losses := []struct {
			name       string
			lose       func(t *testing.T, resource string)
			dropsLocks bool
		}{
			{"FLUSHALL", func(t *testing.T, _ string) { b.FlushAll(t) }, true},
			{"restart without persistence", func(t *testing.T, _ string) { b.Restart(t) }, true},
			{"counter key deleted", func(t *testing.T, resource string) {
				require.NoError(t, b.Client.Del(ctx, l.TokenKey(resource)).Err())
			}, false},
		}
		for _, loss := range losses {
			loss := loss
			t.Run(loss.name, func(t *testing.T) {
				res := "lost-" + strings.ReplaceAll(loss.name, " ", "-")
				var seen []fencedlock.Token
				for i := 0; i < 3; i++ {
					seen = append(seen, grantAndRelease(t, ctx, l, res))
				}
				held := mustTryAcquire(t, ctx, l, res, longTTL)
				seen = append(seen, held.Token())
				_, ok := getKey(t, b, l.TokenKey(res))
				require.True(t, ok)

				if !loss.dropsLocks {
					require.NoError(t, held.Release(ctx))
				}
				loss.lose(t, res)
				_, ok = getKey(t, b, l.TokenKey(res))
				require.False(t, ok, "the counter must be gone")
				if loss.dropsLocks {
					assert.False(t, keyExists(t, b, l.LockKey(res)), "the lock must be gone")
					// The old holder lost its lock with the counter.
					assert.ErrorIs(t, held.Release(ctx), fencedlock.ErrLockLost)
				}

				for i := 0; i < 3; i++ {
					tok := grantAndRelease(t, ctx, l, res)
					for _, old := range seen {
						require.Greater(t, tok, old, "token after the loss repeats or undercuts an earlier one")
					}
					seen = append(seen, tok)
				}
			})
		}
	})
}

// Every grant raises the counter to the server clock (TIME, in
// microseconds) when the counter is missing or behind it, then increments
// it: a token is max(counter, now) + 1. A counter that lags (a replica
// promoted after missing INCRs, a counter reset by hand) does not hand out
// a token again; a counter ahead of the clock counts on by one.
func TestTokensFollowTheServerClock(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l := newLocker(b)

		// grant returns a token and the server clock read just before and
		// just after it.
		grant := func(t *testing.T, res string) (tok fencedlock.Token, before, after uint64) {
			t.Helper()
			before = serverMicros(t, b)
			tok = grantAndRelease(t, ctx, l, res)
			after = serverMicros(t, b)
			return tok, before, after
		}
		counter := func(t *testing.T, res string) string {
			t.Helper()
			c, ok := getKey(t, b, l.TokenKey(res))
			require.True(t, ok, "no counter")
			return c
		}

		t.Run("each token is the clock at its grant, above the last", func(t *testing.T) {
			var prev fencedlock.Token
			for i := 0; i < 20; i++ {
				tok, before, after := grant(t, "clock")
				require.Greater(t, tok, prev)
				require.GreaterOrEqual(t, uint64(tok), before+1, "token below the clock before the grant")
				require.LessOrEqual(t, uint64(tok), max(uint64(prev), after)+1, "token above both the last token and the clock after the grant")
				require.Equal(t, tok.String(), counter(t, "clock"))
				prev = tok
			}
		})

		t.Run("a counter far behind the clock is raised to it", func(t *testing.T) {
			const res = "behind"
			grantAndRelease(t, ctx, l, res)
			require.NoError(t, b.Client.Set(ctx, l.TokenKey(res), "5", 0).Err())
			tok, before, after := grant(t, res)
			assert.GreaterOrEqual(t, uint64(tok), before+1)
			assert.LessOrEqual(t, uint64(tok), after+1)
			assert.Equal(t, tok.String(), counter(t, res))
		})

		t.Run("a counter ahead of the clock counts on by one", func(t *testing.T) {
			const res = "ahead"
			floor := fencedlock.Token(serverMicros(t, b) + 1_000_000_000_000)
			require.NoError(t, l.Advance(ctx, res, floor))
			for i := fencedlock.Token(1); i <= 3; i++ {
				assert.Equal(t, floor+i, grantAndRelease(t, ctx, l, res))
			}
			assert.Equal(t, (floor + 3).String(), counter(t, res))
		})
	})
}

// On miniredis the clock can be frozen (SetTime): tokens are then exactly
// the clock plus one, plus two, and so on, until the clock passes the
// counter again.
func TestTokensOnAFrozenClock(t *testing.T) {
	b := redistest.Mini(t)
	ctx := testCtx(t)
	l := newLocker(b)
	at := time.Date(2031, 5, 6, 7, 8, 9, 123456000, time.UTC)
	b.Miniredis().SetTime(at)
	us := fencedlock.Token(at.UnixMicro())

	for i := fencedlock.Token(1); i <= 3; i++ {
		assert.Equal(t, us+i, grantAndRelease(t, ctx, l, "frozen"))
	}
	// A lagging counter is raised to the clock.
	require.NoError(t, b.Client.Set(ctx, l.TokenKey("frozen"), "5", 0).Err())
	assert.Equal(t, us+1, grantAndRelease(t, ctx, l, "frozen"))
	// A counter ahead of the clock counts on.
	require.NoError(t, l.Advance(ctx, "frozen", us+1000))
	assert.Equal(t, us+1001, grantAndRelease(t, ctx, l, "frozen"))
	// The clock passes the counter: tokens follow the clock again.
	b.Miniredis().SetTime(at.Add(time.Second))
	assert.Equal(t, us+1_000_001, grantAndRelease(t, ctx, l, "frozen"))
	assert.Equal(t, us+1_000_002, grantAndRelease(t, ctx, l, "frozen"))
}

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

// Many goroutines racing for one resource: one holder at a time, and
// never one token twice.
func TestConcurrentAcquireExcludesAndNeverRepeatsTokens(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l := newLocker(b)
		const goroutines, res = 16, "contended"
		rounds := 25
		if !b.Real {
			// miniredis runs each script through an interpreter under one
			// lock, about 1ms a call under -race: fewer rounds keep it fast.
			rounds = 8
		}

		var (
			inside     atomic.Int32
			overlaps   atomic.Int32
			mu         sync.Mutex
			order      []fencedlock.Token // in the order of the critical sections
			lastInside fencedlock.Token
			regressed  []string
		)
		var wg sync.WaitGroup
		for g := 0; g < goroutines; g++ {
			g := g
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < rounds; i++ {
					var lock *fencedlock.Lock
					var err error
					if (g+i)%2 == 0 {
						lock, err = l.Acquire(ctx, res, longTTL, fencedlock.WithRetryDelay(2*time.Millisecond, 8*time.Millisecond))
					} else {
						for {
							lock, err = l.TryAcquire(ctx, res, longTTL)
							if !errors.Is(err, fencedlock.ErrNotAcquired) || ctx.Err() != nil {
								break
							}
							time.Sleep(2 * time.Millisecond)
						}
					}
					if err != nil {
						t.Errorf("goroutine %d round %d: %v", g, i, err)
						return
					}
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					mu.Lock()
					if lock.Token() <= lastInside {
						regressed = append(regressed, fmt.Sprintf("%d after %d", lock.Token(), lastInside))
					}
					lastInside = lock.Token()
					order = append(order, lock.Token())
					mu.Unlock()
					time.Sleep(100 * time.Microsecond)
					inside.Add(-1)
					if err := lock.Release(ctx); err != nil {
						t.Errorf("goroutine %d round %d release: %v", g, i, err)
						return
					}
				}
			}()
		}
		wg.Wait()

		assert.Zero(t, overlaps.Load(), "two holders inside the critical section at once")
		assert.Empty(t, regressed, "tokens must rise from one holder to the next")
		require.Len(t, order, goroutines*rounds)
		seen := make(map[fencedlock.Token]bool, len(order))
		for _, tok := range order {
			require.NotZero(t, tok)
			require.False(t, seen[tok], "token %d granted twice", tok)
			seen[tok] = true
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

// A token counter holding what the library did not write is reported,
// and nothing is written: no lock is left behind.
func TestCorruptCounter(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l := newLocker(b)
		tests := []struct {
			name string
			set  func(key string) error
		}{
			{"letters", func(k string) error { return b.Client.Set(ctx, k, "abc", 0).Err() }},
			{"negative", func(k string) error { return b.Client.Set(ctx, k, "-5", 0).Err() }},
			{"fraction", func(k string) error { return b.Client.Set(ctx, k, "1.5", 0).Err() }},
			{"empty string", func(k string) error { return b.Client.Set(ctx, k, "", 0).Err() }},
			{"space", func(k string) error { return b.Client.Set(ctx, k, " 5", 0).Err() }},
			{"2^63-1 cannot be incremented", func(k string) error { return b.Client.Set(ctx, k, "9223372036854775807", 0).Err() }},
			{"beyond int64", func(k string) error { return b.Client.Set(ctx, k, "99999999999999999999", 0).Err() }},
			{"hash type", func(k string) error { return b.Client.HSet(ctx, k, "f", "1").Err() }},
			{"list type", func(k string) error { return b.Client.RPush(ctx, k, "1").Err() }},
		}
		for _, tc := range tests {
			tc := tc
			t.Run(tc.name, func(t *testing.T) {
				res := "corrupt-" + strings.ReplaceAll(tc.name, " ", "-")
				counter := l.TokenKey(res)
				require.NoError(t, tc.set(counter))
				before := keySnapshot(t, b, counter)

				for op, fn := range map[string]func() error{
					"TryAcquire": func() error { return noLock(l.TryAcquire(ctx, res, longTTL)) },
					"Acquire": func() error {
						actx, cancel := context.WithTimeout(ctx, 2*time.Second)
						defer cancel()
						return noLock(l.Acquire(actx, res, longTTL))
					},
					"Advance": func() error { return l.Advance(ctx, res, 5) },
				} {
					err := noPanic(fn)
					if assert.Error(t, err, op) {
						assert.ErrorIs(t, err, fencedlock.ErrCorrupt, "%s: %v", op, err)
						assert.NotErrorIs(t, err, context.DeadlineExceeded, "%s waited on a corrupt counter", op)
						assert.Contains(t, err.Error(), res, op)
					}
					assert.False(t, keyExists(t, b, l.LockKey(res)), "%s left a lock behind", op)
					assert.Equal(t, before, keySnapshot(t, b, counter), "%s changed the counter", op)
				}
			})
		}
	})
}

// A counter with leading zeros is not a value the library writes: the
// acquire script refuses it on both backends (real Redis's INCR would
// refuse it too, miniredis's would take it), and no lock is left behind.
func TestCounterWithLeadingZeros(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l := newLocker(b)
		const res = "zeros"
		require.NoError(t, b.Client.Set(ctx, l.TokenKey(res), "007", 0).Err())
		lock, err := l.TryAcquire(ctx, res, longTTL)
		assert.Nil(t, lock)
		assert.ErrorIs(t, err, fencedlock.ErrCorrupt, "error: %v", err)
		assert.False(t, keyExists(t, b, l.LockKey(res)), "a failed TryAcquire left a lock behind (err %v)", err)
		c, _ := getKey(t, b, l.TokenKey(res))
		assert.Equal(t, "007", c, "a failed TryAcquire changed the counter")
	})
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

// A lock key of the wrong Redis type, written by someone else: acquiring
// reports it as corrupt and writes nothing; a Lock whose key was replaced
// by it has lost its lock, and leaves the key alone.
func TestLockKeyOfWrongType(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l := newLocker(b)

		t.Run("acquire", func(t *testing.T) {
			const res = "wrongtype-acquire"
			grantAndRelease(t, ctx, l, res)
			require.NoError(t, b.Client.HSet(ctx, l.LockKey(res), "f", "v").Err())
			lockBefore := keySnapshot(t, b, l.LockKey(res))
			counterBefore := keySnapshot(t, b, l.TokenKey(res))
			for _, ac := range acquireCalls {
				actx, cancel := context.WithTimeout(ctx, 2*time.Second)
				var lock *fencedlock.Lock
				err := noPanic(func() (err error) { lock, err = ac.call(actx, l, res); return err })
				cancel()
				assert.Nil(t, lock, ac.name)
				assert.ErrorIs(t, err, fencedlock.ErrCorrupt, "%s: %v", ac.name, err)
				assert.NotErrorIs(t, err, fencedlock.ErrNotAcquired, ac.name)
				assert.NotErrorIs(t, err, context.DeadlineExceeded, "%s waited on a corrupt lock key", ac.name)
				assert.Equal(t, lockBefore, keySnapshot(t, b, l.LockKey(res)), "%s changed the lock key", ac.name)
				assert.Equal(t, counterBefore, keySnapshot(t, b, l.TokenKey(res)), "%s changed the counter", ac.name)
			}
		})

		t.Run("held lock replaced", func(t *testing.T) {
			const res = "wrongtype-held"
			lock := mustTryAcquire(t, ctx, l, res, longTTL)
			require.NoError(t, b.Client.Del(ctx, l.LockKey(res)).Err())
			require.NoError(t, b.Client.HSet(ctx, l.LockKey(res), "f", "v").Err())
			before := keySnapshot(t, b, l.LockKey(res))

			err := noPanic(func() error { return lock.Refresh(ctx, time.Hour) })
			assert.ErrorIs(t, err, fencedlock.ErrLockLost, "Refresh: %v", err)
			assert.Equal(t, before, keySnapshot(t, b, l.LockKey(res)), "Refresh changed the key")
			pttl, err := b.Client.PTTL(ctx, l.LockKey(res)).Result()
			require.NoError(t, err)
			assert.Equal(t, time.Duration(-1), pttl, "Refresh set a TTL on the key")

			var ttl time.Duration
			err = noPanic(func() (err error) { ttl, err = lock.TTL(ctx); return err })
			assert.ErrorIs(t, err, fencedlock.ErrLockLost, "TTL: %v", err)
			assert.Zero(t, ttl)

			err = noPanic(func() error { return lock.Release(ctx) })
			assert.ErrorIs(t, err, fencedlock.ErrLockLost, "Release: %v", err)
			assert.Equal(t, before, keySnapshot(t, b, l.LockKey(res)), "Release changed the key")
		})
	})
}

// The lock key holds the owner nonce and the token, the token's digits
// exact even where a Lua number would print them in exponent form (real
// Redis formats 1.7e15, a clock-seeded token, as "1.7959695163434e+15")
// or round them (above 2^53).
func TestLockKeyValue(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l := newLocker(b)
		check := func(t *testing.T, res string) (*fencedlock.Lock, string) {
			t.Helper()
			lock := mustTryAcquire(t, ctx, l, res, longTTL)
			v, ok := getKey(t, b, l.LockKey(res))
			require.True(t, ok)
			m := lockValuePattern.FindStringSubmatch(v)
			require.NotNil(t, m, "lock key value %q is not <32 hex digits>:<token>", v)
			assert.Equal(t, lock.Token().String(), m[2], "the token in the lock key's value")
			assert.NotContains(t, lock.String(), m[1], "String shows the owner nonce")
			return lock, m[1]
		}

		t.Run("clock-seeded token", func(t *testing.T) {
			lock, nonce := check(t, "value")
			assert.Greater(t, uint64(lock.Token()), uint64(1)<<50, "a token seeded from the clock in microseconds")
			require.NoError(t, lock.Release(ctx))
			// Each Lock has its own nonce.
			again, nonce2 := check(t, "value")
			assert.NotEqual(t, nonce, nonce2)
			require.NoError(t, again.Release(ctx))
		})

		t.Run("token above 2^53", func(t *testing.T) {
			floor := fencedlock.Token(1<<62 + 12345)
			require.NoError(t, l.Advance(ctx, "value-high", floor))
			lock, _ := check(t, "value-high")
			assert.Equal(t, floor+1, lock.Token())
			require.NoError(t, lock.Release(ctx))
		})
	})
}

// TryAcquire with a done ctx, or one whose deadline has passed, sends
// nothing and wraps ctx's error the way Acquire does.
func TestTryAcquireWithDoneContext(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		l := newLocker(b)
		cancelled, cancel := context.WithCancel(context.Background())
		cancel()
		past, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		defer cancel2()
		for name, ctx := range map[string]context.Context{"cancelled": cancelled, "past deadline": past} {
			_, tryErr := l.TryAcquire(ctx, "done", longTTL)
			_, waitErr := l.Acquire(ctx, "done", longTTL)
			for call, err := range map[string]error{"TryAcquire": tryErr, "Acquire": waitErr} {
				require.Error(t, err, call)
				assert.ErrorIs(t, err, ctx.Err(), "%s with a %s ctx", call, name)
				assert.Equal(t, errorsIs(waitErr, fencedlock.ErrNotAcquired), errorsIs(err, fencedlock.ErrNotAcquired), "%s with a %s ctx: %v", call, name, err)
				assert.NotErrorIs(t, err, fencedlock.ErrUnavailable, call)
			}
		}
		assert.Empty(t, testKeys(t, b), "a call with a done ctx wrote to Redis")
	})
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }

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
