package fencedlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// Acquire attempts whose replies are lost, in a client hook or on the
// wire: a grant without its reply is freed, a refusal without its reply
// marks the attempt abandoned, and an attempt that go-redis sends again
// finds its own grant.

// A grant whose reply is lost is freed, and only that grant.
func TestLostReplyLeavesNoLock(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l := newLocker(b)

		t.Run("context cancelled before the call", func(t *testing.T) {
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			lock, err := l.TryAcquire(cctx, "early", longTTL)
			assert.Nil(t, lock)
			require.Error(t, err)
			assert.ErrorIs(t, err, context.Canceled)
			assert.False(t, keyExists(t, b, l.LockKey("early")), "TryAcquire on a cancelled context left a lock")
			grantAndRelease(t, ctx, l, "early")
		})

		newClient := func(t *testing.T, resource string) (*fencedlock.Locker, *loseReplyHook, *redis.Client) {
			t.Helper()
			c := redis.NewClient(&redis.Options{Addr: b.Client.Options().Addr})
			t.Cleanup(func() { c.Close() })
			h := &loseReplyHook{tokenKey: l.TokenKey(resource)}
			c.AddHook(h)
			return fencedlock.New(c, fencedlock.WithPrefix(b.Prefix)), h, c
		}

		for _, viaAcquire := range []bool{false, true} {
			viaAcquire := viaAcquire
			call := func(l *fencedlock.Locker, ctx context.Context, res string) (*fencedlock.Lock, error) {
				if viaAcquire {
					return l.Acquire(ctx, res, longTTL)
				}
				return l.TryAcquire(ctx, res, longTTL)
			}
			name := "TryAcquire"
			if viaAcquire {
				name = "Acquire"
			}

			t.Run(name+" network error after the grant", func(t *testing.T) {
				res := "lost-net-" + name
				fl, h, _ := newClient(t, res)
				before := grantAndRelease(t, ctx, l, res)
				h.arm(nil)
				lock, err := call(fl, ctx, res)
				require.Equal(t, 1, h.lostCount(), "the hook did not intercept the acquire script")
				assert.Nil(t, lock)
				assert.ErrorIs(t, err, errLostReply)
				assert.False(t, keyExists(t, b, l.LockKey(res)), "the grant with the lost reply is still locked")
				// The lost grant used a token: the next one is above it.
				assert.Greater(t, grantAndRelease(t, ctx, l, res), before+1)
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
				waitUntil(t, func() bool { return !keyExists(t, b, l.LockKey(res)) }, "the grant with the lost reply to be released (past ctx, in the background)")
				grantAndRelease(t, ctx, l, res)
			})

			t.Run(name+" context cancelled in flight, cleanup fails too", func(t *testing.T) {
				res := "lost-ctx-cleanup-" + name
				_, h, c := newClient(t, res)
				logs := &syncBuffer{}
				fl := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix), fencedlock.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
				spy := spyCleanup(b, c, l, res)
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
					waitUntil(t, func() bool { return strings.Contains(logs.String(), "lt: cleanup failed") }, "the failed cleanup to be logged")
				} else {
					assert.Contains(t, err.Error(), "lt: cleanup failed")
				}
				calls, tok := spy.grant(t)
				assert.Equal(t, 1, calls)
				// The grant stays until its TTL ends, as the error says.
				v, ok := getKey(t, b, l.LockKey(res))
				require.True(t, ok, "the grant is gone though its cleanup failed")
				assert.True(t, strings.HasSuffix(v, ":"+tok.String()))
				b.FastForward(t, longTTL)
				assert.Greater(t, grantAndRelease(t, ctx, l, res), tok)
			})

			t.Run(name+" lost reply of a refusal keeps the holder's lock", func(t *testing.T) {
				res := "lost-held-" + name
				fl, h, _ := newClient(t, res)
				holder := mustTryAcquire(t, ctx, l, res, longTTL)
				owner, _ := getKey(t, b, l.LockKey(res))
				h.arm(nil)
				lock, err := call(fl, ctx, res)
				require.Equal(t, 1, h.lostCount())
				assert.Nil(t, lock)
				assert.ErrorIs(t, err, errLostReply)
				after, _ := getKey(t, b, l.LockKey(res))
				assert.Equal(t, owner, after, "the cleanup freed the holder's lock")
				// The attempt was not granted: the cleanup marks it
				// abandoned, so that it could not lock the resource later.
				markers := abandonMarkers(t, b, l, res)
				require.Len(t, markers, 1, "the refused attempt must be marked abandoned")
				pttl, err := b.Client.PTTL(ctx, markers[0]).Result()
				require.NoError(t, err)
				assert.Greater(t, pttl, longTTL, "the marker must outlive the lock the attempt asked for")
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
		ctx := testCtx(t)
		l := newLocker(b)
		const res = "longest-ttl"
		holder := mustTryAcquire(t, ctx, l, res, longTTL)
		c := redis.NewClient(&redis.Options{Addr: b.Client.Options().Addr})
		t.Cleanup(func() { c.Close() })
		h := &loseReplyHook{tokenKey: l.TokenKey(res)}
		c.AddHook(h)
		fl := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix))

		h.arm(nil)
		lock, err := fl.TryAcquire(ctx, res, math.MaxInt64)
		require.Equal(t, 1, h.lostCount())
		assert.Nil(t, lock)
		assert.ErrorIs(t, err, errLostReply)
		assert.NotContains(t, strings.ToLower(err.Error()), "releas", "the cleanup failed")
		assert.Len(t, abandonMarkers(t, b, l, res), 1, "the refused attempt must be marked abandoned")
		require.NoError(t, holder.Release(ctx))
	})
}

// Lost replies on the network. The tests above lose a reply in a client
// hook; these cut it off on the wire, through redistest.Proxy, so go-redis
// sees the connection end after Redis ran the command and re-sends it by
// itself (MaxRetries).

// proxiedLocker returns a Locker on b's Redis through a new proxy, with a
// client that retries up to maxRetries times, and the proxy and client.
func proxiedLocker(t *testing.T, b *redistest.Backend, maxRetries int) (*fencedlock.Locker, *redistest.Proxy, *redis.Client) {
	t.Helper()
	p := redistest.NewProxy(t, b.Client.Options().Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: maxRetries})
	t.Cleanup(func() { c.Close() })
	return fencedlock.New(c, fencedlock.WithPrefix(b.Prefix)), p, c
}

// cleanupSpy is a client hook that sees the cleanup of an acquire
// attempt without a reply (the abandon script, which names the attempt's
// marker key and, unlike the acquire script, not the token key). It counts
// the calls (go-redis re-sends a command inside one call, after the hooks)
// and, just before the first, reads the lock key through another client:
// what the attempt left.
type cleanupSpy struct {
	read     func() (string, bool, error) // the lock key
	tokenKey string
	fail     error // when set, every cleanup call fails with it, unsent

	mu         sync.Mutex
	calls      int    // guarded by mu; cleanup calls
	lockBefore string // guarded by mu; the lock key's value before the first
	held       bool   // guarded by mu; whether the lock key existed then
	readErr    error  // guarded by mu
}

// spyCleanup adds an cleanupSpy for the attempts of l on resource to c.
func spyCleanup(b *redistest.Backend, c *redis.Client, l *fencedlock.Locker, resource string) *cleanupSpy {
	s := &cleanupSpy{tokenKey: l.TokenKey(resource), read: func() (string, bool, error) {
		v, err := b.Client.Get(context.Background(), l.LockKey(resource)).Result()
		if errors.Is(err, redis.Nil) {
			return "", false, nil
		}
		return v, err == nil, err
	}}
	c.AddHook(s)
	return s
}

func (s *cleanupSpy) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *cleanupSpy) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (s *cleanupSpy) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
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

func (s *cleanupSpy) isCleanup(cmd redis.Cmder) bool {
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
			channel = channel || strings.HasSuffix(str, ":grants:")
		}
	}
	return marker && channel
}

// grant returns the number of cleanup calls and the token of the grant the
// lock key held before the first, failing t when it held none.
func (s *cleanupSpy) grant(t *testing.T) (int, fencedlock.Token) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	require.NoError(t, s.readErr)
	require.Positive(t, s.calls, "no cleanup was sent")
	require.True(t, s.held, "the lock key was free before the cleanup: the attempt was not granted")
	m := lockValuePattern.FindStringSubmatch(s.lockBefore)
	require.NotNil(t, m, "lock key value %q", s.lockBefore)
	tok, err := fencedlock.ParseToken(m[2])
	require.NoError(t, err)
	return s.calls, tok
}

// Replies of the acquire script (and of its cleanup) cut off on the wire,
// one case per number of drops; each case runs TryAcquire and Acquire.
//
//   - One drop (MaxRetries 3): go-redis re-sends the script; the re-sent run
//     finds the lock held by its own owner and returns the same grant, so
//     the caller gets the lock (not ErrNotAcquired while its own grant
//     blocks everyone for a TTL), and the counter rose once.
//   - Every run of the acquire loses its reply (MaxRetries 1: two runs, two
//     drops): the caller gets an error, not ErrNotAcquired, and the cleanup,
//     which comes after the drops are used up, frees the grant.
//   - The cleanup loses its replies too (MaxRetries 1: two acquire runs and
//     two cleanup runs, four drops). A dropped reply is cut off after Redis
//     ran the command: the cleanup asks again, as after any error that
//     means "not now", finds the grant gone, and reports no failure.
func TestLostRepliesOnTheNetwork(t *testing.T) {
	cases := []struct {
		name       string
		maxRetries int
		// warm is the number of warm connections: each retry runs on one
		// of its own, so that a drop takes the retry's reply, not the
		// handshake of a new connection.
		warm  int
		drops int
		// granted: the caller gets the lock. Otherwise the cleanup freed
		// the grant, and cleanupRetried says that it had to ask again (its
		// replies were lost too).
		granted, cleanupRetried bool
	}{
		{"acquire reply lost once is granted on retry", 3, 1, 1, true, false},
		{"acquire reply lost on every retry leaves no lock", 1, 2, 2, false, false},
		{"cleanup reply lost too is retried", 1, 4, 4, false, true},
	}
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l := newLocker(b)
		for i, tc := range cases {
			tc := tc
			t.Run(tc.name, func(t *testing.T) {
				for _, ac := range acquireCalls {
					ac := ac
					t.Run(ac.name, func(t *testing.T) {
						res := fmt.Sprintf("net-lost-%d-%s", i, ac.name)
						fl, p, c := proxiedLocker(t, b, tc.maxRetries)
						warmProxiedClient(t, ctx, fl, c, p, tc.warm)
						before := grantAndRelease(t, ctx, l, res)
						spy := spyCleanup(b, c, l, res)

						p.DropReplies(tc.drops)
						// Short: without the retry's re-grant Acquire would
						// wait for its own lock to expire.
						actx, cancel := context.WithTimeout(ctx, 3*time.Second)
						defer cancel()
						lock, err := ac.call(actx, fl, res)
						require.Equal(t, tc.drops, p.Dropped(), "the proxy did not drop the %d replies", tc.drops)

						// Acquire rides out the lost replies: an attempt
						// sent again by the waiter returns the grant too.
						if tc.granted || ac.name == "Acquire" {
							require.NoError(t, err, "the re-sent acquire must return the grant its lost reply carried")
							require.NotNil(t, lock)
							assert.Greater(t, lock.Token(), before, "the grant must take a higher token")
							// The counter rose once for the sent and the
							// re-sent run: it holds the granted token (a
							// second grant would have raised it past that).
							counter, _ := getKey(t, b, l.TokenKey(res))
							assert.Equal(t, lock.Token().String(), counter, "the re-sent acquire raised the counter again")

							// The lock key is this Lock's: others are
							// refused, its TTL and Release work.
							_, err = l.TryAcquire(ctx, res, longTTL)
							assert.ErrorIs(t, err, fencedlock.ErrNotAcquired)
							ttl, err := lock.TTL(ctx)
							require.NoError(t, err)
							assert.Greater(t, ttl, longTTL-5*time.Second)
							require.NoError(t, lock.Release(ctx))
							assert.False(t, keyExists(t, b, l.LockKey(res)))
							assert.Greater(t, grantAndRelease(t, ctx, l, res), lock.Token())
							return
						}

						assert.Nil(t, lock)
						require.Error(t, err)
						assert.NotErrorIs(t, err, fencedlock.ErrNotAcquired, "no attempt got a reply: the lock was not found held")
						assert.NotErrorIs(t, err, context.DeadlineExceeded)
						// The cleanup got through, at once (no drops were
						// left for its reply) or when it asked again after
						// its own lost replies: no failed cleanup reported.
						assert.NotContains(t, strings.ToLower(err.Error()), "failed too")
						assert.NotContains(t, strings.ToLower(err.Error()), "background")
						calls, tok := spy.grant(t)
						if tc.cleanupRetried {
							// go-redis re-sends it once within a run; the
							// cleanup asks again when both replies are lost.
							assert.Equal(t, 2, calls, "the cleanup asks again after its replies were lost")
						} else {
							assert.Equal(t, 1, calls, "one cleanup (go-redis re-sends it within the call)")
						}
						assert.Greater(t, tok, before)

						// The attempt was granted, and the cleanup ran in
						// Redis (at most its replies were lost): the grant is
						// gone.
						assert.False(t, keyExists(t, b, l.LockKey(res)), "the grant whose replies were lost is still locked")
						// The first run raised the counter; the re-sent one
						// found its own grant and did not: the counter holds
						// the grant's token.
						counter, _ := getKey(t, b, l.TokenKey(res))
						assert.Equal(t, tok.String(), counter, "the re-sent acquire raised the counter again")
						assert.Greater(t, grantAndRelease(t, ctx, l, res), tok)
					})
				}
			})
		}
	})
}
