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
		l.mu.Lock()
		defer l.mu.Unlock()
		q := l.queues["r"]
		if q == nil || q.sub == nil || len(q.waiters) == 0 || q.waiters[0].floor == 0 {
			return false
		}
		owner = q.waiters[0].lock.owner.(string)
		return true
	}, 5*time.Second, time.Millisecond, "the waiter to be refused")
	// The message of a grant to this waiter made before its refused
	// attempt, delivered now.
	l.handedOn("r", owner, old.Token())
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

// An error reply to the probe other than "unknown command" (here BUSY,
// while another client's script runs) does not settle the kind of pub/sub:
// the next probe asks again.
func TestProbeAsksAgainAfterOtherErrors(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	require.NoError(t, redistest.SetBusyThreshold(ctx, c, 50))
	go srv.Client(t).Eval(ctx, "while true do end", nil)
	l := New(c)
	require.Eventually(t, func() bool {
		return c.Ping(ctx).Err() != nil // BUSY
	}, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, pubsubUnknown, l.probe(ctx), "a BUSY reply settled the kind of pub/sub")
	require.NoError(t, c.Do(ctx, "SCRIPT", "KILL").Err())
	assert.Eventually(t, func() bool { return l.probe(ctx) != 0 }, 5*time.Second, 10*time.Millisecond,
		"the probe could not tell once Redis answered")
}

// The probe finds the kind of pub/sub the server has, as the tests' own
// check does: sharded on Redis 7 and Valkey, classic on Redis 5.0 and
// 6.2 and on miniredis. The waiting tests then count the subscriptions of
// that kind only (redistest.Subscribers), so that both paths run: each on
// the servers that have it.
func TestProbeFindsTheServersPubSub(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := context.Background()
		sharded, err := redistest.ShardedPubSub(ctx, b.Client)
		require.NoError(t, err)
		want, kind := pubsubClassic, "classic"
		if sharded {
			want, kind = pubsubSharded, "sharded"
		}
		t.Logf("%s pub/sub", kind)
		assert.Equal(t, want, New(b.Client).probe(ctx))
	})
}
