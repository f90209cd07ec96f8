package fencedlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
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

// abandonMarkers lists the abandon markers of resource's acquire attempts: the
// keys "<prefix>:{resource}:abandoned:<owner nonce>" left by the cleanup of
// an attempt that got no reply and was not granted.
func abandonMarkers(t *testing.T, b *redistest.Backend, l *fencedlock.Locker, resource string) []string {
	t.Helper()
	pattern := strings.TrimSuffix(l.LockKey(resource), "lock") + "abandoned:*"
	keys, err := b.Client.Keys(context.Background(), pattern).Result()
	require.NoError(t, err)
	sort.Strings(keys)
	return keys
}

// errLostReply stands for a reply lost on the network.
var errLostReply = errors.New("lt: reply lost in transit")

// loseReplyHook lets an acquire script run in Redis and then loses its
// reply, once per arm call: with errLostReply, or by cancelling the
// caller's context and returning its error.
type loseReplyHook struct {
	mu       sync.Mutex
	tokenKey string             // names the resource: see isAcquireScript
	armed    bool               // guarded by mu
	cancel   context.CancelFunc // guarded by mu; nil: return errLostReply
	lost     int                // guarded by mu
}

func (h *loseReplyHook) arm(cancel context.CancelFunc) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed, h.cancel = true, cancel
}

// lostCount returns how many replies the hook has lost.
func (h *loseReplyHook) lostCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lost
}

func (h *loseReplyHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *loseReplyHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *loseReplyHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
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
		err = errLostReply
		if h.cancel != nil {
			h.cancel()
			err = ctx.Err()
		}
		cmd.SetErr(err)
		return err
	}
}

func (h *loseReplyHook) isAcquire(cmd redis.Cmder) bool { return isAcquireScript(cmd, h.tokenKey) }

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

// warmProxiedClient readies c for dropping the replies of commands and nothing else.
// It loads the lock scripts into Redis (a first EVALSHA would get NOSCRIPT
// and be sent again as EVAL, and a dropped NOSCRIPT reply would take a drop
// meant for the script): acquire and release by a grant, and the cleanup
// of an acquire without a reply by an acquire whose reply a client hook
// loses. It leaves n connections in c's pool with their handshakes done: a
// new connection starts with HELLO and CLIENT SETINFO, whose replies would
// take drops meant for the next command. The proxy is paused while n Pings
// dial, so that each Ping holds a connection of its own.
func warmProxiedClient(t *testing.T, ctx context.Context, fl *fencedlock.Locker, c *redis.Client, p *redistest.Proxy, n int) {
	t.Helper()
	grantAndRelease(t, ctx, fl, "warm-up")
	h := &loseReplyHook{tokenKey: fl.TokenKey("warm-up-cleanup")}
	c.AddHook(h)
	h.arm(nil)
	_, err := fl.TryAcquire(ctx, "warm-up-cleanup", longTTL)
	require.ErrorIs(t, err, errLostReply)
	require.Equal(t, 1, h.lostCount())
	require.NotContains(t, strings.ToLower(err.Error()), "releas", "the warm-up cleanup failed")
	p.Pause()
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() { errs <- c.Ping(ctx).Err() }()
	}
	pollUntil(5*time.Second, func() bool { return c.PoolStats().TotalConns >= uint32(n) })
	p.Resume()
	for i := 0; i < n; i++ {
		require.NoError(t, <-errs)
	}
	require.GreaterOrEqual(t, c.PoolStats().IdleConns, uint32(n), "warm connections in the pool")
	require.Zero(t, p.Dropped())
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
			channel = channel || strings.HasSuffix(str, ":grants")
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

// awaitProxyAnswered waits until the server has answered the n requests the
// proxy held (HoldRequests): they have arrived and run.
func awaitProxyAnswered(t *testing.T, p *redistest.Proxy, n int) {
	t.Helper()
	pollUntil(5*time.Second, func() bool { return p.Answered() >= n })
	require.Equal(t, n, p.Answered(), "the held requests were not answered (%d released)", p.Released())
}

// An acquire request held up in the network reaches Redis only after its
// client gave up on it (its context ended): the cleanup found no grant and
// marked the attempt abandoned, and the late request must lock nothing.
func TestAbandonedAttemptArrivingLateIsRefused(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l := newLocker(b)
		for _, ac := range acquireCalls {
			ac := ac
			t.Run(ac.name, func(t *testing.T) {
				res := "late-" + ac.name
				p := redistest.NewProxy(t, b.Client.Options().Addr)
				// The context's deadline bounds each read: the client gives
				// up when it ends, and does not send the request again.
				c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
				t.Cleanup(func() { c.Close() })
				fl := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix))
				warmProxiedClient(t, ctx, fl, c, p, 2)
				before := grantAndRelease(t, ctx, l, res)

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
				awaitCleanupAfterCtxEnd(t, err, func() bool { return len(abandonMarkers(t, b, l, res)) == 1 })
				require.Zero(t, p.Released(), "the held request arrived before the client gave up (after %v)", took)
				assert.Less(t, took, hold)

				// The cleanup found no grant: it marked the attempt.
				assert.False(t, keyExists(t, b, l.LockKey(res)))
				require.Len(t, abandonMarkers(t, b, l, res), 1, "the cleanup left no marker")

				// The request arrives and runs: it must lock nothing.
				awaitProxyAnswered(t, p, 1)
				assert.False(t, keyExists(t, b, l.LockKey(res)), "the request that arrived after its client gave up locked the resource")
				markers := abandonMarkers(t, b, l, res)
				require.Len(t, markers, 1)
				pttl, err := b.Client.PTTL(ctx, markers[0]).Result()
				require.NoError(t, err)
				assert.Greater(t, pttl, longTTL, "the marker must outlive the lock the attempt asked for")
				counter, _ := getKey(t, b, l.TokenKey(res))
				assert.Equal(t, before.String(), counter, "the refused request raised the counter")

				// The resource is free for others.
				assert.Greater(t, grantAndRelease(t, ctx, l, res), before)
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
		ctx := testCtx(t)
		l := newLocker(b)
		const hold = 400 * time.Millisecond
		proxied := func(t *testing.T) (*fencedlock.Locker, *redistest.Proxy) {
			t.Helper()
			p := redistest.NewProxy(t, b.Client.Options().Addr)
			c := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 100 * time.Millisecond, MaxRetries: 1})
			t.Cleanup(func() { c.Close() })
			fl := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix))
			// The second copy goes out on the second warm connection.
			warmProxiedClient(t, ctx, fl, c, p, 2)
			return fl, p
		}

		// The second copy is granted and its reply lost: the cleanup
		// deletes its grant. Then the first copy arrives.
		t.Run("second copy granted, its reply lost", func(t *testing.T) {
			const res = "resent-granted"
			fl, p := proxied(t)
			p.HoldRequests(1, hold)
			p.DropReplies(1)
			lock, err := fl.TryAcquire(ctx, res, longTTL)
			assert.Nil(t, lock)
			require.Error(t, err)
			require.Equal(t, 1, p.Dropped(), "the second copy's reply was not dropped")
			require.Zero(t, p.Released(), "the first copy arrived before TryAcquire returned")
			assert.NotContains(t, strings.ToLower(err.Error()), "releas", "the cleanup failed")
			assert.False(t, keyExists(t, b, l.LockKey(res)), "the cleanup left the second copy's grant")

			awaitProxyAnswered(t, p, 1)
			v, locked := getKey(t, b, l.LockKey(res))
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
			holder := mustTryAcquire(t, ctx, l, res, longTTL)
			p.HoldRequests(1, hold)
			lock, err := fl.TryAcquire(ctx, res, longTTL)
			assert.Nil(t, lock)
			require.ErrorIs(t, err, fencedlock.ErrNotAcquired)
			require.Zero(t, p.Released(), "the first copy arrived before TryAcquire returned")
			require.NoError(t, holder.Release(ctx))

			awaitProxyAnswered(t, p, 1)
			v, locked := getKey(t, b, l.LockKey(res))
			assert.False(t, locked, "the first copy of the acquire, arriving after TryAcquire returned ErrNotAcquired, "+
				"locked the resource (lock key %q, TTL %v): nothing marked the attempt over", v, b.Client.PTTL(ctx, l.LockKey(res)).Val())
		})
	})
}

// deadlineSlack is how long past its ctx deadline a call may return
// (more under the race detector: see raceSlack), beyond the lateness of
// the process's own timers at that deadline (see timerLateness).
const deadlineSlack = 50*time.Millisecond + raceSlack

// timerLateness arms a timer for d from now and returns a function that
// waits for it to fire and says how late it fired. On a loaded machine
// the whole process can be descheduled past a deadline, and no call can
// return before the process runs again: the deadline tests allow for
// that lateness, measured beside the call, and for no more. A call that
// ignores its deadline is late by far more than the timer.
func timerLateness(d time.Duration) (late func() time.Duration) {
	start := time.Now()
	fired := make(chan time.Duration, 1)
	time.AfterFunc(d, func() { fired <- time.Since(start) - d })
	return func() time.Duration { return <-fired }
}

// clientKinds are the go-redis clients the deadline tests run with: the
// default, which does not heed ctx deadlines, and one that does.
var clientKinds = []struct {
	name    string
	timeout bool
}{{"default client", false}, {"ContextTimeoutEnabled", true}}

// returnsWithin runs call with a ctx of deadline d and checks that it returns
// within d plus deadlineSlack with an error wrapping ctx's error.
func returnsWithin(t *testing.T, what string, d time.Duration, call func(ctx context.Context) error) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	late := timerLateness(d)
	start := time.Now()
	err := call(ctx)
	took := time.Since(start)
	lateness := late()
	t.Logf("%s with a %v deadline returned after %v (timers ran %v late): %v", what, d, took.Round(time.Millisecond), lateness.Round(time.Millisecond), err)
	assert.LessOrEqual(t, took, d+deadlineSlack+lateness, "%s returned %v after its deadline", what, took-d)
	if assert.Error(t, err, what) {
		assert.ErrorIs(t, err, context.DeadlineExceeded, what)
	}
	return took
}

// Every call that takes a ctx returns within its deadline on a Redis that
// stops answering, with the default go-redis client too.
func TestCallsKeepTheirDeadlineOnAStalledRedis(t *testing.T) {
	b := redistest.Real(t)
	for _, kind := range clientKinds {
		t.Run(kind.name, func(t *testing.T) {
			ctx := testCtx(t)
			s := newStalledRedis(t, b, kind.timeout)
			held := mustTryAcquire(t, ctx, s.l, "held", longTTL)
			require.NoError(t, held.Refresh(ctx, longTTL))
			_, err := held.TTL(ctx)
			require.NoError(t, err)
			require.NoError(t, s.store.Put(ctx, "value", held.Token(), []byte("v")))
			_, _, err = s.store.Get(ctx, "value")
			require.NoError(t, err)
			require.NoError(t, s.l.Advance(ctx, "advanced", 1))
			require.NoError(t, s.l.AdvanceIssued(ctx, "other-lib-lock", 1))
			s.p.Pause()

			const d = 300 * time.Millisecond
			calls := []struct {
				name string
				call func(ctx context.Context) error
			}{
				{"TryAcquire", func(ctx context.Context) error {
					_, err := s.l.TryAcquire(ctx, "free", longTTL)
					assert.ErrorIs(t, err, fencedlock.ErrUnavailable)
					assert.NotErrorIs(t, err, fencedlock.ErrNotAcquired)
					return err
				}},
				{"Acquire", func(ctx context.Context) error {
					_, err := s.l.Acquire(ctx, "free", longTTL)
					assert.ErrorIs(t, err, fencedlock.ErrUnavailable)
					return err
				}},
				{"Do", func(ctx context.Context) error {
					return s.l.Do(ctx, "free", longTTL, func(context.Context, *fencedlock.Lock) error {
						t.Error("fn ran without a lock")
						return nil
					})
				}},
				{"Refresh", func(ctx context.Context) error {
					err := held.Refresh(ctx, longTTL)
					assert.ErrorIs(t, err, fencedlock.ErrUnavailable)
					assert.NotErrorIs(t, err, fencedlock.ErrLockLost)
					return err
				}},
				{"TTL", func(ctx context.Context) error {
					_, err := held.TTL(ctx)
					assert.ErrorIs(t, err, fencedlock.ErrUnavailable)
					return err
				}},
				{"IssueToken", func(ctx context.Context) error {
					_, err := s.l.IssueToken(ctx, "other-lib-lock", "owner")
					assert.ErrorIs(t, err, fencedlock.ErrUnavailable)
					return err
				}},
				{"Advance", func(ctx context.Context) error { return s.l.Advance(ctx, "advanced", 2) }},
				{"AdvanceIssued", func(ctx context.Context) error { return s.l.AdvanceIssued(ctx, "other-lib-lock", 2) }},
				{"RedisStore.Put", func(ctx context.Context) error {
					err := s.store.Put(ctx, "value", held.Token(), []byte("w"))
					assert.ErrorIs(t, err, fencedlock.ErrUnavailable)
					return err
				}},
				{"RedisStore.Get", func(ctx context.Context) error {
					_, _, err := s.store.Get(ctx, "value")
					assert.ErrorIs(t, err, fencedlock.ErrUnavailable)
					return err
				}},
				// Last: it ends the holder's heartbeat-less Lock only if
				// it can tell.
				{"Release", func(ctx context.Context) error {
					err := held.Release(ctx)
					assert.ErrorIs(t, err, fencedlock.ErrUnavailable)
					assert.NotErrorIs(t, err, fencedlock.ErrLockLost)
					return err
				}},
			}
			for _, c := range calls {
				returnsWithin(t, c.name, d, c.call)
			}
			assert.NoError(t, held.Err(), "a Release that got no answer ended the Lock")
			s.p.Resume()
			// The stalled Release goes on once Redis answers again, and
			// may run first: this one then finds the lock gone, as the
			// documentation of Release says.
			if err := held.Release(ctx); err != nil {
				require.ErrorIs(t, err, fencedlock.ErrLockLost)
			}
			waitUntil(t, func() bool { return !keyExists(t, s.b, s.l.LockKey("held")) }, "the lock released")
			requireNoGoroutinesLeftWithin(t, 10*time.Second)
		})
	}
}

// Waiters keep their deadlines when Redis stalls after refusing them:
// one waiter, and many on many resources of one Locker, none waiting for
// another's subscription.
func TestWaitersKeepTheirDeadlinesOnAStalledRedis(t *testing.T) {
	b := redistest.Real(t)
	for _, kind := range clientKinds {
		for _, n := range []int{1, 3, 12} {
			t.Run(fmt.Sprintf("%s/%d waiters", kind.name, n), func(t *testing.T) {
				ctx := testCtx(t)
				s := newStalledRedis(t, b, kind.timeout)
				const d = 400 * time.Millisecond
				var holders []*fencedlock.Lock
				for i := 0; i < min(n, 6); i++ {
					holders = append(holders, mustTryAcquire(t, ctx, s.direct, fmt.Sprintf("r%d", i), longTTL))
				}
				var wg sync.WaitGroup
				took := make([]time.Duration, n)
				lateness := make([]time.Duration, n)
				errs := make([]error, n)
				for i := 0; i < n; i++ {
					wg.Add(1)
					go func(i int) {
						defer wg.Done()
						wctx, cancel := context.WithTimeout(context.Background(), d)
						defer cancel()
						late := timerLateness(d)
						start := time.Now()
						_, errs[i] = s.l.Acquire(wctx, fmt.Sprintf("r%d", i%6), longTTL)
						took[i] = time.Since(start)
						lateness[i] = late()
					}(i)
				}
				// Stalled once the first waiters have been refused.
				waitUntil(t, func() bool { return s.l.WaiterRefused("r0") }, "the first waiter to be refused")
				s.p.Pause()
				wg.Wait()
				for i := 0; i < n; i++ {
					t.Logf("waiter %d returned after %v (timers ran %v late): %v", i, took[i].Round(time.Millisecond), lateness[i].Round(time.Millisecond), errs[i])
					assert.LessOrEqual(t, took[i], d+deadlineSlack+lateness[i], "waiter %d", i)
					assert.ErrorIs(t, errs[i], context.DeadlineExceeded, "waiter %d", i)
				}
				s.p.Resume()
				for _, h := range holders {
					require.NoError(t, h.Release(ctx))
				}
				requireNoGoroutinesLeftWithin(t, 10*time.Second)
			})
		}
	}
}

// A second Release waits for a first one still running no longer than its
// own ctx.
func TestSecondReleaseKeepsItsDeadline(t *testing.T) {
	b := redistest.Real(t)
	ctx := testCtx(t)
	s := newStalledRedis(t, b, false)
	lock := mustTryAcquire(t, ctx, s.l, "twice", longTTL)
	log := &commandLog{}
	s.c.AddHook(log)
	s.p.Pause()
	first := make(chan error, 1)
	go func() { first <- lock.Release(context.Background()) }() // bounded by go-redis's timeouts alone
	waitUntil(t, func() bool { return len(log.since(time.Time{})) > 0 }, "the first Release to be sent")
	returnsWithin(t, "second Release", 200*time.Millisecond, func(ctx context.Context) error {
		err := lock.Release(ctx)
		assert.ErrorIs(t, err, fencedlock.ErrUnavailable)
		return err
	})
	s.p.Resume()
	<-first
	requireNoGoroutinesLeftWithin(t, 10*time.Second)
}

// Waiters of one Locker on a Redis that has not answered any of them yet
// report it unavailable, not the lock as held: the first waiter, and the
// ones queued behind it in the process.
func TestWaitersBeforeAnyAnswerAreUnavailable(t *testing.T) {
	b := redistest.Real(t)
	s := newStalledRedis(t, b, false)
	grantAndRelease(t, testCtx(t), s.l, "warm-up")
	s.p.Pause()
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			returnsWithin(t, fmt.Sprintf("waiter %d", i), 300*time.Millisecond, func(ctx context.Context) error {
				_, err := s.l.Acquire(ctx, "stalled", longTTL)
				assert.ErrorIs(t, err, fencedlock.ErrUnavailable, "waiter %d", i)
				assert.NotErrorIs(t, err, fencedlock.ErrNotAcquired, "waiter %d", i)
				return err
			})
		}(i)
	}
	wg.Wait()
	s.p.Resume()
	requireNoGoroutinesLeftWithin(t, 10*time.Second)
}

// Do returns within its ctx even when the release after fn gets no
// answer: the release goes on in the background.
func TestDoKeepsItsDeadlineWhenTheReleaseStalls(t *testing.T) {
	b := redistest.Real(t)
	s := newStalledRedis(t, b, false)
	returnsWithin(t, "Do", 400*time.Millisecond, func(ctx context.Context) error {
		return s.l.Do(ctx, "do", longTTL, func(fctx context.Context, lock *fencedlock.Lock) error {
			s.p.Pause()
			<-fctx.Done()
			return fctx.Err()
		})
	})
	s.p.Resume()
	requireNoGoroutinesLeftWithin(t, 10*time.Second)
}

// A cleanup that fails after its call returned is logged, with the
// resource and the error: it is never lost silently.
func TestBackgroundCleanupFailureIsLogged(t *testing.T) {
	b := redistest.Real(t)
	p := redistest.NewProxy(t, b.Client.Options().Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() {
		p.Resume()
		c.Close()
	})
	logs := &syncBuffer{}
	l := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix), fencedlock.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	grantAndRelease(t, testCtx(t), l, "warm-up")
	p.Pause()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err := l.TryAcquire(ctx, "logged", longTTL)
	cancel()
	require.ErrorIs(t, err, fencedlock.ErrUnavailable)
	assert.Contains(t, err.Error(), "goes on in the background")
	// The cleanup has a second of its own; Redis stays stalled.
	waitUntil(t, func() bool { return strings.Contains(logs.String(), "background cleanup failed") }, "the failed cleanup to be logged")
	out := logs.String()
	assert.Contains(t, out, "level=WARN")
	assert.Contains(t, out, "resource=logged")
	assert.Contains(t, out, "err=")
	p.Resume()
	requireNoGoroutinesLeftWithin(t, 10*time.Second)
}
