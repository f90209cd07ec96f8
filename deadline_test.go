package fencedlock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// Deadlines on a Redis that stops answering: every call that takes a ctx
// returns within it, waiters and a second Release too, with the default
// go-redis client as well.

// clientKinds are the go-redis clients the deadline tests run with: the
// default, which does not heed ctx deadlines; one that does; and one made
// with ContextTimeoutEnabled whose timeouts of -2 tell go-redis to set no
// deadline on its connections at all, which then heeds none.
var clientKinds = []struct {
	name string
	opt  func(*redis.Options)
}{
	{"default client", func(*redis.Options) {}},
	{"ContextTimeoutEnabled", func(o *redis.Options) { o.ContextTimeoutEnabled = true }},
	{"ContextTimeoutEnabled, no connection deadlines", func(o *redis.Options) {
		o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout = true, -2, -2
	}},
}

// Every call that takes a ctx returns within its deadline on a Redis that
// stops answering, with the default go-redis client too.
func TestCallsKeepTheirDeadlineOnAStalledRedis(t *testing.T) {
	redistest.ClientSide(t)
	b := redistest.Real(t)
	for _, kind := range clientKinds {
		t.Run(kind.name, func(t *testing.T) {
			ctx := testCtx(t)
			s := newStalledRedisWith(t, b, kind.opt)
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
	redistest.ClientSide(t)
	b := redistest.Real(t)
	for _, kind := range clientKinds {
		for _, n := range []int{1, 3, 12} {
			t.Run(fmt.Sprintf("%s/%d waiters", kind.name, n), func(t *testing.T) {
				ctx := testCtx(t)
				s := newStalledRedisWith(t, b, kind.opt)
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
