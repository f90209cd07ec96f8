package fencedlock_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// ltLongTTL is a TTL no test waits out: locks taken with it end by
// Release, FastForward or a flush.
const ltLongTTL = 30 * time.Second

// ltCtx returns a context that bounds one test.
func ltCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// ltLocker returns a Locker whose keys are unique to b's test.
func ltLocker(b *redistest.Backend) *fencedlock.Locker {
	return fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix))
}

// ltRedisStore returns a RedisStore whose keys are unique to b's test.
func ltRedisStore(b *redistest.Backend) *fencedlock.RedisStore {
	return fencedlock.NewRedisStore(b.Client, fencedlock.WithStorePrefix(b.Prefix))
}

type ltNamedStore struct {
	name  string
	store fencedlock.Store
}

// ltStores returns a fresh MemoryStore and a RedisStore on b.
func ltStores(b *redistest.Backend) []ltNamedStore {
	return []ltNamedStore{
		{"MemoryStore", fencedlock.NewMemoryStore()},
		{"RedisStore", ltRedisStore(b)},
	}
}

// ltTryAcquire takes a lock that must be free.
func ltTryAcquire(t *testing.T, ctx context.Context, l *fencedlock.Locker, resource string, ttl time.Duration) *fencedlock.Lock {
	t.Helper()
	lock, err := l.TryAcquire(ctx, resource, ttl)
	require.NoError(t, err, "TryAcquire %q", resource)
	require.NotNil(t, lock)
	require.NotZero(t, lock.Token())
	require.Equal(t, resource, lock.Resource())
	return lock
}

// ltGrant takes a free lock and releases it at once, returning its token.
func ltGrant(t *testing.T, ctx context.Context, l *fencedlock.Locker, resource string) fencedlock.Token {
	t.Helper()
	lock := ltTryAcquire(t, ctx, l, resource, ltLongTTL)
	require.NoError(t, lock.Release(ctx))
	return lock.Token()
}

// ltExists reports whether key exists.
func ltExists(t *testing.T, b *redistest.Backend, key string) bool {
	t.Helper()
	n, err := b.Client.Exists(context.Background(), key).Result()
	require.NoError(t, err)
	return n == 1
}

// ltGetKey returns the string at key ("" and false when missing).
func ltGetKey(t *testing.T, b *redistest.Backend, key string) (string, bool) {
	t.Helper()
	v, err := b.Client.Get(context.Background(), key).Result()
	if errors.Is(err, redis.Nil) {
		return "", false
	}
	require.NoError(t, err)
	return v, true
}

// ltSnapshot describes key's type and content, to tell whether a call
// changed it.
func ltSnapshot(t *testing.T, b *redistest.Backend, key string) string {
	t.Helper()
	ctx := context.Background()
	typ, err := b.Client.Type(ctx, key).Result()
	require.NoError(t, err)
	var content any
	switch typ {
	case "string":
		content, err = b.Client.Get(ctx, key).Result()
	case "hash":
		content, err = b.Client.HGetAll(ctx, key).Result()
	case "list":
		content, err = b.Client.LRange(ctx, key, 0, -1).Result()
	}
	require.NoError(t, err)
	return fmt.Sprintf("%s %v", typ, content)
}

// ltKeys lists the keys of b's test.
func ltKeys(t *testing.T, b *redistest.Backend) []string {
	t.Helper()
	keys, err := b.Client.Keys(context.Background(), b.Prefix+"*").Result()
	require.NoError(t, err)
	sort.Strings(keys)
	return keys
}

// ltServerMicros returns the Redis server clock (TIME) in microseconds.
func ltServerMicros(t *testing.T, b *redistest.Backend) uint64 {
	t.Helper()
	now, err := b.Client.Time(context.Background()).Result()
	require.NoError(t, err)
	return uint64(now.UnixMicro())
}

// ltMarkers lists the abandon markers of resource's acquire attempts: the
// keys "<prefix>:{resource}:abandoned:<owner nonce>" left by the cleanup of
// an attempt that got no reply and was not granted.
func ltMarkers(t *testing.T, b *redistest.Backend, l *fencedlock.Locker, resource string) []string {
	t.Helper()
	pattern := strings.TrimSuffix(l.LockKey(resource), "lock") + "abandoned:*"
	keys, err := b.Client.Keys(context.Background(), pattern).Result()
	require.NoError(t, err)
	sort.Strings(keys)
	return keys
}

// ltRequireStale checks that err is the store's refusal of token because
// it holds current.
func ltRequireStale(t *testing.T, err error, resource string, token, current fencedlock.Token) {
	t.Helper()
	require.Error(t, err, "a write with token %d must be refused: the store holds %d", token, current)
	assert.ErrorIs(t, err, fencedlock.ErrStaleToken)
	var se *fencedlock.StaleTokenError
	require.True(t, errors.As(err, &se), "want *StaleTokenError, got %T: %v", err, err)
	assert.Equal(t, resource, se.Resource)
	assert.Equal(t, token, se.Token)
	assert.Equal(t, current, se.Current)
}

// ltRequireValue checks what a store holds for resource.
func ltRequireValue(t *testing.T, ctx context.Context, s fencedlock.Store, resource, value string, token fencedlock.Token) {
	t.Helper()
	v, tok, err := s.Get(ctx, resource)
	require.NoError(t, err)
	assert.Equal(t, value, string(v))
	assert.Equal(t, token, tok)
}

// ltNoPanic runs fn and turns a panic into an error, so one bad method
// fails its assertion instead of the whole test binary.
func ltNoPanic(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return fn()
}

// ltSyncBuffer is a bytes.Buffer safe for a logger's goroutines.
type ltSyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *ltSyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *ltSyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// ltAwaitCleanup checks what err, the error of a call whose ctx ended,
// says of its cleanup: done (the message speaks of no release), or still
// going on in the background, as it may be past ctx's end on a loaded
// machine; then it waits until done reports the cleanup's effect.
func ltAwaitCleanup(t *testing.T, err error, done func() bool) {
	t.Helper()
	msg := strings.ToLower(err.Error())
	if strings.Contains(msg, "goes on in the background") {
		ltEventually(t, done, "the background cleanup")
		return
	}
	assert.NotContains(t, msg, "releas", "the cleanup failed")
}

// ltNoLock turns the results of TryAcquire or Acquire that must have
// failed into one error: a non-nil Lock is itself a failure.
func ltNoLock(lock *fencedlock.Lock, err error) error {
	if lock != nil {
		return fmt.Errorf("got %v with token %d, want no lock (err %v)", lock, lock.Token(), err)
	}
	return err
}

// The scenario fencing exists for: holder A pauses past its TTL, B takes
// over and writes, and A's late write, refresh and release all fail
// without touching B's value or lock.
func TestPausedHolderIsFenced(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := ltCtx(t)
		l := ltLocker(b)
		const res = "order-queue"
		stores := ltStores(b)

		a := ltTryAcquire(t, ctx, l, res, 30*time.Second)
		for _, s := range stores {
			require.NoError(t, s.store.Put(ctx, res, a.Token(), []byte("A1")), s.name)
		}

		// A pauses past its TTL; B takes over.
		b.FastForward(t, 31*time.Second)
		bl := ltTryAcquire(t, ctx, l, res, 30*time.Second)
		require.Greater(t, bl.Token(), a.Token(), "a new grant must carry a higher token")

		for _, s := range stores {
			s := s
			t.Run(s.name, func(t *testing.T) {
				require.NoError(t, s.store.Put(ctx, res, bl.Token(), []byte("B")))
				// A resumes and writes with its old token.
				err := s.store.Put(ctx, res, a.Token(), []byte("A2"))
				ltRequireStale(t, err, res, a.Token(), bl.Token())
				ltRequireValue(t, ctx, s.store, res, "B", bl.Token())
			})
		}

		owner, ok := ltGetKey(t, b, l.LockKey(res))
		require.True(t, ok, "B's lock key must exist")

		// A's late Refresh asks for far more than B's TTL, so an extension
		// of B's lock would show in B's TTL below.
		assert.ErrorIs(t, a.Refresh(ctx, time.Hour), fencedlock.ErrLockLost)
		assert.ErrorIs(t, a.Release(ctx), fencedlock.ErrLockLost)
		_, err := a.TTL(ctx)
		assert.ErrorIs(t, err, fencedlock.ErrLockLost)

		// B's lock is untouched.
		after, ok := ltGetKey(t, b, l.LockKey(res))
		require.True(t, ok, "A's late Release deleted B's lock")
		assert.Equal(t, owner, after, "A's calls changed B's lock key")
		ttl, err := bl.TTL(ctx)
		require.NoError(t, err)
		assert.Greater(t, ttl, time.Duration(0))
		assert.LessOrEqual(t, ttl, 30*time.Second, "A's late Refresh extended B's lock")
		_, err = l.TryAcquire(ctx, res, ltLongTTL)
		assert.ErrorIs(t, err, fencedlock.ErrNotAcquired, "B's lock must still exclude others")
		require.NoError(t, bl.Refresh(ctx, 30*time.Second))
		require.NoError(t, bl.Release(ctx))
		assert.False(t, ltExists(t, b, l.LockKey(res)))
	})
}

// One holder writes many times with one token.
func TestSameTokenWritesTwice(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := ltCtx(t)
		l := ltLocker(b)
		lock := ltTryAcquire(t, ctx, l, "r", ltLongTTL)
		for _, s := range ltStores(b) {
			s := s
			t.Run(s.name, func(t *testing.T) {
				require.NoError(t, s.store.Put(ctx, "r", lock.Token(), []byte("first")))
				ltRequireValue(t, ctx, s.store, "r", "first", lock.Token())
				require.NoError(t, s.store.Put(ctx, "r", lock.Token(), []byte("second")))
				ltRequireValue(t, ctx, s.store, "r", "second", lock.Token())
				// A higher token (the next holder) may write too.
				require.NoError(t, s.store.Put(ctx, "r", lock.Token()+1, []byte("third")))
				ltRequireValue(t, ctx, s.store, "r", "third", lock.Token()+1)
				ltRequireStale(t, s.store.Put(ctx, "r", lock.Token(), []byte("late")), "r", lock.Token(), lock.Token()+1)
			})
		}
	})
}

func TestGetMissingIsNotFound(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := ltCtx(t)
		for _, s := range ltStores(b) {
			v, tok, err := s.store.Get(ctx, "nothing-here")
			assert.ErrorIs(t, err, fencedlock.ErrNotFound, s.name)
			assert.Nil(t, v, s.name)
			assert.Zero(t, tok, s.name)
		}
	})
}

// Tokens rise across release, expiry and every way to lose the counter.
func TestTokensRise(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := ltCtx(t)
		l := ltLocker(b)

		t.Run("seeded from the server clock in microseconds", func(t *testing.T) {
			before := time.Now().UnixMicro()
			tok := ltGrant(t, ctx, l, "fresh")
			after := time.Now().UnixMicro()
			assert.GreaterOrEqual(t, uint64(tok), uint64(before)+1)
			assert.LessOrEqual(t, uint64(tok), uint64(after)+1)
		})

		t.Run("release then acquire", func(t *testing.T) {
			var prev fencedlock.Token
			for i := 0; i < 5; i++ {
				tok := ltGrant(t, ctx, l, "release")
				require.Greater(t, tok, prev)
				prev = tok
			}
		})

		t.Run("refresh keeps the token", func(t *testing.T) {
			lock := ltTryAcquire(t, ctx, l, "refresh", ltLongTTL)
			tok := lock.Token()
			require.NoError(t, lock.Refresh(ctx, ltLongTTL))
			assert.Equal(t, tok, lock.Token())
			require.NoError(t, lock.Release(ctx))
			assert.Greater(t, ltGrant(t, ctx, l, "refresh"), tok)
		})

		t.Run("expiry then acquire", func(t *testing.T) {
			first := ltTryAcquire(t, ctx, l, "expiry", time.Second)
			_, err := l.TryAcquire(ctx, "expiry", time.Second)
			require.ErrorIs(t, err, fencedlock.ErrNotAcquired)
			b.FastForward(t, 2*time.Second)
			second := ltTryAcquire(t, ctx, l, "expiry", time.Second)
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
					seen = append(seen, ltGrant(t, ctx, l, res))
				}
				held := ltTryAcquire(t, ctx, l, res, ltLongTTL)
				seen = append(seen, held.Token())
				_, ok := ltGetKey(t, b, l.TokenKey(res))
				require.True(t, ok)

				if !loss.dropsLocks {
					require.NoError(t, held.Release(ctx))
				}
				loss.lose(t, res)
				_, ok = ltGetKey(t, b, l.TokenKey(res))
				require.False(t, ok, "the counter must be gone")
				if loss.dropsLocks {
					assert.False(t, ltExists(t, b, l.LockKey(res)), "the lock must be gone")
					// The old holder lost its lock with the counter.
					assert.ErrorIs(t, held.Release(ctx), fencedlock.ErrLockLost)
				}

				for i := 0; i < 3; i++ {
					tok := ltGrant(t, ctx, l, res)
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
		ctx := ltCtx(t)
		l := ltLocker(b)

		// grant returns a token and the server clock read just before and
		// just after it.
		grant := func(t *testing.T, res string) (tok fencedlock.Token, before, after uint64) {
			t.Helper()
			before = ltServerMicros(t, b)
			tok = ltGrant(t, ctx, l, res)
			after = ltServerMicros(t, b)
			return tok, before, after
		}
		counter := func(t *testing.T, res string) string {
			t.Helper()
			c, ok := ltGetKey(t, b, l.TokenKey(res))
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
			ltGrant(t, ctx, l, res)
			require.NoError(t, b.Client.Set(ctx, l.TokenKey(res), "5", 0).Err())
			tok, before, after := grant(t, res)
			assert.GreaterOrEqual(t, uint64(tok), before+1)
			assert.LessOrEqual(t, uint64(tok), after+1)
			assert.Equal(t, tok.String(), counter(t, res))
		})

		t.Run("a counter ahead of the clock counts on by one", func(t *testing.T) {
			const res = "ahead"
			floor := fencedlock.Token(ltServerMicros(t, b) + 1_000_000_000_000)
			require.NoError(t, l.Advance(ctx, res, floor))
			for i := fencedlock.Token(1); i <= 3; i++ {
				assert.Equal(t, floor+i, ltGrant(t, ctx, l, res))
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
	ctx := ltCtx(t)
	l := ltLocker(b)
	at := time.Date(2031, 5, 6, 7, 8, 9, 123456000, time.UTC)
	b.Miniredis().SetTime(at)
	us := fencedlock.Token(at.UnixMicro())

	for i := fencedlock.Token(1); i <= 3; i++ {
		assert.Equal(t, us+i, ltGrant(t, ctx, l, "frozen"))
	}
	// A lagging counter is raised to the clock.
	require.NoError(t, b.Client.Set(ctx, l.TokenKey("frozen"), "5", 0).Err())
	assert.Equal(t, us+1, ltGrant(t, ctx, l, "frozen"))
	// A counter ahead of the clock counts on.
	require.NoError(t, l.Advance(ctx, "frozen", us+1000))
	assert.Equal(t, us+1001, ltGrant(t, ctx, l, "frozen"))
	// The clock passes the counter: tokens follow the clock again.
	b.Miniredis().SetTime(at.Add(time.Second))
	assert.Equal(t, us+1_000_001, ltGrant(t, ctx, l, "frozen"))
	assert.Equal(t, us+1_000_002, ltGrant(t, ctx, l, "frozen"))
}

// Advance raises the counter, never lowers it, and gets a holder past a
// store that is ahead of the counter.
func TestAdvance(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := ltCtx(t)
		l := ltLocker(b)

		t.Run("raises the counter past the floor", func(t *testing.T) {
			tok := ltGrant(t, ctx, l, "up")
			floor := tok + 1_000_000
			require.NoError(t, l.Advance(ctx, "up", floor))
			next := ltGrant(t, ctx, l, "up")
			assert.Greater(t, next, floor)
			assert.Greater(t, ltGrant(t, ctx, l, "up"), next)
		})

		t.Run("below or at the counter changes nothing", func(t *testing.T) {
			// A counter behind the clock (seeded by a grant), and one ahead
			// of it, where the next grant takes exactly the next token.
			pastTheClock := fencedlock.Token(ltServerMicros(t, b) + 1_000_000_000_000)
			for _, ahead := range []fencedlock.Token{0, pastTheClock} {
				res := fmt.Sprintf("below-%d", ahead)
				if ahead != 0 {
					require.NoError(t, l.Advance(ctx, res, ahead))
				}
				tok := ltGrant(t, ctx, l, res)
				for _, floor := range []fencedlock.Token{1, tok - 1000, tok - 1, tok} {
					require.NoError(t, l.Advance(ctx, res, floor))
					c, _ := ltGetKey(t, b, l.TokenKey(res))
					assert.Equal(t, tok.String(), c, "Advance(%d) changed the counter", floor)
				}
				next := ltGrant(t, ctx, l, res)
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
			tok := ltGrant(t, ctx, l, "missing-low")
			assert.Greater(t, uint64(tok), uint64(before))
		})

		t.Run("on a missing counter with a high floor", func(t *testing.T) {
			// Above 2^53, where Lua numbers are not exact: every digit counts.
			floor := fencedlock.Token(1<<62 + 12345)
			require.NoError(t, l.Advance(ctx, "missing-high", floor))
			assert.Equal(t, floor+1, ltGrant(t, ctx, l, "missing-high"))
			assert.Equal(t, floor+2, ltGrant(t, ctx, l, "missing-high"))
		})

		t.Run("up to the highest floor", func(t *testing.T) {
			const maxFloor = fencedlock.Token(math.MaxInt64 - 1)
			require.NoError(t, l.Advance(ctx, "top", maxFloor))
			assert.Equal(t, fencedlock.Token(math.MaxInt64), ltGrant(t, ctx, l, "top"))
			// The counter cannot rise further: refused, and no lock is left.
			_, err := l.TryAcquire(ctx, "top", ltLongTTL)
			assert.ErrorIs(t, err, fencedlock.ErrCorrupt)
			assert.False(t, ltExists(t, b, l.LockKey("top")))
		})

		t.Run("floor out of range is refused and changes nothing", func(t *testing.T) {
			tok := ltGrant(t, ctx, l, "range")
			for _, floor := range []fencedlock.Token{0, math.MaxInt64, math.MaxInt64 + 1, math.MaxUint64} {
				err := l.Advance(ctx, "range", floor)
				assert.ErrorIs(t, err, fencedlock.ErrInvalidToken, "floor %d", floor)
				if err != nil {
					assert.Contains(t, err.Error(), "floor")
				}
				c, _ := ltGetKey(t, b, l.TokenKey("range"))
				assert.Equal(t, tok.String(), c, "Advance(%d) changed the counter", floor)
			}
			err := l.Advance(ctx, "range-missing", 0)
			assert.ErrorIs(t, err, fencedlock.ErrInvalidToken)
			assert.False(t, ltExists(t, b, l.TokenKey("range-missing")))
		})

		// The recovery flow: a store holds a token above the counter (the
		// counter was lost and the Redis clock is behind the store).
		for _, s := range ltStores(b) {
			s := s
			t.Run("recovery via "+s.name, func(t *testing.T) {
				res := "recover-" + s.name
				lock := ltTryAcquire(t, ctx, l, res, ltLongTTL)
				ahead := lock.Token() + 1_000_000_000
				require.NoError(t, s.store.Put(ctx, res, ahead, []byte("from the future")))

				err := s.store.Put(ctx, res, lock.Token(), []byte("mine"))
				ltRequireStale(t, err, res, lock.Token(), ahead)
				var se *fencedlock.StaleTokenError
				require.True(t, errors.As(err, &se))

				require.NoError(t, lock.Release(ctx))
				require.NoError(t, l.Advance(ctx, res, se.Current))
				again := ltTryAcquire(t, ctx, l, res, ltLongTTL)
				require.Greater(t, again.Token(), se.Current)
				require.NoError(t, s.store.Put(ctx, res, again.Token(), []byte("mine")))
				ltRequireValue(t, ctx, s.store, res, "mine", again.Token())
				require.NoError(t, again.Release(ctx))
			})
		}
	})
}

// Many goroutines racing for one resource: one holder at a time, and
// never one token twice.
func TestConcurrentAcquireExcludesAndNeverRepeatsTokens(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := ltCtx(t)
		l := ltLocker(b)
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
						lock, err = l.Acquire(ctx, res, ltLongTTL, fencedlock.WithRetryDelay(2*time.Millisecond, 8*time.Millisecond))
					} else {
						for {
							lock, err = l.TryAcquire(ctx, res, ltLongTTL)
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

type ltAcquireResult struct {
	lock *fencedlock.Lock
	err  error
	at   time.Time
}

// ltAcquireAsync runs Acquire in a goroutine.
func ltAcquireAsync(ctx context.Context, l *fencedlock.Locker, resource string) <-chan ltAcquireResult {
	return ltWaitFor(ctx, l, resource, ltLongTTL, fencedlock.WithRetryDelay(time.Millisecond, 5*time.Millisecond))
}

// ltRequireStillWaiting checks that an Acquire has not returned.
func ltRequireStillWaiting(t *testing.T, done <-chan ltAcquireResult) {
	t.Helper()
	select {
	case r := <-done:
		t.Fatalf("Acquire returned while the lock was held: %v, %v", r.lock, r.err)
	case <-time.After(50 * time.Millisecond):
	}
}

// ltAwait waits for an Acquire that must succeed.
func ltAwait(t *testing.T, done <-chan ltAcquireResult) *fencedlock.Lock {
	t.Helper()
	select {
	case r := <-done:
		require.NoError(t, r.err)
		require.NotNil(t, r.lock)
		return r.lock
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire did not return once the lock was free")
		return nil
	}
}

// Acquire waits while the lock is held, and no longer than its context.
func TestAcquireWaits(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := ltCtx(t)
		l := ltLocker(b)

		t.Run("until the holder releases", func(t *testing.T) {
			holder := ltTryAcquire(t, ctx, l, "release", ltLongTTL)
			done := ltAcquireAsync(ctx, l, "release")
			ltRequireStillWaiting(t, done)
			require.NoError(t, holder.Release(ctx))
			next := ltAwait(t, done)
			assert.Greater(t, next.Token(), holder.Token())
			require.NoError(t, next.Release(ctx))
		})

		t.Run("until the holder expires", func(t *testing.T) {
			holder := ltTryAcquire(t, ctx, l, "expire", ltLongTTL)
			done := ltAcquireAsync(ctx, l, "expire")
			ltRequireStillWaiting(t, done)
			b.FastForward(t, ltLongTTL+time.Second)
			next := ltAwait(t, done)
			assert.Greater(t, next.Token(), holder.Token())
			assert.ErrorIs(t, holder.Release(ctx), fencedlock.ErrLockLost)
			require.NoError(t, next.Release(ctx))
		})

		t.Run("until the deadline", func(t *testing.T) {
			holder := ltTryAcquire(t, ctx, l, "deadline", ltLongTTL)
			owner, _ := ltGetKey(t, b, l.LockKey("deadline"))
			start := time.Now()
			dctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
			defer cancel()
			lock, err := l.Acquire(dctx, "deadline", ltLongTTL)
			assert.Nil(t, lock)
			assert.ErrorIs(t, err, fencedlock.ErrNotAcquired)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.GreaterOrEqual(t, time.Since(start), 30*time.Millisecond)
			after, _ := ltGetKey(t, b, l.LockKey("deadline"))
			assert.Equal(t, owner, after)
			require.NoError(t, holder.Release(ctx))
		})

		t.Run("until cancelled", func(t *testing.T) {
			holder := ltTryAcquire(t, ctx, l, "cancel", ltLongTTL)
			cctx, cancel := context.WithCancel(ctx)
			timer := time.AfterFunc(30*time.Millisecond, cancel)
			defer timer.Stop()
			lock, err := l.Acquire(cctx, "cancel", ltLongTTL)
			assert.Nil(t, lock)
			assert.ErrorIs(t, err, fencedlock.ErrNotAcquired)
			assert.ErrorIs(t, err, context.Canceled)
			require.NoError(t, holder.Release(ctx))
		})

		t.Run("not at all with a done context", func(t *testing.T) {
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			lock, err := l.Acquire(cctx, "done", ltLongTTL)
			assert.Nil(t, lock)
			assert.ErrorIs(t, err, fencedlock.ErrNotAcquired)
			assert.ErrorIs(t, err, context.Canceled)
			assert.False(t, ltExists(t, b, l.LockKey("done")), "Acquire on a done context left a lock")
		})

		t.Run("TryAcquire does not wait", func(t *testing.T) {
			holder := ltTryAcquire(t, ctx, l, "try", ltLongTTL)
			lock, err := l.TryAcquire(ctx, "try", ltLongTTL)
			assert.Nil(t, lock)
			assert.ErrorIs(t, err, fencedlock.ErrNotAcquired)
			assert.Contains(t, err.Error(), `"try"`)
			require.NoError(t, holder.Release(ctx))
		})
	})
}

// The one test that waits for a real expiry, on real Redis only
// (miniredis never expires keys on its own).
func TestAcquireAfterRealExpiry(t *testing.T) {
	b := redistest.Real(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	l := ltLocker(b)
	start := time.Now()
	holder := ltTryAcquire(t, ctx, l, "real-expiry", 50*time.Millisecond)
	next, err := l.Acquire(ctx, "real-expiry", ltLongTTL)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), 45*time.Millisecond, "acquired before the holder's TTL ran out")
	assert.Greater(t, next.Token(), holder.Token())
	assert.ErrorIs(t, holder.Release(ctx), fencedlock.ErrLockLost)
	require.NoError(t, next.Release(ctx))
}

// Bad input gets an error naming the problem, never a panic or a token,
// and writes nothing.
func TestBadInput(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := ltCtx(t)
		l := ltLocker(b)
		rs := ltRedisStore(b)
		ms := fencedlock.NewMemoryStore()
		lock := ltTryAcquire(t, ctx, l, "held", ltLongTTL)
		keysBefore := ltKeys(t, b)

		type call struct {
			name    string
			fn      func() error
			want    error
			mention string
		}
		calls := []call{
			{"TryAcquire empty resource", func() error { return ltNoLock(l.TryAcquire(ctx, "", ltLongTTL)) }, fencedlock.ErrInvalidArgument, "resource"},
			{"Acquire empty resource", func() error { return ltNoLock(l.Acquire(ctx, "", ltLongTTL)) }, fencedlock.ErrInvalidArgument, "resource"},
			{"Advance empty resource", func() error { return l.Advance(ctx, "", 5) }, fencedlock.ErrInvalidArgument, "resource"},
			{"RedisStore.Put empty resource", func() error { return rs.Put(ctx, "", 5, []byte("v")) }, fencedlock.ErrInvalidArgument, "resource"},
			{"RedisStore.Get empty resource", func() error { _, _, err := rs.Get(ctx, ""); return err }, fencedlock.ErrInvalidArgument, "resource"},
			{"MemoryStore.Put empty resource", func() error { return ms.Put(ctx, "", 5, []byte("v")) }, fencedlock.ErrInvalidArgument, "resource"},
			{"MemoryStore.Get empty resource", func() error { _, _, err := ms.Get(ctx, ""); return err }, fencedlock.ErrInvalidArgument, "resource"},

			{"TryAcquire empty hash tag", func() error { return ltNoLock(l.TryAcquire(ctx, "}x", ltLongTTL)) }, fencedlock.ErrInvalidArgument, "hash tag"},
			{"Acquire empty hash tag", func() error { return ltNoLock(l.Acquire(ctx, "}", ltLongTTL)) }, fencedlock.ErrInvalidArgument, "hash tag"},
			{"Advance empty hash tag", func() error { return l.Advance(ctx, "}x", 5) }, fencedlock.ErrInvalidArgument, "hash tag"},
			{"RedisStore.Put empty hash tag", func() error { return rs.Put(ctx, "}x", 5, []byte("v")) }, fencedlock.ErrInvalidArgument, "hash tag"},
			{"RedisStore.Get empty hash tag", func() error { _, _, err := rs.Get(ctx, "}x"); return err }, fencedlock.ErrInvalidArgument, "hash tag"},

			{"RedisStore.Put zero token", func() error { return rs.Put(ctx, "r", 0, []byte("v")) }, fencedlock.ErrInvalidToken, "token"},
			{"MemoryStore.Put zero token", func() error { return ms.Put(ctx, "r", 0, []byte("v")) }, fencedlock.ErrInvalidToken, "token"},
		}
		for _, ttl := range []time.Duration{0, -time.Second, 999 * time.Microsecond, math.MinInt64} {
			ttl := ttl
			calls = append(calls,
				call{fmt.Sprintf("TryAcquire ttl %v", ttl), func() error { return ltNoLock(l.TryAcquire(ctx, "r", ttl)) }, fencedlock.ErrInvalidArgument, "ttl"},
				call{fmt.Sprintf("Acquire ttl %v", ttl), func() error { return ltNoLock(l.Acquire(ctx, "r", ttl)) }, fencedlock.ErrInvalidArgument, "ttl"},
				call{fmt.Sprintf("Refresh ttl %v", ttl), func() error { return lock.Refresh(ctx, ttl) }, fencedlock.ErrInvalidArgument, "ttl"},
			)
		}
		for _, c := range calls {
			c := c
			t.Run(c.name, func(t *testing.T) {
				err := ltNoPanic(c.fn)
				require.Error(t, err)
				assert.ErrorIs(t, err, c.want)
				assert.Contains(t, err.Error(), c.mention)
			})
		}

		// Nothing was written, and the held lock kept its TTL.
		assert.Equal(t, keysBefore, ltKeys(t, b))
		ttl, err := lock.TTL(ctx)
		require.NoError(t, err)
		assert.Greater(t, ttl, ltLongTTL-5*time.Second, "a refused Refresh changed the TTL")
		for _, s := range []fencedlock.Store{rs, ms} {
			_, _, err := s.Get(ctx, "r")
			assert.ErrorIs(t, err, fencedlock.ErrNotFound, "a refused Put wrote")
		}

		// A RedisStore takes every uint64 token and compares them exactly,
		// above 2^53 too, where a float64 would round neighbours together.
		for _, top := range []fencedlock.Token{1<<53 + 1, 1<<63 - 1, 1 << 63, math.MaxUint64} {
			res := fmt.Sprintf("top-%d", top)
			require.NoError(t, rs.Put(ctx, res, top-1, []byte("below")))
			require.NoError(t, rs.Put(ctx, res, top, []byte("top")))
			ltRequireStale(t, rs.Put(ctx, res, top-1, []byte("under")), res, top-1, top)
			ltRequireValue(t, ctx, rs, res, "top", top)
		}

		// Nil options are ignored.
		nl := fencedlock.New(b.Client, nil, fencedlock.WithPrefix(b.Prefix), nil)
		got, err := nl.Acquire(ctx, "nil-opts", ltLongTTL, nil)
		require.NoError(t, err)
		require.NoError(t, got.Release(ctx))
		ns := fencedlock.NewRedisStore(b.Client, nil, fencedlock.WithStorePrefix(b.Prefix))
		assert.Equal(t, rs.Key("x"), ns.Key("x"))
	})
}

func TestNilClient(t *testing.T) {
	ctx := ltCtx(t)
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
			require.NoError(t, ltNoPanic(func() error {
				l = fencedlock.New(c.client)
				s = fencedlock.NewRedisStore(c.client)
				return nil
			}))
			require.NotNil(t, l)
			require.NotNil(t, s)
			ltRequireAllRefuse(t, ctx, l, s, fencedlock.ErrInvalidArgument, "nil")
		})
	}
	t.Run("nil Locker and RedisStore", func(t *testing.T) {
		ltRequireAllRefuse(t, ctx, nil, nil, fencedlock.ErrInvalidArgument, "nil")
	})
}

// A Locker{} or RedisStore{} built without New has no client. Its methods
// must refuse, as those of a New(nil) do, instead of panicking.
func TestZeroLockerAndRedisStore(t *testing.T) {
	ltRequireAllRefuse(t, ltCtx(t), &fencedlock.Locker{}, &fencedlock.RedisStore{}, fencedlock.ErrInvalidArgument, "")
}

// ltRequireAllRefuse checks that every method of l and s fails with want.
func ltRequireAllRefuse(t *testing.T, ctx context.Context, l *fencedlock.Locker, s *fencedlock.RedisStore, want error, mention string) {
	t.Helper()
	calls := map[string]func() error{
		"TryAcquire": func() error { return ltNoLock(l.TryAcquire(ctx, "r", ltLongTTL)) },
		"Acquire":    func() error { return ltNoLock(l.Acquire(ctx, "r", ltLongTTL)) },
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
		err := ltNoPanic(calls[name])
		if assert.Error(t, err, name) {
			assert.ErrorIs(t, err, want, name)
			assert.Contains(t, err.Error(), mention, name)
		}
	}
}

func TestNilAndZeroLock(t *testing.T) {
	ctx := ltCtx(t)
	for name, lock := range map[string]*fencedlock.Lock{"nil": nil, "zero": {}} {
		lock := lock
		t.Run(name, func(t *testing.T) {
			for op, fn := range map[string]func() error{
				"Refresh": func() error { return lock.Refresh(ctx, ltLongTTL) },
				"Release": func() error { return lock.Release(ctx) },
				"TTL": func() error {
					d, err := lock.TTL(ctx)
					if d != 0 {
						return fmt.Errorf("TTL %v", d)
					}
					return err
				},
			} {
				err := ltNoPanic(fn)
				if assert.Error(t, err, op) {
					assert.ErrorIs(t, err, fencedlock.ErrInvalidArgument, op)
				}
			}
			require.NoError(t, ltNoPanic(func() error {
				assert.Zero(t, lock.Token())
				assert.Empty(t, lock.Resource())
				assert.NotEmpty(t, lock.String())
				return nil
			}))
		})
	}
}

// A token counter holding what the library did not write is reported,
// and nothing is written: no lock is left behind.
func TestCorruptCounter(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := ltCtx(t)
		l := ltLocker(b)
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
				before := ltSnapshot(t, b, counter)

				for op, fn := range map[string]func() error{
					"TryAcquire": func() error { return ltNoLock(l.TryAcquire(ctx, res, ltLongTTL)) },
					"Acquire": func() error {
						actx, cancel := context.WithTimeout(ctx, 2*time.Second)
						defer cancel()
						return ltNoLock(l.Acquire(actx, res, ltLongTTL))
					},
					"Advance": func() error { return l.Advance(ctx, res, 5) },
				} {
					err := ltNoPanic(fn)
					if assert.Error(t, err, op) {
						assert.ErrorIs(t, err, fencedlock.ErrCorrupt, "%s: %v", op, err)
						assert.NotErrorIs(t, err, context.DeadlineExceeded, "%s waited on a corrupt counter", op)
						assert.Contains(t, err.Error(), res, op)
					}
					assert.False(t, ltExists(t, b, l.LockKey(res)), "%s left a lock behind", op)
					assert.Equal(t, before, ltSnapshot(t, b, counter), "%s changed the counter", op)
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
		ctx := ltCtx(t)
		l := ltLocker(b)
		const res = "zeros"
		require.NoError(t, b.Client.Set(ctx, l.TokenKey(res), "007", 0).Err())
		lock, err := l.TryAcquire(ctx, res, ltLongTTL)
		assert.Nil(t, lock)
		assert.ErrorIs(t, err, fencedlock.ErrCorrupt, "error: %v", err)
		assert.False(t, ltExists(t, b, l.LockKey(res)), "a failed TryAcquire left a lock behind (err %v)", err)
		c, _ := ltGetKey(t, b, l.TokenKey(res))
		assert.Equal(t, "007", c, "a failed TryAcquire changed the counter")
	})
}

// A RedisStore value key holding a token the library did not write is
// reported, and left as it is.
func TestCorruptRedisStoreValue(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := ltCtx(t)
		s := ltRedisStore(b)
		tests := []struct {
			name       string
			set        func(key string) error
			getCorrupt bool // Get must report it too
		}{
			{"letters", func(k string) error { return b.Client.HSet(ctx, k, "t", "abc", "v", "old").Err() }, true},
			{"negative", func(k string) error { return b.Client.HSet(ctx, k, "t", "-1", "v", "old").Err() }, true},
			{"fraction", func(k string) error { return b.Client.HSet(ctx, k, "t", "1.5", "v", "old").Err() }, true},
			{"exponent", func(k string) error { return b.Client.HSet(ctx, k, "t", "1e3", "v", "old").Err() }, true},
			{"hex", func(k string) error { return b.Client.HSet(ctx, k, "t", "0x10", "v", "old").Err() }, true},
			{"empty", func(k string) error { return b.Client.HSet(ctx, k, "t", "", "v", "old").Err() }, true},
			{"zero", func(k string) error { return b.Client.HSet(ctx, k, "t", "0", "v", "old").Err() }, true},
			{"leading zero", func(k string) error { return b.Client.HSet(ctx, k, "t", "007", "v", "old").Err() }, true},
			{"2^64", func(k string) error { return b.Client.HSet(ctx, k, "t", "18446744073709551616", "v", "old").Err() }, true},
			{"21 digits", func(k string) error { return b.Client.HSet(ctx, k, "t", "100000000000000000000", "v", "old").Err() }, true},
			{"string type", func(k string) error { return b.Client.Set(ctx, k, "old", 0).Err() }, true},
		}
		for _, tc := range tests {
			tc := tc
			t.Run(tc.name, func(t *testing.T) {
				res := "corrupt-" + strings.ReplaceAll(tc.name, " ", "-")
				key := s.Key(res)
				require.NoError(t, tc.set(key))
				before := ltSnapshot(t, b, key)

				err := ltNoPanic(func() error { return s.Put(ctx, res, 5, []byte("new")) })
				if assert.Error(t, err) {
					assert.ErrorIs(t, err, fencedlock.ErrCorrupt, "Put: %v", err)
					assert.Contains(t, err.Error(), key)
				}
				assert.Equal(t, before, ltSnapshot(t, b, key), "Put changed a corrupt value key")

				if tc.getCorrupt {
					var v []byte
					var tok fencedlock.Token
					err := ltNoPanic(func() (err error) { v, tok, err = s.Get(ctx, res); return err })
					assert.ErrorIs(t, err, fencedlock.ErrCorrupt, "Get: %v", err)
					assert.Nil(t, v)
					assert.Zero(t, tok)
				}
			})
		}
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
		ctx := ltCtx(t)
		res := b.Prefix + "-noprefix" // unique on the shared server
		l := fencedlock.New(b.Client, fencedlock.WithPrefix(""))
		s := fencedlock.NewRedisStore(b.Client, fencedlock.WithStorePrefix(""))
		require.Equal(t, "{"+res+"}:lock", l.LockKey(res))
		require.Equal(t, "{"+res+"}:token", l.TokenKey(res))
		require.Equal(t, "{"+res+"}:value", s.Key(res))
		t.Cleanup(func() { b.Client.Del(context.Background(), l.LockKey(res), l.TokenKey(res), s.Key(res)) })

		lock := ltTryAcquire(t, ctx, l, res, ltLongTTL)
		assert.True(t, ltExists(t, b, l.LockKey(res)))
		assert.True(t, ltExists(t, b, l.TokenKey(res)))
		require.NoError(t, s.Put(ctx, res, lock.Token(), []byte("v")))
		assert.True(t, ltExists(t, b, s.Key(res)))
		ltRequireValue(t, ctx, s, res, "v", lock.Token())
		require.NoError(t, l.Advance(ctx, res, lock.Token()+10))
		require.NoError(t, lock.Release(ctx))
		assert.False(t, ltExists(t, b, l.LockKey(res)))
		assert.Greater(t, ltGrant(t, ctx, l, res), lock.Token()+10)

		_, err := l.TryAcquire(ctx, "}"+res, ltLongTTL)
		assert.ErrorIs(t, err, fencedlock.ErrInvalidArgument)
	})
}

// Refresh, TTL and Release act only on the lock they hold.
func TestRefreshTTLRelease(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := ltCtx(t)
		l := ltLocker(b)

		t.Run("Refresh sets the TTL and keeps the token", func(t *testing.T) {
			lock := ltTryAcquire(t, ctx, l, "refresh", 10*time.Second)
			tok := lock.Token()
			b.FastForward(t, 5*time.Second)
			ttl, err := lock.TTL(ctx)
			require.NoError(t, err)
			assert.LessOrEqual(t, ttl, 5*time.Second)
			assert.Greater(t, ttl, 4*time.Second)

			require.NoError(t, lock.Refresh(ctx, 20*time.Second))
			ttl, err = lock.TTL(ctx)
			require.NoError(t, err)
			assert.LessOrEqual(t, ttl, 20*time.Second)
			assert.Greater(t, ttl, 19*time.Second)
			assert.Equal(t, tok, lock.Token())

			// The refreshed lock outlives its first TTL.
			b.FastForward(t, 10*time.Second)
			_, err = l.TryAcquire(ctx, "refresh", time.Second)
			assert.ErrorIs(t, err, fencedlock.ErrNotAcquired)

			// Refresh may shorten the TTL too.
			require.NoError(t, lock.Refresh(ctx, 2*time.Second))
			ttl, err = lock.TTL(ctx)
			require.NoError(t, err)
			assert.LessOrEqual(t, ttl, 2*time.Second)
			require.NoError(t, lock.Release(ctx))
		})

		t.Run("expired lock is lost", func(t *testing.T) {
			lock := ltTryAcquire(t, ctx, l, "expired", 10*time.Second)
			b.FastForward(t, 11*time.Second)
			_, err := lock.TTL(ctx)
			assert.ErrorIs(t, err, fencedlock.ErrLockLost)
			assert.Contains(t, err.Error(), `"expired"`)
			assert.ErrorIs(t, lock.Refresh(ctx, ltLongTTL), fencedlock.ErrLockLost)
			assert.False(t, ltExists(t, b, l.LockKey("expired")), "Refresh of a lost lock recreated it")
			assert.ErrorIs(t, lock.Release(ctx), fencedlock.ErrLockLost)
		})

		t.Run("Release twice", func(t *testing.T) {
			lock := ltTryAcquire(t, ctx, l, "twice", ltLongTTL)
			require.NoError(t, lock.Release(ctx))
			assert.False(t, ltExists(t, b, l.LockKey("twice")))
			ltRequireReleased(t, lock.Release(ctx), "second Release")
			_, err := lock.TTL(ctx)
			ltRequireReleased(t, err, "TTL")
		})

		t.Run("late Release and Refresh leave the new owner's lock", func(t *testing.T) {
			old := ltTryAcquire(t, ctx, l, "takeover", 10*time.Second)
			b.FastForward(t, 11*time.Second)
			cur := ltTryAcquire(t, ctx, l, "takeover", 10*time.Second)
			owner, _ := ltGetKey(t, b, l.LockKey("takeover"))

			assert.ErrorIs(t, old.Release(ctx), fencedlock.ErrLockLost)
			assert.ErrorIs(t, old.Refresh(ctx, time.Hour), fencedlock.ErrLockLost)
			after, ok := ltGetKey(t, b, l.LockKey("takeover"))
			require.True(t, ok, "a late Release deleted the new owner's lock")
			assert.Equal(t, owner, after)
			ttl, err := cur.TTL(ctx)
			require.NoError(t, err)
			assert.LessOrEqual(t, ttl, 10*time.Second, "a late Refresh extended the new owner's lock")
			require.NoError(t, cur.Release(ctx))
		})

		t.Run("String shows resource and token, not the owner", func(t *testing.T) {
			lock := ltTryAcquire(t, ctx, l, "str", ltLongTTL)
			owner, _ := ltGetKey(t, b, l.LockKey("str"))
			require.NotEmpty(t, owner)
			s := lock.String()
			assert.Contains(t, s, `"str"`)
			assert.Contains(t, s, lock.Token().String())
			assert.NotContains(t, s, owner)
			require.NoError(t, lock.Release(ctx))
		})
	})
}

// errLtLostReply stands for a reply lost on the network.
var errLtLostReply = errors.New("lt: reply lost in transit")

// ltLoseReplyHook lets an acquire script run in Redis and then loses its
// reply, once per arm call: with errLtLostReply, or by cancelling the
// caller's context and returning its error.
type ltLoseReplyHook struct {
	mu       sync.Mutex
	tokenKey string             // names the resource: see ltIsAcquire
	armed    bool               // guarded by mu
	cancel   context.CancelFunc // guarded by mu; nil: return errLtLostReply
	lost     int                // guarded by mu
}

func (h *ltLoseReplyHook) arm(cancel context.CancelFunc) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed, h.cancel = true, cancel
}

// lostCount returns how many replies the hook has lost.
func (h *ltLoseReplyHook) lostCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lost
}

func (h *ltLoseReplyHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *ltLoseReplyHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *ltLoseReplyHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil || !h.isAcquire(cmd) {
			return err
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if !h.armed {
			return nil
		}
		h.armed = false
		h.lost++
		err = errLtLostReply
		if h.cancel != nil {
			h.cancel()
			err = ctx.Err()
		}
		cmd.SetErr(err)
		return err
	}
}

func (h *ltLoseReplyHook) isAcquire(cmd redis.Cmder) bool { return ltIsAcquire(cmd, h.tokenKey) }

// ltIsAcquire reports whether cmd runs the acquire script on the resource
// whose token counter is tokenKey: a script naming that key but not the
// resource's channel, which the release script names.
func ltIsAcquire(cmd redis.Cmder, tokenKey string) bool {
	name := strings.ToLower(cmd.Name())
	if name != "eval" && name != "evalsha" {
		return false
	}
	named := false
	for _, a := range cmd.Args() {
		if s, ok := a.(string); ok {
			if strings.HasSuffix(s, ":grants") {
				return false
			}
			named = named || s == tokenKey
		}
	}
	return named
}

// A grant whose reply is lost is freed, and only that grant.
func TestLostReplyLeavesNoLock(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := ltCtx(t)
		l := ltLocker(b)

		t.Run("context cancelled before the call", func(t *testing.T) {
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			lock, err := l.TryAcquire(cctx, "early", ltLongTTL)
			assert.Nil(t, lock)
			require.Error(t, err)
			assert.ErrorIs(t, err, context.Canceled)
			assert.False(t, ltExists(t, b, l.LockKey("early")), "TryAcquire on a cancelled context left a lock")
			ltGrant(t, ctx, l, "early")
		})

		newClient := func(t *testing.T, resource string) (*fencedlock.Locker, *ltLoseReplyHook, *redis.Client) {
			t.Helper()
			c := redis.NewClient(&redis.Options{Addr: b.Client.Options().Addr})
			t.Cleanup(func() { c.Close() })
			h := &ltLoseReplyHook{tokenKey: l.TokenKey(resource)}
			c.AddHook(h)
			return fencedlock.New(c, fencedlock.WithPrefix(b.Prefix)), h, c
		}

		for _, viaAcquire := range []bool{false, true} {
			viaAcquire := viaAcquire
			call := func(l *fencedlock.Locker, ctx context.Context, res string) (*fencedlock.Lock, error) {
				if viaAcquire {
					return l.Acquire(ctx, res, ltLongTTL)
				}
				return l.TryAcquire(ctx, res, ltLongTTL)
			}
			name := "TryAcquire"
			if viaAcquire {
				name = "Acquire"
			}

			t.Run(name+" network error after the grant", func(t *testing.T) {
				res := "lost-net-" + name
				fl, h, _ := newClient(t, res)
				before := ltGrant(t, ctx, l, res)
				h.arm(nil)
				lock, err := call(fl, ctx, res)
				require.Equal(t, 1, h.lostCount(), "the hook did not intercept the acquire script")
				assert.Nil(t, lock)
				assert.ErrorIs(t, err, errLtLostReply)
				assert.False(t, ltExists(t, b, l.LockKey(res)), "the grant with the lost reply is still locked")
				// The lost grant used a token: the next one is above it.
				assert.Greater(t, ltGrant(t, ctx, l, res), before+1)
			})

			t.Run(name+" context cancelled in flight", func(t *testing.T) {
				res := "lost-ctx-" + name
				fl, h, _ := newClient(t, res)
				cctx, cancel := context.WithCancel(ctx)
				defer cancel()
				h.arm(cancel)
				lock, err := call(fl, cctx, res)
				require.Equal(t, 1, h.lostCount(), "the hook did not intercept the acquire script")
				assert.Nil(t, lock)
				assert.ErrorIs(t, err, context.Canceled)
				// No answer came: Redis did not say the lock was held.
				assert.ErrorIs(t, err, fencedlock.ErrUnavailable)
				assert.NotErrorIs(t, err, fencedlock.ErrNotAcquired)
				ltEventually(t, func() bool { return !ltExists(t, b, l.LockKey(res)) }, "the grant with the lost reply to be released (past ctx, in the background)")
				ltGrant(t, ctx, l, res)
			})

			t.Run(name+" context cancelled in flight, cleanup fails too", func(t *testing.T) {
				res := "lost-ctx-cleanup-" + name
				_, h, c := newClient(t, res)
				logs := &ltSyncBuffer{}
				fl := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix), fencedlock.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
				spy := ltSpyCleanup(b, c, l, res)
				spy.fail = errors.New("lt: cleanup failed")
				cctx, cancel := context.WithCancel(ctx)
				defer cancel()
				h.arm(cancel)
				lock, err := call(fl, cctx, res)
				require.Equal(t, 1, h.lostCount(), "the hook did not intercept the acquire script")
				assert.Nil(t, lock)
				require.Error(t, err)
				assert.ErrorIs(t, err, context.Canceled)
				// No answer came: Redis did not say the lock was held.
				assert.ErrorIs(t, err, fencedlock.ErrUnavailable)
				assert.NotErrorIs(t, err, fencedlock.ErrNotAcquired)
				// The error keeps the attempt's report of the failed cleanup,
				// or, when the cleanup outlived the call's ctx (a loaded
				// machine), says it goes on, and the Locker logs its failure.
				assert.Contains(t, strings.ToLower(err.Error()), "releas", "the error must say the grant may not have been released")
				if strings.Contains(err.Error(), "goes on in the background") {
					ltEventually(t, func() bool { return strings.Contains(logs.String(), "lt: cleanup failed") }, "the failed cleanup to be logged")
				} else {
					assert.Contains(t, err.Error(), "lt: cleanup failed")
				}
				calls, tok := spy.grant(t)
				assert.Equal(t, 1, calls)
				// The grant stays until its TTL ends, as the error says.
				v, ok := ltGetKey(t, b, l.LockKey(res))
				require.True(t, ok, "the grant is gone though its cleanup failed")
				assert.True(t, strings.HasSuffix(v, ":"+tok.String()))
				b.FastForward(t, ltLongTTL)
				assert.Greater(t, ltGrant(t, ctx, l, res), tok)
			})

			t.Run(name+" lost reply of a refusal keeps the holder's lock", func(t *testing.T) {
				res := "lost-held-" + name
				fl, h, _ := newClient(t, res)
				holder := ltTryAcquire(t, ctx, l, res, ltLongTTL)
				owner, _ := ltGetKey(t, b, l.LockKey(res))
				h.arm(nil)
				lock, err := call(fl, ctx, res)
				require.Equal(t, 1, h.lostCount())
				assert.Nil(t, lock)
				assert.ErrorIs(t, err, errLtLostReply)
				after, _ := ltGetKey(t, b, l.LockKey(res))
				assert.Equal(t, owner, after, "the cleanup freed the holder's lock")
				// The attempt was not granted: the cleanup marks it
				// abandoned, so that it could not lock the resource later.
				markers := ltMarkers(t, b, l, res)
				require.Len(t, markers, 1, "the refused attempt must be marked abandoned")
				pttl, err := b.Client.PTTL(ctx, markers[0]).Result()
				require.NoError(t, err)
				assert.Greater(t, pttl, ltLongTTL, "the marker must outlive the lock the attempt asked for")
				require.NoError(t, holder.Release(ctx))
			})
		}
	})
}

// The cleanup of an attempt with the longest TTL a time.Duration holds
// (which TryAcquire accepts) marks the attempt too: the marker's TTL, the
// lock's plus a margin, must not overflow.
func TestLostReplyOfARefusalWithTheLongestTTLIsMarked(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := ltCtx(t)
		l := ltLocker(b)
		const res = "longest-ttl"
		holder := ltTryAcquire(t, ctx, l, res, ltLongTTL)
		c := redis.NewClient(&redis.Options{Addr: b.Client.Options().Addr})
		t.Cleanup(func() { c.Close() })
		h := &ltLoseReplyHook{tokenKey: l.TokenKey(res)}
		c.AddHook(h)
		fl := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix))

		h.arm(nil)
		lock, err := fl.TryAcquire(ctx, res, math.MaxInt64)
		require.Equal(t, 1, h.lostCount())
		assert.Nil(t, lock)
		assert.ErrorIs(t, err, errLtLostReply)
		assert.NotContains(t, strings.ToLower(err.Error()), "releas", "the cleanup failed")
		assert.Len(t, ltMarkers(t, b, l, res), 1, "the refused attempt must be marked abandoned")
		require.NoError(t, holder.Release(ctx))
	})
}

// Lost replies on the network. The tests above lose a reply in a client
// hook; these cut it off on the wire, through redistest.Proxy, so go-redis
// sees the connection end after Redis ran the command and re-sends it by
// itself (MaxRetries).

// ltProxied returns a Locker on b's Redis through a new proxy, with a
// client that retries up to maxRetries times, and the proxy and client.
func ltProxied(t *testing.T, b *redistest.Backend, maxRetries int) (*fencedlock.Locker, *redistest.Proxy, *redis.Client) {
	t.Helper()
	p := redistest.NewProxy(t, b.Client.Options().Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: maxRetries})
	t.Cleanup(func() { c.Close() })
	return fencedlock.New(c, fencedlock.WithPrefix(b.Prefix)), p, c
}

// ltWarm readies c for dropping the replies of commands and nothing else.
// It loads the lock scripts into Redis (a first EVALSHA would get NOSCRIPT
// and be sent again as EVAL, and a dropped NOSCRIPT reply would take a drop
// meant for the script): acquire and release by a grant, and the cleanup
// of an acquire without a reply by an acquire whose reply a client hook
// loses. It leaves n connections in c's pool with their handshakes done: a
// new connection starts with HELLO and CLIENT SETINFO, whose replies would
// take drops meant for the next command. The proxy is paused while n Pings
// dial, so that each Ping holds a connection of its own.
func ltWarm(t *testing.T, ctx context.Context, fl *fencedlock.Locker, c *redis.Client, p *redistest.Proxy, n int) {
	t.Helper()
	ltGrant(t, ctx, fl, "warm-up")
	h := &ltLoseReplyHook{tokenKey: fl.TokenKey("warm-up-cleanup")}
	c.AddHook(h)
	h.arm(nil)
	_, err := fl.TryAcquire(ctx, "warm-up-cleanup", ltLongTTL)
	require.ErrorIs(t, err, errLtLostReply)
	require.Equal(t, 1, h.lostCount())
	require.NotContains(t, strings.ToLower(err.Error()), "releas", "the warm-up cleanup failed")
	p.Pause()
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() { errs <- c.Ping(ctx).Err() }()
	}
	deadline := time.Now().Add(5 * time.Second)
	for c.PoolStats().TotalConns < uint32(n) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	p.Resume()
	for i := 0; i < n; i++ {
		require.NoError(t, <-errs)
	}
	require.GreaterOrEqual(t, c.PoolStats().IdleConns, uint32(n), "warm connections in the pool")
	require.Zero(t, p.Dropped())
}

// ltAcquireCall is TryAcquire or Acquire, for tests that run both.
type ltAcquireCall struct {
	name string
	call func(ctx context.Context, l *fencedlock.Locker, resource string) (*fencedlock.Lock, error)
}

var ltAcquireCalls = []ltAcquireCall{
	{"TryAcquire", func(ctx context.Context, l *fencedlock.Locker, resource string) (*fencedlock.Lock, error) {
		return l.TryAcquire(ctx, resource, ltLongTTL)
	}},
	{"Acquire", func(ctx context.Context, l *fencedlock.Locker, resource string) (*fencedlock.Lock, error) {
		return l.Acquire(ctx, resource, ltLongTTL)
	}},
}

// ltCleanupSpy is a client hook that sees the cleanup of an acquire
// attempt without a reply (the abandon script, which names the attempt's
// marker key and, unlike the acquire script, not the token key). It counts
// the calls (go-redis re-sends a command inside one call, after the hooks)
// and, just before the first, reads the lock key through another client:
// what the attempt left.
type ltCleanupSpy struct {
	read     func() (string, bool, error) // the lock key
	tokenKey string
	fail     error // when set, every cleanup call fails with it, unsent

	mu         sync.Mutex
	calls      int    // guarded by mu; cleanup calls
	lockBefore string // guarded by mu; the lock key's value before the first
	held       bool   // guarded by mu; whether the lock key existed then
	readErr    error  // guarded by mu
}

// ltSpyCleanup adds an ltCleanupSpy for the attempts of l on resource to c.
func ltSpyCleanup(b *redistest.Backend, c *redis.Client, l *fencedlock.Locker, resource string) *ltCleanupSpy {
	s := &ltCleanupSpy{tokenKey: l.TokenKey(resource), read: func() (string, bool, error) {
		v, err := b.Client.Get(context.Background(), l.LockKey(resource)).Result()
		if errors.Is(err, redis.Nil) {
			return "", false, nil
		}
		return v, err == nil, err
	}}
	c.AddHook(s)
	return s
}

func (s *ltCleanupSpy) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *ltCleanupSpy) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (s *ltCleanupSpy) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if s.isCleanup(cmd) {
			s.mu.Lock()
			s.calls++
			if s.calls == 1 {
				s.lockBefore, s.held, s.readErr = s.read()
			}
			s.mu.Unlock()
			if s.fail != nil {
				cmd.SetErr(s.fail)
				return s.fail
			}
		}
		return next(ctx, cmd)
	}
}

func (s *ltCleanupSpy) isCleanup(cmd redis.Cmder) bool {
	name := strings.ToLower(cmd.Name())
	if name != "eval" && name != "evalsha" {
		return false
	}
	// The cleanup is the release script run with the attempt's marker:
	// the acquire script names the marker too, but not the channel.
	marker, channel := false, false
	for _, a := range cmd.Args() {
		if str, ok := a.(string); ok {
			marker = marker || strings.Contains(str, ":abandoned:")
			channel = channel || strings.HasSuffix(str, ":grants")
		}
	}
	return marker && channel
}

// grant returns the number of cleanup calls and the token of the grant the
// lock key held before the first, failing t when it held none.
func (s *ltCleanupSpy) grant(t *testing.T) (int, fencedlock.Token) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	require.NoError(t, s.readErr)
	require.Positive(t, s.calls, "no cleanup was sent")
	require.True(t, s.held, "the lock key was free before the cleanup: the attempt was not granted")
	m := ltLockValue.FindStringSubmatch(s.lockBefore)
	require.NotNil(t, m, "lock key value %q", s.lockBefore)
	tok, err := fencedlock.ParseToken(m[2])
	require.NoError(t, err)
	return s.calls, tok
}

// The reply of a grant is cut off and go-redis re-sends the script: the
// re-sent run finds the lock held by its own owner and returns the same
// grant, so the caller gets the lock (not ErrNotAcquired while its own
// grant blocks everyone for a TTL), and the counter rose once.
func TestLostReplyOnTheNetworkIsGrantedOnRetry(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := ltCtx(t)
		l := ltLocker(b)
		for _, ac := range ltAcquireCalls {
			ac := ac
			t.Run(ac.name, func(t *testing.T) {
				res := "net-lost-" + ac.name
				fl, p, c := ltProxied(t, b, 3)
				ltWarm(t, ctx, fl, c, p, 1)
				before := ltGrant(t, ctx, l, res)

				p.DropReplies(1)
				// Short: without the retry's re-grant Acquire would wait for
				// its own lock to expire.
				actx, cancel := context.WithTimeout(ctx, 3*time.Second)
				defer cancel()
				lock, err := ac.call(actx, fl, res)
				require.Equal(t, 1, p.Dropped(), "the proxy did not drop the acquire's reply")
				require.NoError(t, err, "the re-sent acquire must return the grant its lost reply carried")
				require.NotNil(t, lock)
				assert.Greater(t, lock.Token(), before, "the grant must take a higher token")
				// The counter rose once for the sent and the re-sent run:
				// it holds the granted token (a second grant would have
				// raised it past that).
				counter, _ := ltGetKey(t, b, l.TokenKey(res))
				assert.Equal(t, lock.Token().String(), counter, "the re-sent acquire raised the counter again")

				// The lock key is this Lock's: others are refused, its TTL
				// and Release work.
				_, err = l.TryAcquire(ctx, res, ltLongTTL)
				assert.ErrorIs(t, err, fencedlock.ErrNotAcquired)
				ttl, err := lock.TTL(ctx)
				require.NoError(t, err)
				assert.Greater(t, ttl, ltLongTTL-5*time.Second)
				require.NoError(t, lock.Release(ctx))
				assert.False(t, ltExists(t, b, l.LockKey(res)))
				assert.Greater(t, ltGrant(t, ctx, l, res), lock.Token())
			})
		}
	})
}

// Every run of the acquire loses its reply (MaxRetries 1: two runs, two
// drops): the caller gets an error, not ErrNotAcquired, and the cleanup,
// which comes after the drops are used up, frees the grant.
func TestLostReplyOnEveryRetryLeavesNoLock(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := ltCtx(t)
		l := ltLocker(b)
		for _, ac := range ltAcquireCalls {
			ac := ac
			t.Run(ac.name, func(t *testing.T) {
				res := "net-lost-all-" + ac.name
				fl, p, c := ltProxied(t, b, 1)
				// Two warm connections: the retry runs on the second one,
				// so the second drop takes the retry's reply, not the
				// handshake of a new connection.
				ltWarm(t, ctx, fl, c, p, 2)
				before := ltGrant(t, ctx, l, res)
				spy := ltSpyCleanup(b, c, l, res)

				p.DropReplies(2)
				actx, cancel := context.WithTimeout(ctx, 3*time.Second)
				defer cancel()
				lock, err := ac.call(actx, fl, res)
				require.Equal(t, 2, p.Dropped(), "the proxy did not drop both replies")
				assert.Nil(t, lock)
				require.Error(t, err)
				assert.NotErrorIs(t, err, fencedlock.ErrNotAcquired, "no attempt got a reply: the lock was not found held")
				assert.NotErrorIs(t, err, context.DeadlineExceeded)
				// The cleanup got through at once (no drops were left for its
				// reply), so the error does not report a failed cleanup.
				assert.NotContains(t, strings.ToLower(err.Error()), "releas")
				calls, tok := spy.grant(t)
				assert.Equal(t, 1, calls, "one cleanup")
				assert.Greater(t, tok, before)

				// The attempt was granted: the cleanup freed the grant.
				assert.False(t, ltExists(t, b, l.LockKey(res)), "the grant whose replies were lost is still locked")

				// The first run raised the counter; the re-sent one found its
				// own grant and did not: the counter holds the grant's token.
				counter, _ := ltGetKey(t, b, l.TokenKey(res))
				assert.Equal(t, tok.String(), counter, "the re-sent acquire raised the counter again")
				assert.Greater(t, ltGrant(t, ctx, l, res), tok)
			})
		}
	})
}

// The cleanup loses its replies too (MaxRetries 1: two acquire runs and
// two cleanup runs, four drops). A dropped reply is cut off after Redis ran
// the command, so the cleanup did free the grant; but the caller cannot
// know that, and the error must say the grant may stay locked until its TTL
// ends.
func TestLostReplyOfCleanupTooIsReported(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := ltCtx(t)
		l := ltLocker(b)
		for _, ac := range ltAcquireCalls {
			ac := ac
			t.Run(ac.name, func(t *testing.T) {
				res := "net-lost-cleanup-" + ac.name
				fl, p, c := ltProxied(t, b, 1)
				ltWarm(t, ctx, fl, c, p, 4)
				before := ltGrant(t, ctx, l, res)
				spy := ltSpyCleanup(b, c, l, res)

				p.DropReplies(4)
				actx, cancel := context.WithTimeout(ctx, 3*time.Second)
				defer cancel()
				lock, err := ac.call(actx, fl, res)
				require.Equal(t, 4, p.Dropped(), "the proxy did not drop the replies of both acquire and both cleanup runs")
				assert.Nil(t, lock)
				require.Error(t, err)
				assert.NotErrorIs(t, err, fencedlock.ErrNotAcquired)
				assert.Contains(t, strings.ToLower(err.Error()), "releas", "the error must say the grant may not have been released: %v", err)
				calls, tok := spy.grant(t)
				assert.Equal(t, 1, calls, "one cleanup (go-redis re-sent it within the call)")
				assert.Greater(t, tok, before)

				// The attempt was granted, and the cleanup ran in Redis (only
				// its replies were lost): the grant is gone.
				assert.False(t, ltExists(t, b, l.LockKey(res)), "the cleanup whose replies were lost did not run")
				counter, _ := ltGetKey(t, b, l.TokenKey(res))
				assert.Equal(t, tok.String(), counter, "the re-sent acquire raised the counter again")
				assert.Greater(t, ltGrant(t, ctx, l, res), tok)
			})
		}
	})
}

// ltWaitAnswered waits until the server has answered the n requests the
// proxy held (HoldRequests): they have arrived and run.
func ltWaitAnswered(t *testing.T, p *redistest.Proxy, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for p.Answered() < n && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	require.Equal(t, n, p.Answered(), "the held requests were not answered (%d released)", p.Released())
}

// An acquire request held up in the network reaches Redis only after its
// client gave up on it (its context ended): the cleanup found no grant and
// marked the attempt abandoned, and the late request must lock nothing.
func TestAbandonedAttemptArrivingLateIsRefused(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := ltCtx(t)
		l := ltLocker(b)
		for _, ac := range ltAcquireCalls {
			ac := ac
			t.Run(ac.name, func(t *testing.T) {
				res := "late-" + ac.name
				p := redistest.NewProxy(t, b.Client.Options().Addr)
				// The context's deadline bounds each read: the client gives
				// up when it ends, and does not send the request again.
				c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
				t.Cleanup(func() { c.Close() })
				fl := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix))
				ltWarm(t, ctx, fl, c, p, 2)
				before := ltGrant(t, ctx, l, res)

				const hold, wait = 400 * time.Millisecond, 100 * time.Millisecond
				p.HoldRequests(1, hold)
				actx, cancel := context.WithTimeout(ctx, wait)
				defer cancel()
				start := time.Now()
				lock, err := ac.call(actx, fl, res)
				took := time.Since(start)
				assert.Nil(t, lock)
				require.Error(t, err)
				assert.ErrorIs(t, err, context.DeadlineExceeded)
				assert.ErrorIs(t, err, fencedlock.ErrUnavailable)
				assert.NotErrorIs(t, err, fencedlock.ErrNotAcquired)
				ltAwaitCleanup(t, err, func() bool { return len(ltMarkers(t, b, l, res)) == 1 })
				require.Zero(t, p.Released(), "the held request arrived before the client gave up (after %v)", took)
				assert.Less(t, took, hold)

				// The cleanup found no grant: it marked the attempt.
				assert.False(t, ltExists(t, b, l.LockKey(res)))
				require.Len(t, ltMarkers(t, b, l, res), 1, "the cleanup left no marker")

				// The request arrives and runs: it must lock nothing.
				ltWaitAnswered(t, p, 1)
				assert.False(t, ltExists(t, b, l.LockKey(res)), "the request that arrived after its client gave up locked the resource")
				markers := ltMarkers(t, b, l, res)
				require.Len(t, markers, 1)
				pttl, err := b.Client.PTTL(ctx, markers[0]).Result()
				require.NoError(t, err)
				assert.Greater(t, pttl, ltLongTTL, "the marker must outlive the lock the attempt asked for")
				counter, _ := ltGetKey(t, b, l.TokenKey(res))
				assert.Equal(t, before.String(), counter, "the refused request raised the counter")

				// The resource is free for others.
				assert.Greater(t, ltGrant(t, ctx, l, res), before)
			})
		}
	})
}

// go-redis sends a command again when its reply has not come within
// ReadTimeout (here 100ms, MaxRetries 1). When the first copy of an acquire
// is held up in the network, the second one can be answered while the
// first is still on its way. Once TryAcquire has returned without a lock,
// the first copy arriving late must not lock the resource, just as an
// attempt without any reply must not (TestAbandonedAttemptArrivingLateIsRefused).
func TestFirstCopyOfAResentAcquireArrivingLateIsRefused(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := ltCtx(t)
		l := ltLocker(b)
		const hold = 400 * time.Millisecond
		proxied := func(t *testing.T) (*fencedlock.Locker, *redistest.Proxy) {
			t.Helper()
			p := redistest.NewProxy(t, b.Client.Options().Addr)
			c := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 100 * time.Millisecond, MaxRetries: 1})
			t.Cleanup(func() { c.Close() })
			fl := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix))
			// The second copy goes out on the second warm connection.
			ltWarm(t, ctx, fl, c, p, 2)
			return fl, p
		}

		// The second copy is granted and its reply lost: the cleanup
		// deletes its grant. Then the first copy arrives.
		t.Run("second copy granted, its reply lost", func(t *testing.T) {
			const res = "resent-granted"
			fl, p := proxied(t)
			p.HoldRequests(1, hold)
			p.DropReplies(1)
			lock, err := fl.TryAcquire(ctx, res, ltLongTTL)
			assert.Nil(t, lock)
			require.Error(t, err)
			require.Equal(t, 1, p.Dropped(), "the second copy's reply was not dropped")
			require.Zero(t, p.Released(), "the first copy arrived before TryAcquire returned")
			assert.NotContains(t, strings.ToLower(err.Error()), "releas", "the cleanup failed")
			assert.False(t, ltExists(t, b, l.LockKey(res)), "the cleanup left the second copy's grant")

			ltWaitAnswered(t, p, 1)
			v, locked := ltGetKey(t, b, l.LockKey(res))
			assert.False(t, locked, "the first copy of the acquire, arriving after TryAcquire returned an error, "+
				"locked the resource (lock key %q, TTL %v): the cleanup deleted the second copy's grant but left no marker",
				v, b.Client.PTTL(ctx, l.LockKey(res)).Val())
		})

		// The second copy finds the lock held and TryAcquire reports
		// ErrNotAcquired. The holder releases; then the first copy arrives.
		// Not covered yet (see TryAcquire's doc): marking every refused
		// attempt would cost a write per refusal. This reproduces the case
		// for the work that closes it.
		t.Run("second copy refused", func(t *testing.T) {
			t.Skip("known gap, documented on Locker.TryAcquire: a refused copy sets no marker, so a delayed first copy can lock the resource for one TTL (liveness only)")
			const res = "resent-refused"
			fl, p := proxied(t)
			holder := ltTryAcquire(t, ctx, l, res, ltLongTTL)
			p.HoldRequests(1, hold)
			lock, err := fl.TryAcquire(ctx, res, ltLongTTL)
			assert.Nil(t, lock)
			require.ErrorIs(t, err, fencedlock.ErrNotAcquired)
			require.Zero(t, p.Released(), "the first copy arrived before TryAcquire returned")
			require.NoError(t, holder.Release(ctx))

			ltWaitAnswered(t, p, 1)
			v, locked := ltGetKey(t, b, l.LockKey(res))
			assert.False(t, locked, "the first copy of the acquire, arriving after TryAcquire returned ErrNotAcquired, "+
				"locked the resource (lock key %q, TTL %v): nothing marked the attempt over", v, b.Client.PTTL(ctx, l.LockKey(res)).Val())
		})
	})
}

// Huge retry delays do not overflow Acquire's backoff, and every wait is
// capped by the holder's remaining TTL.
func TestAcquireHugeRetryDelays(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := ltCtx(t)
		l := ltLocker(b)
		tests := []struct {
			name               string
			minDelay, maxDelay time.Duration
		}{
			{"MaxInt64", math.MaxInt64, math.MaxInt64},
			{"1ms up to 2^62ns", time.Millisecond, 1 << 62},
		}
		for _, tc := range tests {
			tc := tc
			t.Run(tc.name, func(t *testing.T) {
				res := "huge-delay-" + strings.ReplaceAll(tc.name, " ", "-")
				if b.Real {
					// The holder's lock expires for real: Acquire's waits are
					// capped at its PTTL, so it gets the lock soon after.
					start := time.Now()
					holder := ltTryAcquire(t, ctx, l, res, 100*time.Millisecond)
					actx, cancel := context.WithTimeout(ctx, 3*time.Second)
					defer cancel()
					var lock *fencedlock.Lock
					err := ltNoPanic(func() (err error) {
						lock, err = l.Acquire(actx, res, ltLongTTL, fencedlock.WithRetryDelay(tc.minDelay, tc.maxDelay))
						return err
					})
					require.NoError(t, err, "an attempt in the holder's last millisecond (PTTL 0) must not leave the wait uncapped")
					assert.GreaterOrEqual(t, time.Since(start), 90*time.Millisecond, "acquired before the holder's TTL ran out")
					assert.Greater(t, lock.Token(), holder.Token())
					assert.ErrorIs(t, holder.Release(ctx), fencedlock.ErrLockLost)
					require.NoError(t, lock.Release(ctx))
					return
				}
				// miniredis never expires the holder's lock and its PTTL
				// stays at 1ms, so Acquire retries about every millisecond
				// and its delay doubles up to maxDelay (with 1ms up to 2^62ns,
				// 43 doublings) and is doubled again: an overflow there
				// panicked or made the wait negative.
				holder := ltTryAcquire(t, ctx, l, res, time.Millisecond)
				owner, _ := ltGetKey(t, b, l.LockKey(res))
				actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
				var lock *fencedlock.Lock
				err := ltNoPanic(func() (err error) {
					lock, err = l.Acquire(actx, res, ltLongTTL, fencedlock.WithRetryDelay(tc.minDelay, tc.maxDelay))
					return err
				})
				assert.Nil(t, lock)
				require.Error(t, err)
				assert.ErrorIs(t, err, fencedlock.ErrNotAcquired)
				assert.ErrorIs(t, err, context.DeadlineExceeded)
				after, _ := ltGetKey(t, b, l.LockKey(res))
				assert.Equal(t, owner, after)
				require.NoError(t, holder.Release(ctx))
			})
		}
	})
}

// Acquire never sleeps past the holder's expiry, however long its retry
// delay: on real Redis only (miniredis never expires keys on its own).
func TestAcquireWaitIsCappedByHolderTTL(t *testing.T) {
	b := redistest.Real(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l := ltLocker(b)
	start := time.Now()
	holder := ltTryAcquire(t, ctx, l, "capped", 150*time.Millisecond)
	lock, err := l.Acquire(ctx, "capped", ltLongTTL, fencedlock.WithRetryDelay(time.Hour, time.Hour))
	took := time.Since(start)
	require.NoError(t, err, "Acquire waited its full retry delay: did an attempt in the holder's last millisecond (PTTL 0) leave the wait uncapped?")
	assert.Less(t, took, 2*time.Second, "Acquire waited well past the holder's expiry")
	assert.GreaterOrEqual(t, took, 140*time.Millisecond, "acquired before the holder's TTL ran out")
	assert.Greater(t, lock.Token(), holder.Token())
	require.NoError(t, lock.Release(ctx))
}

// ltAttemptCounter is a client hook that counts the acquire scripts (the
// EVALSHA or EVAL naming tokenKey) that got a reply.
type ltAttemptCounter struct {
	tokenKey string
	n        atomic.Int32
}

func (h *ltAttemptCounter) count() int { return int(h.n.Load()) }

func (h *ltAttemptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *ltAttemptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *ltAttemptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && ltIsAcquire(cmd, h.tokenKey) {
			h.n.Add(1)
		}
		return err
	}
}

// In the last millisecond of a lock Redis reports its PTTL as 0 while
// the key still exists. An attempt landing there (likely: Acquire times its
// retry to the holder's expiry) must still cap its wait, not sleep its
// full retry delay. miniredis shows it deterministically: its clock moves
// only by FastForward.
func TestAcquireWaitWhenHolderPTTLIsZero(t *testing.T) {
	b := redistest.Mini(t)
	ctx := ltCtx(t)
	l := ltLocker(b)
	const res = "pttl-zero"
	holder := ltTryAcquire(t, ctx, l, res, time.Millisecond)
	b.FastForward(t, 999*time.Microsecond)
	pttl, err := b.Client.PTTL(ctx, l.LockKey(res)).Result()
	require.NoError(t, err)
	require.Equal(t, time.Duration(0), pttl, "the holder's lock must be in its last millisecond")

	// Acquire runs on a client that counts its attempts: the first must
	// have found the lock held before the clock moves on.
	c := redis.NewClient(&redis.Options{Addr: b.Miniredis().Addr()})
	t.Cleanup(func() { c.Close() })
	attempts := &ltAttemptCounter{tokenKey: l.TokenKey(res)}
	c.AddHook(attempts)
	waiter := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix))

	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	done := make(chan ltAcquireResult, 1)
	go func() {
		lock, err := waiter.Acquire(actx, res, ltLongTTL, fencedlock.WithRetryDelay(time.Hour, time.Hour))
		done <- ltAcquireResult{lock, err, time.Now()}
	}()
	deadline := time.Now().Add(time.Second)
	for attempts.count() < 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	require.GreaterOrEqual(t, attempts.count(), 1, "Acquire made no attempt")
	ltRequireStillWaiting(t, done) // its attempts found the lock held
	b.FastForward(t, time.Millisecond)
	_, err = holder.TTL(ctx)
	require.ErrorIs(t, err, fencedlock.ErrLockLost, "the holder's lock must have expired")
	r := <-done
	require.NoError(t, r.err, "Acquire slept its retry delay (an hour) after finding the holder's PTTL at 0")
	assert.Greater(t, r.lock.Token(), holder.Token())
	require.NoError(t, r.lock.Release(ctx))
}

// A lock key of the wrong Redis type, written by someone else: acquiring
// reports it as corrupt and writes nothing; a Lock whose key was replaced
// by it has lost its lock, and leaves the key alone.
func TestLockKeyOfWrongType(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := ltCtx(t)
		l := ltLocker(b)

		t.Run("acquire", func(t *testing.T) {
			const res = "wrongtype-acquire"
			ltGrant(t, ctx, l, res)
			require.NoError(t, b.Client.HSet(ctx, l.LockKey(res), "f", "v").Err())
			lockBefore := ltSnapshot(t, b, l.LockKey(res))
			counterBefore := ltSnapshot(t, b, l.TokenKey(res))
			for _, ac := range ltAcquireCalls {
				actx, cancel := context.WithTimeout(ctx, 2*time.Second)
				var lock *fencedlock.Lock
				err := ltNoPanic(func() (err error) { lock, err = ac.call(actx, l, res); return err })
				cancel()
				assert.Nil(t, lock, ac.name)
				assert.ErrorIs(t, err, fencedlock.ErrCorrupt, "%s: %v", ac.name, err)
				assert.NotErrorIs(t, err, fencedlock.ErrNotAcquired, ac.name)
				assert.NotErrorIs(t, err, context.DeadlineExceeded, "%s waited on a corrupt lock key", ac.name)
				assert.Equal(t, lockBefore, ltSnapshot(t, b, l.LockKey(res)), "%s changed the lock key", ac.name)
				assert.Equal(t, counterBefore, ltSnapshot(t, b, l.TokenKey(res)), "%s changed the counter", ac.name)
			}
		})

		t.Run("held lock replaced", func(t *testing.T) {
			const res = "wrongtype-held"
			lock := ltTryAcquire(t, ctx, l, res, ltLongTTL)
			require.NoError(t, b.Client.Del(ctx, l.LockKey(res)).Err())
			require.NoError(t, b.Client.HSet(ctx, l.LockKey(res), "f", "v").Err())
			before := ltSnapshot(t, b, l.LockKey(res))

			err := ltNoPanic(func() error { return lock.Refresh(ctx, time.Hour) })
			assert.ErrorIs(t, err, fencedlock.ErrLockLost, "Refresh: %v", err)
			assert.Equal(t, before, ltSnapshot(t, b, l.LockKey(res)), "Refresh changed the key")
			pttl, err := b.Client.PTTL(ctx, l.LockKey(res)).Result()
			require.NoError(t, err)
			assert.Equal(t, time.Duration(-1), pttl, "Refresh set a TTL on the key")

			var ttl time.Duration
			err = ltNoPanic(func() (err error) { ttl, err = lock.TTL(ctx); return err })
			assert.ErrorIs(t, err, fencedlock.ErrLockLost, "TTL: %v", err)
			assert.Zero(t, ttl)

			err = ltNoPanic(func() error { return lock.Release(ctx) })
			assert.ErrorIs(t, err, fencedlock.ErrLockLost, "Release: %v", err)
			assert.Equal(t, before, ltSnapshot(t, b, l.LockKey(res)), "Release changed the key")
		})
	})
}

// ltLockValue matches a lock key's value: the owner's 128-bit nonce in hex,
// ':', and the token in decimal.
var ltLockValue = regexp.MustCompile(`^([0-9a-f]{32}):([0-9]+)$`)

// The lock key holds the owner nonce and the token, the token's digits
// exact even where a Lua number would print them in exponent form (real
// Redis formats 1.7e15, a clock-seeded token, as "1.7959695163434e+15")
// or round them (above 2^53).
func TestLockKeyValue(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := ltCtx(t)
		l := ltLocker(b)
		check := func(t *testing.T, res string) (*fencedlock.Lock, string) {
			t.Helper()
			lock := ltTryAcquire(t, ctx, l, res, ltLongTTL)
			v, ok := ltGetKey(t, b, l.LockKey(res))
			require.True(t, ok)
			m := ltLockValue.FindStringSubmatch(v)
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

// The proxy the network tests build on: it forwards, pauses, delays,
// drops replies, holds requests and closes connections, and its cleanup
// ends every goroutine it started.
func TestProxy(t *testing.T) {
	baseline := runtime.NumGoroutine()
	t.Run("faults", func(t *testing.T) {
		m := miniredis.RunT(t)
		p := redistest.NewProxy(t, m.Addr())
		direct := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { direct.Close() })
		ctx := ltCtx(t)

		dial := func(t *testing.T) (net.Conn, *bufio.Reader) {
			t.Helper()
			c, err := net.Dial("tcp", p.Addr())
			require.NoError(t, err)
			t.Cleanup(func() { c.Close() })
			return c, bufio.NewReader(c)
		}
		// send writes a command as a RESP array (miniredis takes no
		// inline commands).
		send := func(t *testing.T, c net.Conn, cmd string) {
			t.Helper()
			args := strings.Fields(cmd)
			var sb strings.Builder
			fmt.Fprintf(&sb, "*%d\r\n", len(args))
			for _, a := range args {
				fmt.Fprintf(&sb, "$%d\r\n%s\r\n", len(a), a)
			}
			_, err := c.Write([]byte(sb.String()))
			require.NoError(t, err)
		}
		reply := func(t *testing.T, c net.Conn, r *bufio.Reader, within time.Duration) (string, error) {
			t.Helper()
			require.NoError(t, c.SetReadDeadline(time.Now().Add(within)))
			line, err := r.ReadString('\n')
			return strings.TrimRight(line, "\r\n"), err
		}

		c, r := dial(t)
		send(t, c, "PING")
		line, err := reply(t, c, r, 2*time.Second)
		require.NoError(t, err)
		assert.Equal(t, "+PONG", line)

		t.Run("Pause holds both directions until Resume", func(t *testing.T) {
			p.Pause()
			send(t, c, "INCR paused")
			_, err := reply(t, c, r, 100*time.Millisecond)
			var ne net.Error
			require.True(t, errors.As(err, &ne) && ne.Timeout(), "a reply arrived while paused: %v", err)
			assert.Zero(t, direct.Exists(ctx, "paused").Val(), "a command reached the server while paused")
			// A new connection is accepted while paused, its bytes held too.
			c2, r2 := dial(t)
			send(t, c2, "INCR paused")
			p.Resume()
			line, err := reply(t, c, r, 2*time.Second)
			require.NoError(t, err)
			line2, err := reply(t, c2, r2, 2*time.Second)
			require.NoError(t, err)
			assert.ElementsMatch(t, []string{":1", ":2"}, []string{line, line2})
		})

		t.Run("Delay", func(t *testing.T) {
			p.Delay(50 * time.Millisecond)
			start := time.Now()
			send(t, c, "PING")
			line, err := reply(t, c, r, 2*time.Second)
			require.NoError(t, err)
			assert.Equal(t, "+PONG", line)
			assert.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond, "a command and its reply each wait the delay")
			p.Delay(0)
			start = time.Now()
			send(t, c, "PING")
			_, err = reply(t, c, r, 2*time.Second)
			require.NoError(t, err)
			assert.Less(t, time.Since(start), 50*time.Millisecond)
		})

		t.Run("DropReplies", func(t *testing.T) {
			p.DropReplies(1)
			send(t, c, "INCR dropped")
			_, err := reply(t, c, r, 2*time.Second)
			assert.ErrorIs(t, err, io.EOF, "the connection must end where the reply was")
			assert.Equal(t, "1", direct.Get(ctx, "dropped").Val(), "the server ran the command")
			assert.Equal(t, 1, p.Dropped())
			// The drops are used up: a new connection gets its replies.
			c3, r3 := dial(t)
			send(t, c3, "INCR dropped")
			line, err := reply(t, c3, r3, 2*time.Second)
			require.NoError(t, err)
			assert.Equal(t, ":2", line)
		})

		t.Run("HoldRequests delivers after the client has gone", func(t *testing.T) {
			c3, r3 := dial(t)
			send(t, c3, "PING")
			_, err := reply(t, c3, r3, 2*time.Second)
			require.NoError(t, err)

			p.HoldRequests(1, 300*time.Millisecond)
			send(t, c3, "INCR held")
			_, err = reply(t, c3, r3, 50*time.Millisecond)
			var ne net.Error
			require.True(t, errors.As(err, &ne) && ne.Timeout(), "a reply arrived while the request was held: %v", err)
			require.NoError(t, c3.Close()) // the client gives up
			// Other requests flow meanwhile.
			c4, r4 := dial(t)
			send(t, c4, "PING")
			line, err := reply(t, c4, r4, time.Second)
			require.NoError(t, err)
			assert.Equal(t, "+PONG", line)
			assert.Zero(t, direct.Exists(ctx, "held").Val(), "the held request reached the server early")
			assert.Zero(t, p.Released())

			deadline := time.Now().Add(5 * time.Second)
			for p.Answered() < 1 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			assert.Equal(t, 1, p.Released())
			assert.Equal(t, 1, p.Answered())
			assert.Equal(t, "1", direct.Get(ctx, "held").Val(), "the held request did not run once its client had gone")
		})

		t.Run("CloseAll", func(t *testing.T) {
			c3, r3 := dial(t)
			send(t, c3, "PING")
			_, err := reply(t, c3, r3, 2*time.Second)
			require.NoError(t, err)
			p.CloseAll()
			_, err = reply(t, c3, r3, 2*time.Second)
			assert.ErrorIs(t, err, io.EOF)
			c4, r4 := dial(t)
			send(t, c4, "PING")
			line, err := reply(t, c4, r4, 2*time.Second)
			require.NoError(t, err)
			assert.Equal(t, "+PONG", line)
			// Left for the cleanup: a connection with a chunk held by a
			// pause, and one with a chunk in a delay.
			p.Pause()
			send(t, c4, "PING")
			c5, _ := dial(t)
			p.Delay(time.Hour)
			send(t, c5, "PING")
		})
	})
	// The cleanups ran: the proxy's goroutines, like miniredis's, ended.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > baseline && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > baseline {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines after the proxy's cleanup, %d before:\n%s", n, baseline, buf[:runtime.Stack(buf, true)])
	}
}

// Concurrent histories and the fenced-register check.

type ltOpKind int

const (
	ltPutOp ltOpKind = iota
	ltGetOp
)

type ltOutcome int

const (
	ltAccepted ltOutcome = iota // Put stored
	ltStale                     // Put refused with a *StaleTokenError
	ltRead                      // Get returned a value
	ltNotFound                  // Get found nothing
)

// ltOp is one call to a Store. invoke and complete come from one atomic
// clock, taken just before the call and just after it returned, so
// a.complete < b.invoke means a returned before b was called.
type ltOp struct {
	kind     ltOpKind
	resource string
	token    fencedlock.Token // Put: the writer's; Get: the one returned
	value    string           // Put: written (unique); Get: returned
	outcome  ltOutcome
	stale    fencedlock.StaleTokenError // for ltStale: what the store reported

	invoke, complete int64
}

func (o ltOp) String() string {
	kind := "Put"
	if o.kind == ltGetOp {
		kind = "Get"
	}
	return fmt.Sprintf("%s(%s, token %d, %q)@[%d,%d]", kind, o.resource, o.token, o.value, o.invoke, o.complete)
}

// ltHistory records the calls of many goroutines to one Store.
type ltHistory struct {
	clock atomic.Int64
	mu    sync.Mutex
	ops   []ltOp // guarded by mu
}

func (h *ltHistory) add(op ltOp) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

// put calls s.Put and records it. It returns errors other than a stale
// token, which are not recorded.
func (h *ltHistory) put(ctx context.Context, s fencedlock.Store, resource string, token fencedlock.Token, value string) (ltOp, error) {
	op := ltOp{kind: ltPutOp, resource: resource, token: token, value: value}
	op.invoke = h.clock.Add(1)
	err := s.Put(ctx, resource, token, []byte(value))
	op.complete = h.clock.Add(1)
	var se *fencedlock.StaleTokenError
	switch {
	case err == nil:
		op.outcome = ltAccepted
	case errors.As(err, &se):
		op.outcome, op.stale = ltStale, *se
	default:
		return op, err
	}
	h.add(op)
	return op, nil
}

// get calls s.Get and records it.
func (h *ltHistory) get(ctx context.Context, s fencedlock.Store, resource string) error {
	op := ltOp{kind: ltGetOp, resource: resource}
	op.invoke = h.clock.Add(1)
	v, tok, err := s.Get(ctx, resource)
	op.complete = h.clock.Add(1)
	switch {
	case err == nil:
		op.outcome, op.value, op.token = ltRead, string(v), tok
	case errors.Is(err, fencedlock.ErrNotFound):
		op.outcome = ltNotFound
	default:
		return err
	}
	h.add(op)
	return nil
}

// ltCheckFenced checks a history against the fenced register: each
// resource holds one value and the token that wrote it, a Put is accepted
// exactly when its token is not below the stored one, and every call takes
// effect at one instant between its invocation and its return. It returns
// one line per violation. Values written must be unique.
//
//   - An accepted Put's token is not below that of any Put accepted before
//     it was called (the stored token never falls).
//   - A refused Put reports its own resource and token, and a Current above
//     its token that an accepted Put called before the refusal returned
//     had written.
//   - A Get returns a value and token that one accepted Put W wrote, W
//     called before the Get returned, and no accepted Put that returned
//     before the Get was called either came after W or had a higher token.
//   - A Get finds nothing only if no Put was accepted before it was called.
func ltCheckFenced(ops []ltOp) []string {
	var bad []string
	byResource := map[string][]ltOp{}
	for _, op := range ops {
		byResource[op.resource] = append(byResource[op.resource], op)
	}
	for _, rops := range byResource {
		var accepted []ltOp
		writer := map[string]ltOp{}
		for _, op := range rops {
			if op.kind == ltPutOp && op.outcome == ltAccepted {
				accepted = append(accepted, op)
				writer[op.value] = op
			}
		}
		for _, op := range rops {
			switch {
			case op.kind == ltPutOp && op.outcome == ltAccepted:
				for _, q := range accepted {
					if q.complete < op.invoke && q.token > op.token {
						bad = append(bad, fmt.Sprintf("%v accepted after %v had been", op, q))
					}
				}
			case op.kind == ltPutOp && op.outcome == ltStale:
				if op.stale.Resource != op.resource || op.stale.Token != op.token {
					bad = append(bad, fmt.Sprintf("%v refused with %+v, naming another write", op, op.stale))
				}
				if op.stale.Current <= op.token {
					bad = append(bad, fmt.Sprintf("%v refused though the store holds %d", op, op.stale.Current))
				}
				found := false
				for _, w := range accepted {
					if w.token == op.stale.Current && w.invoke < op.complete {
						found = true
					}
				}
				if !found {
					bad = append(bad, fmt.Sprintf("%v refused with current %d, which no earlier accepted Put wrote", op, op.stale.Current))
				}
			case op.kind == ltGetOp && op.outcome == ltRead:
				w, ok := writer[op.value]
				if !ok {
					bad = append(bad, fmt.Sprintf("%v returned a value no accepted Put wrote", op))
					continue
				}
				if w.token != op.token {
					bad = append(bad, fmt.Sprintf("%v returned the value of %v with another token", op, w))
				}
				if w.invoke > op.complete {
					bad = append(bad, fmt.Sprintf("%v returned the value of %v, called after it", op, w))
				}
				for _, q := range accepted {
					if q.value != w.value && q.complete < op.invoke && (q.token > op.token || w.complete < q.invoke) {
						bad = append(bad, fmt.Sprintf("%v returned the value of %v, overwritten by %v before it", op, w, q))
					}
				}
			case op.kind == ltGetOp && op.outcome == ltNotFound:
				for _, q := range accepted {
					if q.complete < op.invoke {
						bad = append(bad, fmt.Sprintf("%v found nothing after %v", op, q))
						break
					}
				}
			}
		}
	}
	sort.Strings(bad)
	return bad
}

// ltWorkload drives a Store the way fenced holders do: acquire, write a
// few times, sometimes pause (lose the lock, then write late once another
// holder has written with a higher token), release; with reads all along.
// It returns the history and the late writes made after a higher write had
// been accepted.
func ltWorkload(t *testing.T, l *fencedlock.Locker, s fencedlock.Store, tag string) ([]ltOp, []ltOp) {
	t.Helper()
	ctx := ltCtx(t)
	const workers, rounds = 4, 10
	resources := []string{tag + "-a", tag + "-b"}
	h := &ltHistory{}

	var highMu sync.Mutex
	high := map[string]fencedlock.Token{} // highest token of a returned accepted Put; guarded by highMu
	put := func(res string, tok fencedlock.Token, value string) (ltOp, error) {
		op, err := h.put(ctx, s, res, tok, value)
		if err == nil && op.outcome == ltAccepted {
			highMu.Lock()
			if tok > high[res] {
				high[res] = tok
			}
			highMu.Unlock()
		}
		return op, err
	}
	higher := func(res string, tok fencedlock.Token) bool {
		highMu.Lock()
		defer highMu.Unlock()
		return high[res] > tok
	}

	var lateMu sync.Mutex
	var late []ltOp // guarded by lateMu

	stopReader := make(chan struct{})
	var readerDone sync.WaitGroup
	readerDone.Add(1)
	go func() {
		defer readerDone.Done()
		for i := 0; ; i++ {
			select {
			case <-stopReader:
				return
			default:
			}
			if err := h.get(ctx, s, resources[i%len(resources)]); err != nil {
				t.Errorf("reader: %v", err)
				return
			}
			time.Sleep(200 * time.Microsecond)
		}
	}()

	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		w := w
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				res := resources[(w+i)%len(resources)]
				lock, err := l.Acquire(ctx, res, ltLongTTL, fencedlock.WithRetryDelay(time.Millisecond, 4*time.Millisecond))
				if err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
				for p := 0; p <= (w+i)%3; p++ {
					if _, err := put(res, lock.Token(), fmt.Sprintf("w%d-r%d-p%d", w, i, p)); err != nil {
						t.Errorf("worker %d put: %v", w, err)
					}
					if err := h.get(ctx, s, res); err != nil {
						t.Errorf("worker %d get: %v", w, err)
					}
				}
				pause := (w == 0 && i == 0) || (w*7+i)%4 == 1
				if !pause {
					if err := lock.Release(ctx); err != nil {
						t.Errorf("worker %d release: %v", w, err)
					}
					continue
				}
				// The pause: the lock is lost (released here, so the others
				// need not wait out a TTL) while this holder still believes
				// it holds it, and it writes once someone wrote after it.
				if err := lock.Release(ctx); err != nil {
					t.Errorf("worker %d release: %v", w, err)
				}
				deadline := time.Now().Add(300 * time.Millisecond)
				for !higher(res, lock.Token()) && time.Now().Before(deadline) {
					time.Sleep(200 * time.Microsecond)
				}
				waited := higher(res, lock.Token())
				op, err := put(res, lock.Token(), fmt.Sprintf("w%d-r%d-late", w, i))
				if err != nil {
					t.Errorf("worker %d late put: %v", w, err)
				} else if waited {
					lateMu.Lock()
					late = append(late, op)
					lateMu.Unlock()
				}
				if err := lock.Release(ctx); !errors.Is(err, fencedlock.ErrReleased) || errors.Is(err, fencedlock.ErrLockLost) {
					t.Errorf("worker %d: late Release: %v, want ErrReleased and not ErrLockLost", w, err)
				}
				if err := h.get(ctx, s, res); err != nil {
					t.Errorf("worker %d get: %v", w, err)
				}
			}
		}()
	}
	wg.Wait()
	close(stopReader)
	readerDone.Wait()
	for _, res := range resources {
		require.NoError(t, h.get(ctx, s, res))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ops, late
}

func TestFencedHistory(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		l := ltLocker(b)
		for _, s := range ltStores(b) {
			s := s
			t.Run(s.name, func(t *testing.T) {
				ops, late := ltWorkload(t, l, s.store, s.name)
				require.NotEmpty(t, late, "no holder wrote late after a higher token: the history tests nothing")
				for _, op := range late {
					assert.Equal(t, ltStale, op.outcome, "late write %v was accepted", op)
				}
				var puts, stale, reads int
				for _, op := range ops {
					switch op.outcome {
					case ltAccepted:
						puts++
					case ltStale:
						stale++
					case ltRead:
						reads++
					}
				}
				assert.Positive(t, puts)
				assert.Positive(t, reads)
				assert.GreaterOrEqual(t, stale, len(late))
				assert.Empty(t, ltCheckFenced(ops), "the history breaks the fenced register")
			})
		}
	})
}

// ltUnfencedStore keeps the last write whatever its token: the store the
// fencing rule exists to replace.
type ltUnfencedStore struct {
	mu   sync.Mutex
	data map[string]ltOp // guarded by mu
}

func (s *ltUnfencedStore) Put(_ context.Context, resource string, token fencedlock.Token, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.data == nil {
		s.data = map[string]ltOp{}
	}
	s.data[resource] = ltOp{token: token, value: string(value)}
	return nil
}

func (s *ltUnfencedStore) Get(_ context.Context, resource string) ([]byte, fencedlock.Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.data[resource]
	if !ok {
		return nil, 0, fencedlock.ErrNotFound
	}
	return []byte(e.value), e.token, nil
}

// The checker must be able to fail: the same workload on a store without
// the fence breaks the register.
func TestFencedHistoryCheckerCatchesUnfencedStore(t *testing.T) {
	b := redistest.Mini(t)
	ops, late := ltWorkload(t, ltLocker(b), &ltUnfencedStore{}, "unfenced")
	require.NotEmpty(t, late)
	bad := ltCheckFenced(ops)
	require.NotEmpty(t, bad, "an unfenced store passed the fenced-register check")
	lowerAccepted := 0
	for _, v := range bad {
		if strings.Contains(v, "accepted after") {
			lowerAccepted++
		}
	}
	assert.Positive(t, lowerAccepted, "no lower token accepted after a higher one was reported")
	for _, op := range late {
		assert.Equal(t, ltAccepted, op.outcome)
	}
	t.Logf("%d violations, the first: %s", len(bad), bad[0])
}

// Each rule of the checker rejects a history that breaks it, and accepts
// the one that keeps them all.
func TestFencedHistoryCheckerRules(t *testing.T) {
	put := func(tok fencedlock.Token, value string, inv, comp int64) ltOp {
		return ltOp{kind: ltPutOp, resource: "r", token: tok, value: value, outcome: ltAccepted, invoke: inv, complete: comp}
	}
	stale := func(tok, cur fencedlock.Token, value string, inv, comp int64) ltOp {
		return ltOp{kind: ltPutOp, resource: "r", token: tok, value: value, outcome: ltStale,
			stale: fencedlock.StaleTokenError{Resource: "r", Token: tok, Current: cur}, invoke: inv, complete: comp}
	}
	get := func(tok fencedlock.Token, value string, inv, comp int64) ltOp {
		return ltOp{kind: ltGetOp, resource: "r", token: tok, value: value, outcome: ltRead, invoke: inv, complete: comp}
	}
	notFound := func(inv, comp int64) ltOp {
		return ltOp{kind: ltGetOp, resource: "r", outcome: ltNotFound, invoke: inv, complete: comp}
	}
	tests := []struct {
		name string
		ops  []ltOp
		ok   bool
	}{
		{"valid", []ltOp{notFound(1, 2), put(5, "a", 3, 4), put(5, "b", 5, 6), get(5, "b", 7, 8),
			put(7, "c", 9, 12), get(5, "b", 10, 11), stale(5, 7, "d", 13, 14), get(7, "c", 15, 16)}, true},
		{"overlapping calls may take effect in either order", []ltOp{put(5, "a", 1, 6), put(7, "b", 2, 5), get(5, "a", 3, 8)}, true},
		{"lower token accepted after a higher one", []ltOp{put(7, "a", 1, 2), put(5, "b", 3, 4)}, false},
		{"refused though not stale", []ltOp{put(5, "a", 1, 2), stale(6, 5, "b", 3, 4)}, false},
		{"refused with a current never written", []ltOp{put(5, "a", 1, 2), stale(3, 9, "b", 3, 4)}, false},
		{"refusal names another token", []ltOp{put(9, "a", 1, 2),
			{kind: ltPutOp, resource: "r", token: 3, value: "b", outcome: ltStale, stale: fencedlock.StaleTokenError{Resource: "r", Token: 4, Current: 9}, invoke: 3, complete: 4}}, false},
		{"read of a value never written", []ltOp{put(5, "a", 1, 2), get(5, "zzz", 3, 4)}, false},
		{"read with the wrong token", []ltOp{put(5, "a", 1, 2), get(6, "a", 3, 4)}, false},
		{"read of a value written later", []ltOp{get(5, "a", 1, 2), put(5, "a", 3, 4)}, false},
		{"stale read, same token", []ltOp{put(5, "a", 1, 2), put(5, "b", 3, 4), get(5, "a", 5, 6)}, false},
		{"stale read, higher token", []ltOp{put(5, "a", 1, 3), put(7, "b", 2, 4), get(5, "a", 5, 6)}, false},
		{"not found after a write", []ltOp{put(5, "a", 1, 2), notFound(3, 4)}, false},
	}
	for _, tc := range tests {
		bad := ltCheckFenced(tc.ops)
		if tc.ok {
			assert.Empty(t, bad, tc.name)
		} else {
			assert.NotEmpty(t, bad, tc.name)
		}
	}
}
