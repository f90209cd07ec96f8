package fencedlock

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock/internal/redistest"
)

// A grant message that arrives after the waiter's next attempt was
// refused (it was delayed, and the grant it carries has ended) is not
// taken for a grant: the waiter goes on waiting and gets a fresh one.
func TestLateGrantMessageIsNotTrusted(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, others := New(c), New(c)
	old, err := others.TryAcquire(ctx, "r", time.Minute)
	require.NoError(t, err)
	require.NoError(t, old.Release(ctx))
	holder, err := others.TryAcquire(ctx, "r", time.Minute)
	require.NoError(t, err)

	type result struct {
		lock *Lock
		err  error
	}
	done := make(chan result, 1)
	go func() {
		k, err := l.Acquire(ctx, "r", time.Minute, WithRetryDelay(time.Hour, time.Hour))
		done <- result{k, err}
	}()
	var owner string
	require.Eventually(t, func() bool {
		var ok bool
		owner, ok = l.room.FirstSubscribed("r")
		return ok && l.room.FirstRefused("r")
	}, 5*time.Second, time.Millisecond, "the waiter to be refused")
	// The message of a grant to this waiter made before its refused
	// attempt, delivered now.
	l.room.Deliver("r", owner, uint64(old.Token()), time.Time{})
	select {
	case r := <-done:
		t.Fatalf("Acquire returned on a late grant message: %v, %v", r.lock, r.err)
	case <-time.After(100 * time.Millisecond):
	}
	require.NoError(t, holder.Release(ctx))
	r := <-done
	require.NoError(t, r.err)
	assert.Greater(t, r.lock.Token(), holder.Token())
	require.NoError(t, r.lock.Release(ctx))
}

// A Locker and a RedisStore made with go-redis's default options send
// their round trips through the client's copy that heeds ctx deadlines,
// and give back the client itself; a client with a hook added after New
// gets its commands back, through its hooks.
func TestRoundTripsGoThroughTheHeedingCopy(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	l, s := New(c), NewRedisStore(c)
	assert.Same(t, c, l.Client(), "Client must return the client New was given")
	for name, cs := range map[string]interface {
		Get() (redis.UniversalClient, bool)
	}{"Locker": l.clients, "RedisStore": s.clients} {
		rt, heeds := cs.Get()
		assert.True(t, heeds, "%s: round trips under a deadline would run apart", name)
		assert.NotEqual(t, redis.UniversalClient(c), rt, "%s: no copy", name)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	lock, err := l.TryAcquire(ctx, "r", time.Minute)
	require.NoError(t, err)
	var seen atomic.Int64
	c.AddHook(hookFunc(func(ctx context.Context, cmd redis.Cmder) { seen.Add(1) }))
	rt, heeds := l.clients.Get()
	assert.Equal(t, redis.UniversalClient(c), rt, "a hook added after New: the copy lacks it")
	assert.False(t, heeds)
	require.NoError(t, lock.Release(ctx))
	assert.Positive(t, seen.Load(), "the release did not pass through the client's hook")
}

// hookFunc is a go-redis hook that calls f before each command.
type hookFunc func(ctx context.Context, cmd redis.Cmder)

func (h hookFunc) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h hookFunc) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h(ctx, cmd)
		return next(ctx, cmd)
	}
}
func (h hookFunc) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
