package fencedlock_test

import (
	"context"
	"errors"
	"fmt"
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

// Acquire's waiting: the queue in Redis and its order, waiters that give
// up, retry delays and their caps, and calls with a done ctx. What a
// grant holds is in grant_test.go, hand-overs in handover_test.go,
// grants heard by pub/sub in pubsub_test.go.

// Waiters queue in Redis in order of arrival, one per Locker at a time:
// a Locker's other goroutines wait in the process behind its first.
func TestWaitersAreServedInOrder(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		lockers := map[string]*fencedlock.Locker{"A": newLocker(b), "B": newLocker(b), "C": newLocker(b)}
		holder := mustTryAcquire(t, ctx, newLocker(b), "order", longTTL)

		var (
			mu     sync.Mutex
			served []string
			tokens []fencedlock.Token
			wg     sync.WaitGroup
		)
		start := func(name string) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				lock, err := lockers[name[:1]].Acquire(ctx, "order", longTTL, hourRetryDelay)
				if !assert.NoError(t, err, name) {
					return
				}
				mu.Lock()
				served = append(served, name)
				tokens = append(tokens, lock.Token())
				mu.Unlock()
				assert.NoError(t, lock.Release(ctx))
			}()
		}
		// A1, B1 and C1 queue in Redis; A2 waits in A behind A1, and
		// queues in Redis when A1 has the lock, after C1.
		for _, name := range []string{"A1", "B1", "A2", "C1"} {
			queued := queuedCount(t, b, lockers["A"], "order")
			start(name)
			if name == "A2" {
				time.Sleep(50 * time.Millisecond)
				assert.Equal(t, queued, queuedCount(t, b, lockers["A"], "order"), "A's second waiter queued in Redis")
				continue
			}
			waitUntil(t, func() bool { return queuedCount(t, b, lockers["A"], "order") == queued+1 }, name+" to queue")
		}
		require.NoError(t, holder.Release(ctx))
		wg.Wait()
		assert.Equal(t, []string{"A1", "B1", "C1", "A2"}, served)
		for i := 1; i < len(tokens); i++ {
			assert.Greater(t, tokens[i], tokens[i-1], "grant %d", i)
		}
		requireNoGoroutinesLeft(t)
	})
}

// Waiters that give up leave no queue entry, no lock and no goroutine,
// whether they were first in the process, behind another, or in another
// Locker.
func TestCancelledWaitersLeaveNothing(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		a, other := newLocker(b), newLocker(b)
		holder := mustTryAcquire(t, ctx, newLocker(b), "cancel", longTTL)
		wctx, cancel := context.WithCancel(ctx)
		first := acquireAsync(wctx, a, "cancel", longTTL)
		waitUntil(t, func() bool { return queuedCount(t, b, a, "cancel") == 1 }, "the first waiter to queue")
		second := acquireAsync(wctx, a, "cancel", longTTL)
		third := acquireAsync(wctx, other, "cancel", longTTL)
		waitUntil(t, func() bool { return queuedCount(t, b, a, "cancel") == 2 }, "the other Locker's waiter to queue")
		requireStillWaiting(t, second)
		cancel()
		for _, done := range []<-chan acquireResult{first, second, third} {
			r := <-done
			assert.Nil(t, r.lock)
			assert.ErrorIs(t, r.err, fencedlock.ErrNotAcquired)
			assert.ErrorIs(t, r.err, context.Canceled)
		}
		queue, deadlines := queueKeys(a, "cancel")
		assert.False(t, keyExists(t, b, queue), "queue entries left")
		assert.False(t, keyExists(t, b, deadlines), "deadlines left")
		require.NoError(t, holder.Release(ctx))
		assert.False(t, keyExists(t, b, a.LockKey("cancel")), "the release handed the lock to a waiter that gave up")
		requireNoGoroutinesLeft(t)
	})
}

// TryAcquire does not take a free lock promised to a live waiter; a dead
// waiter (its deadline passed) is skipped and dropped.
func TestTryAcquireRespectsTheQueue(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l := newLocker(b)
		queue, deadlines := queueKeys(l, "promised")
		entry := strings.Repeat("ab", 16) + ":30000"
		nowMS := int64(serverMicros(t, b) / 1000)
		require.NoError(t, b.Client.ZAdd(ctx, queue, redis.Z{Score: 1, Member: entry}).Err())
		require.NoError(t, b.Client.HSet(ctx, deadlines, entry, nowMS+60000).Err())
		_, err := l.TryAcquire(ctx, "promised", longTTL)
		require.ErrorIs(t, err, fencedlock.ErrNotAcquired)

		require.NoError(t, b.Client.HSet(ctx, deadlines, entry, nowMS-1).Err())
		lock := mustTryAcquire(t, ctx, l, "promised", longTTL)
		assert.False(t, keyExists(t, b, queue), "the dead waiter was not dropped")
		assert.False(t, keyExists(t, b, deadlines))
		require.NoError(t, lock.Release(ctx))
	})
}

// A waiter whose process stops (here: its connection stalls) keeps its
// place until its TTL: the lock handed to it holds the others back by at
// most about that long, and the token order holds.
func TestStalledWaiterDelaysOthersAtMostItsTTL(t *testing.T) {
	b := redistest.Real(t)
	ctx := testCtx(t)
	p := redistest.NewProxy(t, b.Client.Options().Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { c.Close() })
	stalled, other := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix)), newLocker(b)
	holder := mustTryAcquire(t, ctx, other, "stall", longTTL)

	const stalledTTL = 400 * time.Millisecond
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	first := acquireAsync(sctx, stalled, "stall", stalledTTL)
	waitUntil(t, func() bool {
		return queuedCount(t, b, stalled, "stall") == 1 && grantSubscribers(t, b, stalled, "stall") == 1
	}, "the first waiter to queue")
	second := acquireAsync(ctx, other, "stall", longTTL)
	waitUntil(t, func() bool { return queuedCount(t, b, stalled, "stall") == 2 }, "the second waiter to queue")
	p.Pause()
	defer p.Resume()

	released := time.Now()
	require.NoError(t, holder.Release(ctx))
	v, _ := getKey(t, b, other.LockKey("stall"))
	handed, err := fencedlock.ParseToken(v[strings.LastIndexByte(v, ':')+1:])
	require.NoError(t, err)
	lock := awaitAcquired(t, second)
	took := time.Since(released)
	t.Logf("the second waiter got the lock %v after the release", took)
	assert.GreaterOrEqual(t, took, stalledTTL-50*time.Millisecond, "the lock handed to the stalled waiter was taken early")
	assert.Less(t, took, stalledTTL+time.Second+500*time.Millisecond)
	assert.Greater(t, lock.Token(), handed)
	require.NoError(t, lock.Release(ctx))
	cancel()
	p.Resume()
	// The stalled waiter renewed its place every third of its TTL: one
	// such attempt, held up by the stall, may reach Redis now, find the
	// lock free and grant it.
	if r := <-first; r.err == nil {
		require.NoError(t, r.lock.Release(ctx))
	} else {
		assert.ErrorIs(t, r.err, context.Canceled)
	}
}

// Under steady contention from two Lockers of three goroutines each, every
// goroutine gets the lock, no wait is long, and each grant's token is
// above the one before.
func TestWaitsAreBoundedUnderContention(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		lockers := []*fencedlock.Locker{newLocker(b), newLocker(b)}
		var (
			mu      sync.Mutex
			last    fencedlock.Token
			holding bool
			counts  = map[string]int{}
			maxWait time.Duration
			wg      sync.WaitGroup
		)
		end := time.Now().Add(1500 * time.Millisecond)
		for i, l := range lockers {
			for g := 0; g < 3; g++ {
				name, l := fmt.Sprintf("L%d-g%d", i, g), l
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Now().Before(end) {
						asked := time.Now()
						lock, err := l.Acquire(ctx, "busy", longTTL)
						if !assert.NoError(t, err) {
							return
						}
						waited := time.Since(asked)
						mu.Lock()
						assert.False(t, holding, "two holders at once")
						assert.Greater(t, lock.Token(), last, "token not above the previous grant's")
						holding, last = true, lock.Token()
						counts[name]++
						maxWait = max(maxWait, waited)
						mu.Unlock()
						time.Sleep(time.Millisecond)
						mu.Lock()
						holding = false
						mu.Unlock()
						assert.NoError(t, lock.Release(ctx))
					}
				}()
			}
		}
		wg.Wait()
		t.Logf("acquisitions %v, longest wait %v", counts, maxWait)
		assert.Len(t, counts, 6)
		for name, n := range counts {
			assert.GreaterOrEqual(t, n, 10, "%s starved", name)
		}
		assert.Less(t, maxWait, time.Second, "a wait was not bounded")
		requireNoGoroutinesLeft(t)
	})
}

// A waiter whose attempt gets an error reply (here OOM) leaves the Redis
// queue as it returns the error: the release does not hand the lock to it.
func TestWaiterLeavesTheQueueOnAnErrorReply(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := testCtx(t)
	l := fencedlock.New(c)
	holder, err := l.TryAcquire(ctx, "oom", longTTL)
	require.NoError(t, err)
	queue, _ := queueKeys(l, "oom")
	done := acquireAsync(ctx, l, "oom", longTTL, fencedlock.WithRetryDelay(20*time.Millisecond, 20*time.Millisecond))
	waitUntil(t, func() bool { return c.ZCard(ctx, queue).Val() == 1 }, "the waiter to queue")
	// The waiter's next renewal gets an OOM error reply.
	require.NoError(t, c.ConfigSet(ctx, "maxmemory", "1").Err())
	r := <-done
	require.NoError(t, c.ConfigSet(ctx, "maxmemory", "0").Err())
	require.Error(t, r.err)
	assert.Contains(t, r.err.Error(), "OOM")
	assert.Zero(t, c.ZCard(ctx, queue).Val(), "the waiter that returned is still queued")
	require.NoError(t, holder.Release(ctx))
	assert.Zero(t, c.Exists(ctx, l.LockKey("oom")).Val(), "the release handed the lock to a waiter that had returned")
}

// A waiter with a retry delay longer than its TTL keeps its place in the
// queue: a TryAcquire of another Locker does not take the lock ahead of
// it, and the release hands it the lock at once.
func TestSlowRetryDelayKeepsTheWaitersPlace(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		holders, waiters, others := newLocker(b), newLocker(b), newLocker(b)
		for round := 0; round < 3; round++ {
			holder := mustTryAcquire(t, ctx, holders, "slow", longTTL)
			done := acquireAsync(ctx, waiters, "slow", 500*time.Millisecond, fencedlock.WithRetryDelay(2*time.Second, 5*time.Second))
			waitUntil(t, func() bool { return waiters.WaiterRefused("slow") }, "the waiter to queue")
			time.Sleep(time.Second) // two of its TTLs: its place must last
			released := time.Now()
			require.NoError(t, holder.Release(ctx))
			_, err := others.TryAcquire(ctx, "slow", longTTL)
			require.ErrorIs(t, err, fencedlock.ErrNotAcquired, "round %d: a TryAcquire took the lock ahead of the queued waiter", round)
			w := awaitAcquired(t, done)
			late := time.Since(released)
			assert.Less(t, late, 500*time.Millisecond, "round %d: the hand-over must not wait for the retry delay", round)
			require.NoError(t, w.Release(ctx))
		}
	})
}

// Acquire waits while the lock is held, and no longer than its context.
func TestAcquireWaits(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l := newLocker(b)

		t.Run("until the holder releases", func(t *testing.T) {
			holder := mustTryAcquire(t, ctx, l, "release", longTTL)
			done := acquireAsyncPolling(ctx, l, "release")
			requireStillWaiting(t, done)
			require.NoError(t, holder.Release(ctx))
			next := awaitAcquired(t, done)
			assert.Greater(t, next.Token(), holder.Token())
			require.NoError(t, next.Release(ctx))
		})

		t.Run("until the holder expires", func(t *testing.T) {
			holder := mustTryAcquire(t, ctx, l, "expire", longTTL)
			done := acquireAsyncPolling(ctx, l, "expire")
			requireStillWaiting(t, done)
			b.FastForward(t, longTTL+time.Second)
			next := awaitAcquired(t, done)
			assert.Greater(t, next.Token(), holder.Token())
			assert.ErrorIs(t, holder.Release(ctx), fencedlock.ErrLockLost)
			require.NoError(t, next.Release(ctx))
		})

		t.Run("until the deadline", func(t *testing.T) {
			holder := mustTryAcquire(t, ctx, l, "deadline", longTTL)
			owner, _ := getKey(t, b, l.LockKey("deadline"))
			start := time.Now()
			dctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
			defer cancel()
			lock, err := l.Acquire(dctx, "deadline", longTTL)
			assert.Nil(t, lock)
			assert.ErrorIs(t, err, fencedlock.ErrNotAcquired)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.GreaterOrEqual(t, time.Since(start), 30*time.Millisecond)
			after, _ := getKey(t, b, l.LockKey("deadline"))
			assert.Equal(t, owner, after)
			require.NoError(t, holder.Release(ctx))
		})

		t.Run("until cancelled", func(t *testing.T) {
			holder := mustTryAcquire(t, ctx, l, "cancel", longTTL)
			cctx, cancel := context.WithCancel(ctx)
			timer := time.AfterFunc(30*time.Millisecond, cancel)
			defer timer.Stop()
			lock, err := l.Acquire(cctx, "cancel", longTTL)
			assert.Nil(t, lock)
			assert.ErrorIs(t, err, fencedlock.ErrNotAcquired)
			assert.ErrorIs(t, err, context.Canceled)
			require.NoError(t, holder.Release(ctx))
		})

		t.Run("not at all with a done context", func(t *testing.T) {
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			lock, err := l.Acquire(cctx, "done", longTTL)
			assert.Nil(t, lock)
			assert.ErrorIs(t, err, fencedlock.ErrNotAcquired)
			assert.ErrorIs(t, err, context.Canceled)
			assert.False(t, keyExists(t, b, l.LockKey("done")), "Acquire on a done context left a lock")
		})

		t.Run("TryAcquire does not wait", func(t *testing.T) {
			holder := mustTryAcquire(t, ctx, l, "try", longTTL)
			lock, err := l.TryAcquire(ctx, "try", longTTL)
			assert.Nil(t, lock)
			assert.ErrorIs(t, err, fencedlock.ErrNotAcquired)
			assert.Contains(t, err.Error(), `"try"`)
			require.NoError(t, holder.Release(ctx))
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

// The one test that waits for a real expiry, on real Redis only
// (miniredis never expires keys on its own).
func TestAcquireAfterRealExpiry(t *testing.T) {
	b := redistest.Real(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	l := newLocker(b)
	start := time.Now()
	holder := mustTryAcquire(t, ctx, l, "real-expiry", 50*time.Millisecond)
	next, err := l.Acquire(ctx, "real-expiry", longTTL)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), 45*time.Millisecond, "acquired before the holder's TTL ran out")
	assert.Greater(t, next.Token(), holder.Token())
	assert.ErrorIs(t, holder.Release(ctx), fencedlock.ErrLockLost)
	require.NoError(t, next.Release(ctx))
}

// Huge retry delays do not overflow Acquire's backoff, and every wait is
// capped by the holder's remaining TTL.
func TestAcquireHugeRetryDelays(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l := newLocker(b)
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
					holder := mustTryAcquire(t, ctx, l, res, 100*time.Millisecond)
					actx, cancel := context.WithTimeout(ctx, 3*time.Second)
					defer cancel()
					var lock *fencedlock.Lock
					err := noPanic(func() (err error) {
						lock, err = l.Acquire(actx, res, longTTL, fencedlock.WithRetryDelay(tc.minDelay, tc.maxDelay))
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
				holder := mustTryAcquire(t, ctx, l, res, time.Millisecond)
				owner, _ := getKey(t, b, l.LockKey(res))
				actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
				var lock *fencedlock.Lock
				err := noPanic(func() (err error) {
					lock, err = l.Acquire(actx, res, longTTL, fencedlock.WithRetryDelay(tc.minDelay, tc.maxDelay))
					return err
				})
				assert.Nil(t, lock)
				require.Error(t, err)
				assert.ErrorIs(t, err, fencedlock.ErrNotAcquired)
				assert.ErrorIs(t, err, context.DeadlineExceeded)
				after, _ := getKey(t, b, l.LockKey(res))
				assert.Equal(t, owner, after)
				// Its 1ms lease ran out by the local clock long ago.
				require.ErrorIs(t, holder.Release(ctx), fencedlock.ErrLockLost)
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
	l := newLocker(b)
	start := time.Now()
	holder := mustTryAcquire(t, ctx, l, "capped", 150*time.Millisecond)
	lock, err := l.Acquire(ctx, "capped", longTTL, fencedlock.WithRetryDelay(time.Hour, time.Hour))
	took := time.Since(start)
	require.NoError(t, err, "Acquire waited its full retry delay: did an attempt in the holder's last millisecond (PTTL 0) leave the wait uncapped?")
	assert.Less(t, took, 2*time.Second, "Acquire waited well past the holder's expiry")
	assert.GreaterOrEqual(t, took, 140*time.Millisecond, "acquired before the holder's TTL ran out")
	assert.Greater(t, lock.Token(), holder.Token())
	require.NoError(t, lock.Release(ctx))
}

// In the last millisecond of a lock Redis reports its PTTL as 0 while
// the key still exists. An attempt landing there (likely: Acquire times its
// retry to the holder's expiry) must still cap its wait, not sleep its
// full retry delay. miniredis shows it deterministically: its clock moves
// only by FastForward.
func TestAcquireWaitWhenHolderPTTLIsZero(t *testing.T) {
	b := redistest.Mini(t)
	ctx := testCtx(t)
	l := newLocker(b)
	const res = "pttl-zero"
	holder := mustTryAcquire(t, ctx, l, res, time.Millisecond)
	b.FastForward(t, 999*time.Microsecond)
	pttl, err := b.Client.PTTL(ctx, l.LockKey(res)).Result()
	require.NoError(t, err)
	require.Equal(t, time.Duration(0), pttl, "the holder's lock must be in its last millisecond")

	// Acquire runs on a client that counts its attempts: the first must
	// have found the lock held before the clock moves on.
	c := redis.NewClient(&redis.Options{Addr: b.Miniredis().Addr()})
	t.Cleanup(func() { c.Close() })
	attempts := &acquireAttemptCounter{tokenKey: l.TokenKey(res)}
	c.AddHook(attempts)
	waiter := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix))

	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	done := make(chan acquireResult, 1)
	go func() {
		lock, err := waiter.Acquire(actx, res, longTTL, fencedlock.WithRetryDelay(time.Hour, time.Hour))
		done <- acquireResult{lock, err, time.Now()}
	}()
	pollUntil(time.Second, func() bool { return attempts.count() >= 1 })
	require.GreaterOrEqual(t, attempts.count(), 1, "Acquire made no attempt")
	requireStillWaiting(t, done) // its attempts found the lock held
	b.FastForward(t, time.Millisecond)
	_, err = holder.TTL(ctx)
	require.ErrorIs(t, err, fencedlock.ErrLockLost, "the holder's lock must have expired")
	r := <-done
	require.NoError(t, r.err, "Acquire slept its retry delay (an hour) after finding the holder's PTTL at 0")
	assert.Greater(t, r.lock.Token(), holder.Token())
	require.NoError(t, r.lock.Release(ctx))
}

// acquireAsyncPolling runs Acquire in a goroutine.
func acquireAsyncPolling(ctx context.Context, l *fencedlock.Locker, resource string) <-chan acquireResult {
	return acquireAsync(ctx, l, resource, longTTL, fencedlock.WithRetryDelay(time.Millisecond, 5*time.Millisecond))
}
