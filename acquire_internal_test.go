package fencedlock

import (
	"context"
	"testing"
	"time"

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
