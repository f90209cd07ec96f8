package fencedlock_test

import (
	"context"
	"fmt"
	"log/slog"
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

// ltDeadlineSlack is how long past its ctx deadline a call may return
// (more under the race detector: see ltRaceSlack).
const ltDeadlineSlack = 50*time.Millisecond + ltRaceSlack

// ltClientKinds are the go-redis clients the deadline tests run with: the
// default, which does not heed ctx deadlines, and one that does.
var ltClientKinds = []struct {
	name    string
	timeout bool
}{{"default client", false}, {"ContextTimeoutEnabled", true}}

// ltStalled is a Locker and a RedisStore whose client reaches b's Redis
// through a proxy that the test stalls, and a Locker that reaches it
// directly.
type ltStalled struct {
	b      *redistest.Backend
	p      *redistest.Proxy
	l      *fencedlock.Locker
	store  *fencedlock.RedisStore
	direct *fencedlock.Locker
}

func ltNewStalled(t *testing.T, b *redistest.Backend, ctxTimeout bool) *ltStalled {
	t.Helper()
	p := redistest.NewProxy(t, b.Client.Options().Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: ctxTimeout})
	t.Cleanup(func() {
		p.Resume()
		c.Close()
	})
	return &ltStalled{
		b: b, p: p,
		l:      fencedlock.New(c, fencedlock.WithPrefix(b.Prefix)),
		store:  fencedlock.NewRedisStore(c, fencedlock.WithStorePrefix(b.Prefix)),
		direct: ltLocker(b),
	}
}

// ltWithin runs call with a ctx of deadline d and checks that it returns
// within d plus ltDeadlineSlack with an error wrapping ctx's error.
func ltWithin(t *testing.T, what string, d time.Duration, call func(ctx context.Context) error) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	err := call(ctx)
	took := time.Since(start)
	t.Logf("%s with a %v deadline returned after %v: %v", what, d, took.Round(time.Millisecond), err)
	assert.LessOrEqual(t, took, d+ltDeadlineSlack, "%s returned %v after its deadline", what, took-d)
	if assert.Error(t, err, what) {
		assert.ErrorIs(t, err, context.DeadlineExceeded, what)
	}
	return took
}

// Every call that takes a ctx returns within its deadline on a Redis that
// stops answering, with the default go-redis client too.
func TestCallsKeepTheirDeadlineOnAStalledRedis(t *testing.T) {
	b := redistest.Real(t)
	for _, kind := range ltClientKinds {
		t.Run(kind.name, func(t *testing.T) {
			ctx := ltCtx(t)
			s := ltNewStalled(t, b, kind.timeout)
			held := ltTryAcquire(t, ctx, s.l, "held", ltLongTTL)
			require.NoError(t, held.Refresh(ctx, ltLongTTL))
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
					_, err := s.l.TryAcquire(ctx, "free", ltLongTTL)
					assert.ErrorIs(t, err, fencedlock.ErrUnavailable)
					assert.NotErrorIs(t, err, fencedlock.ErrNotAcquired)
					return err
				}},
				{"Acquire", func(ctx context.Context) error {
					_, err := s.l.Acquire(ctx, "free", ltLongTTL)
					assert.ErrorIs(t, err, fencedlock.ErrUnavailable)
					return err
				}},
				{"Do", func(ctx context.Context) error {
					return s.l.Do(ctx, "free", ltLongTTL, func(context.Context, *fencedlock.Lock) error {
						t.Error("fn ran without a lock")
						return nil
					})
				}},
				{"Refresh", func(ctx context.Context) error {
					err := held.Refresh(ctx, ltLongTTL)
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
				ltWithin(t, c.name, d, c.call)
			}
			assert.NoError(t, held.Err(), "a Release that got no answer ended the Lock")
			s.p.Resume()
			// The stalled Release goes on once Redis answers again, and
			// may run first: this one then finds the lock gone, as the
			// documentation of Release says.
			if err := held.Release(ctx); err != nil {
				require.ErrorIs(t, err, fencedlock.ErrLockLost)
			}
			ltEventually(t, func() bool { return !ltExists(t, s.b, s.l.LockKey("held")) }, "the lock released")
			ltNoGoroutinesLeftWithin(t, 10*time.Second)
		})
	}
}

// Waiters keep their deadlines when Redis stalls after refusing them:
// one waiter, and many on many resources of one Locker, none waiting for
// another's subscription.
func TestWaitersKeepTheirDeadlinesOnAStalledRedis(t *testing.T) {
	b := redistest.Real(t)
	for _, kind := range ltClientKinds {
		for _, n := range []int{1, 3, 12} {
			t.Run(fmt.Sprintf("%s/%d waiters", kind.name, n), func(t *testing.T) {
				ctx := ltCtx(t)
				s := ltNewStalled(t, b, kind.timeout)
				const d = 400 * time.Millisecond
				var holders []*fencedlock.Lock
				for i := 0; i < min(n, 6); i++ {
					holders = append(holders, ltTryAcquire(t, ctx, s.direct, fmt.Sprintf("r%d", i), ltLongTTL))
				}
				var wg sync.WaitGroup
				took := make([]time.Duration, n)
				errs := make([]error, n)
				for i := 0; i < n; i++ {
					wg.Add(1)
					go func(i int) {
						defer wg.Done()
						wctx, cancel := context.WithTimeout(context.Background(), d)
						defer cancel()
						start := time.Now()
						_, errs[i] = s.l.Acquire(wctx, fmt.Sprintf("r%d", i%6), ltLongTTL)
						took[i] = time.Since(start)
					}(i)
				}
				// Stalled once the first waiters have been refused.
				ltEventually(t, func() bool { return s.l.WaiterRefused("r0") }, "the first waiter to be refused")
				s.p.Pause()
				wg.Wait()
				for i := 0; i < n; i++ {
					t.Logf("waiter %d returned after %v: %v", i, took[i].Round(time.Millisecond), errs[i])
					assert.LessOrEqual(t, took[i], d+ltDeadlineSlack, "waiter %d", i)
					assert.ErrorIs(t, errs[i], context.DeadlineExceeded, "waiter %d", i)
				}
				s.p.Resume()
				for _, h := range holders {
					require.NoError(t, h.Release(ctx))
				}
				ltNoGoroutinesLeftWithin(t, 10*time.Second)
			})
		}
	}
}

// ltNoGoroutinesLeftWithin is ltNoGoroutinesLeft for calls whose work
// goes on in the background after they returned: it waits up to d.
func ltNoGoroutinesLeftWithin(t *testing.T, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for len(ltOurGoroutines()) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	ltNoGoroutinesLeft(t)
}

// A second Release waits for a first one still running no longer than its
// own ctx.
func TestSecondReleaseKeepsItsDeadline(t *testing.T) {
	b := redistest.Real(t)
	ctx := ltCtx(t)
	s := ltNewStalled(t, b, false)
	lock := ltTryAcquire(t, ctx, s.l, "twice", ltLongTTL)
	s.p.Pause()
	first := make(chan error, 1)
	go func() { first <- lock.Release(context.Background()) }() // bounded by go-redis's timeouts alone
	time.Sleep(20 * time.Millisecond)
	ltWithin(t, "second Release", 200*time.Millisecond, func(ctx context.Context) error {
		err := lock.Release(ctx)
		assert.ErrorIs(t, err, fencedlock.ErrUnavailable)
		return err
	})
	s.p.Resume()
	<-first
	ltNoGoroutinesLeftWithin(t, 10*time.Second)
}

// Waiters of one Locker on a Redis that has not answered any of them yet
// report it unavailable, not the lock as held: the first waiter, and the
// ones queued behind it in the process.
func TestWaitersBeforeAnyAnswerAreUnavailable(t *testing.T) {
	b := redistest.Real(t)
	s := ltNewStalled(t, b, false)
	ltGrant(t, ltCtx(t), s.l, "warm-up")
	s.p.Pause()
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ltWithin(t, fmt.Sprintf("waiter %d", i), 300*time.Millisecond, func(ctx context.Context) error {
				_, err := s.l.Acquire(ctx, "stalled", ltLongTTL)
				assert.ErrorIs(t, err, fencedlock.ErrUnavailable, "waiter %d", i)
				assert.NotErrorIs(t, err, fencedlock.ErrNotAcquired, "waiter %d", i)
				return err
			})
		}(i)
	}
	wg.Wait()
	s.p.Resume()
	ltNoGoroutinesLeftWithin(t, 10*time.Second)
}

// Do returns within its ctx even when the release after fn gets no
// answer: the release goes on in the background.
func TestDoKeepsItsDeadlineWhenTheReleaseStalls(t *testing.T) {
	b := redistest.Real(t)
	s := ltNewStalled(t, b, false)
	ltWithin(t, "Do", 400*time.Millisecond, func(ctx context.Context) error {
		return s.l.Do(ctx, "do", ltLongTTL, func(fctx context.Context, lock *fencedlock.Lock) error {
			s.p.Pause()
			<-fctx.Done()
			return fctx.Err()
		})
	})
	s.p.Resume()
	ltNoGoroutinesLeftWithin(t, 10*time.Second)
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
	logs := &ltSyncBuffer{}
	l := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix), fencedlock.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	ltGrant(t, ltCtx(t), l, "warm-up")
	p.Pause()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err := l.TryAcquire(ctx, "logged", ltLongTTL)
	cancel()
	require.ErrorIs(t, err, fencedlock.ErrUnavailable)
	assert.Contains(t, err.Error(), "goes on in the background")
	// The cleanup has a second of its own; Redis stays stalled.
	ltEventually(t, func() bool { return strings.Contains(logs.String(), "background cleanup failed") }, "the failed cleanup to be logged")
	out := logs.String()
	assert.Contains(t, out, "level=WARN")
	assert.Contains(t, out, "resource=logged")
	assert.Contains(t, out, "err=")
	p.Resume()
	ltNoGoroutinesLeftWithin(t, 10*time.Second)
}
