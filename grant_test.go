package fencedlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// What a grant holds: a token from the resource's counter, rising,
// following the server clock and never given twice, and the lock key's
// value; a counter or lock key holding what the library did not write is
// refused.

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
