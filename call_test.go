package fencedlock_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
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

// What the error of a failed round trip says: Redis unavailable, never a
// lock held by another owner or lost; a ctx's cause when one stopped the
// call; and a cleanup that fails in the background, logged.

// A Redis that refuses connections reads as unavailable, never as a lock
// held by another owner or a lock lost; the error says the connection was
// refused. With a client that sends each command once (MaxRetries -1) it
// does not speak of a grant that no request could carry; with go-redis's
// default retries, a refused connection may follow a copy that ran, and
// it does.
func TestRefusedConnectionIsUnavailable(t *testing.T) {
	redistest.ClientSide(t)
	srv := redistest.Start(t)
	ctx := testCtx(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	l := fencedlock.New(c)
	resending := fencedlock.New(srv.Client(t))
	store := fencedlock.NewRedisStore(c)
	held := mustTryAcquire(t, ctx, l, "held", longTTL)
	srv.Kill()

	check := func(what string, err error) {
		t.Helper()
		requireUnavailable(t, err, what)
		var op *net.OpError
		assert.ErrorAs(t, err, &op, what)
		assert.Contains(t, err.Error(), "refused", what)
		assert.NotContains(t, err.Error(), "the grant the lost reply may have carried", what)
	}
	// A ctx that ends while go-redis still retries its dial: go-redis
	// itself then returns ctx's error, so only ErrUnavailable can be said.
	checkShort := func(what string, err error) {
		t.Helper()
		requireUnavailable(t, err, what)
		assert.ErrorIs(t, err, context.DeadlineExceeded, what)
	}
	_, err := l.TryAcquire(ctx, "r", longTTL)
	check("TryAcquire", err)
	_, err = resending.TryAcquire(ctx, "r", longTTL)
	requireUnavailable(t, err, "TryAcquire, resending")
	assert.Contains(t, err.Error(), "refused", "TryAcquire, resending")
	assert.Contains(t, err.Error(), "the grant the lost reply may have carried", "TryAcquire, resending")
	actx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = l.Acquire(actx, "r", longTTL)
	cancel()
	checkShort("Acquire", err)
	// Acquire rides out the refusals while its ctx lasts, then reports
	// the last of them with ctx's error. (go-redis takes about a second
	// to give up dialing.)
	actx, cancel = context.WithTimeout(ctx, 5*time.Second)
	_, err = l.Acquire(actx, "r", longTTL)
	cancel()
	check("Acquire", err)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "Acquire")
	check("Refresh", held.Refresh(ctx, longTTL))
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
			ctx := testCtx(t)
			c := srv.Client(t)
			l := fencedlock.New(c)
			store := fencedlock.NewRedisStore(c)
			held := mustTryAcquire(t, ctx, l, "held", longTTL)
			require.NoError(t, c.Do(ctx, setup...).Err())
			check := func(what string, err error) {
				t.Helper()
				requireUnavailable(t, err, what)
				var rerr redis.Error
				assert.ErrorAs(t, err, &rerr, what)
				assert.Contains(t, err.Error(), name, what)
			}
			_, err := l.TryAcquire(ctx, "r", longTTL)
			check("TryAcquire", err)
			actx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			_, err = l.Acquire(actx, "r", longTTL)
			cancel()
			check("Acquire", err)
			check("Put", store.Put(ctx, "r", 1, []byte("v")))
			if name == "READONLY" { // OOM lets commands that free or keep memory run
				check("Refresh", held.Refresh(ctx, longTTL))
				check("Release", held.Release(ctx))
			}
			assert.NoError(t, held.Err())
		})
	}
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

// A call stopped by a ctx cancelled with a cause of its own wraps that
// cause and ctx's error, and does not say the backend is unavailable;
// a plain cancel still does.
func TestCallsStoppedByACauseWrapIt(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		stalled := newStalledRedis(t, b, false)
		l, rs := stalled.l, stalled.store
		held := mustTryAcquire(t, ctx, l, "held", longTTL)
		other := mustTryAcquire(t, ctx, newLocker(b), "busy", longTTL)
		defer other.Release(ctx)
		ms := fencedlock.NewMemoryStore()
		cause := fencedlock.ErrLockLost // a term ended, say

		calls := map[string]func(ctx context.Context) error{
			"TryAcquire": func(ctx context.Context) error { return noLock(l.TryAcquire(ctx, "r", longTTL)) },
			"Acquire":    func(ctx context.Context) error { return noLock(l.Acquire(ctx, "r", longTTL)) },
			"Refresh":    func(ctx context.Context) error { return held.Refresh(ctx, longTTL) },
			"TTL":        func(ctx context.Context) error { _, err := held.TTL(ctx); return err },
			"Inspect":    func(ctx context.Context) error { _, err := l.Inspect(ctx, "r"); return err },
			"Put":        func(ctx context.Context) error { return rs.Put(ctx, "r", 5, []byte("v")) },
			"Get":        func(ctx context.Context) error { _, _, err := rs.Get(ctx, "r"); return err },
			"Fence":      func(ctx context.Context) error { return rs.Fence(ctx, "r", 5) },
			"Update": func(ctx context.Context) error {
				return fencedlock.Update(ctx, rs, "r", 5, func(v []byte, _ bool) ([]byte, error) { return v, nil })
			},
			"MemoryStore.Put": func(ctx context.Context) error { return ms.Put(ctx, "r", 5, []byte("v")) },
		}
		waiting := fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix))
		calls["Acquire while waiting"] = func(ctx context.Context) error { return noLock(waiting.Acquire(ctx, "busy", longTTL)) }
		for name, call := range calls {
			name, call := name, call
			t.Run(name, func(t *testing.T) {
				stalled.p.Pause()
				defer stalled.p.Resume()
				cctx, cancel := context.WithCancelCause(ctx)
				if name == "MemoryStore.Put" {
					cancel(cause) // a MemoryStore never waits: cancelled before
				} else {
					time.AfterFunc(50*time.Millisecond, func() { cancel(cause) })
				}
				err := call(cctx)
				require.Error(t, err)
				assert.ErrorIs(t, err, cause, "the cause")
				assert.ErrorIs(t, err, context.Canceled, "ctx's error")
				assert.NotErrorIs(t, err, fencedlock.ErrUnavailable, "Redis did not fail: the caller's ctx ended, for its cause")

				// A plain cancel keeps saying what it says.
				pctx, pcancel := context.WithCancel(ctx)
				if name == "MemoryStore.Put" {
					pcancel()
				} else {
					time.AfterFunc(50*time.Millisecond, pcancel)
				}
				err = call(pctx)
				require.Error(t, err)
				assert.ErrorIs(t, err, context.Canceled)
				assert.NotErrorIs(t, err, cause)
			})
		}
		// The Release of a stalled lock last: it ends nothing on failure.
		stalled.p.Pause()
		cctx, cancel := context.WithCancelCause(ctx)
		time.AfterFunc(50*time.Millisecond, func() { cancel(cause) })
		err := held.Release(cctx)
		stalled.p.Resume()
		assert.ErrorIs(t, err, cause)
		assert.NotErrorIs(t, err, fencedlock.ErrUnavailable)
	})
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
