package election_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/election"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// Without pub/sub Observe polls: it delivers the current leader, then each
// new one, within its polling interval (a third of the TTL, here 200ms).
// It finds the subscription refused and does not try again at once.
func TestObserveWithoutPubSub(t *testing.T) {
	elPubSubDenied(t, func(t *testing.T, admin, user *redis.Client) {
		ctx := elCtx(t)
		const ttl = 600 * time.Millisecond
		var dials atomic.Int32
		uo := user.Options()
		observer := redis.NewClient(&redis.Options{
			Addr: uo.Addr, Username: uo.Username, Password: uo.Password,
			Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
				dials.Add(1)
				return (&net.Dialer{}).DialContext(ctx, network, addr)
			},
		})
		defer observer.Close()
		e := election.New(fencedlock.New(observer), "observed", election.WithTTL(ttl))
		start := time.Now()
		ea := election.New(fencedlock.New(admin), "observed", election.WithTTL(ttl))
		first, err := ea.Campaign(ctx, "first")
		require.NoError(t, err)
		octx, cancel := context.WithCancel(ctx)
		defer cancel()
		seen := e.Observe(octx)
		assert.Equal(t, election.Leader{Value: "first", Token: first.Token()}, elNext(t, seen, 5*time.Second))

		prev := first
		for _, v := range []string{"second", "third"} {
			require.NoError(t, prev.Resign(ctx))
			term, err := ea.Campaign(ctx, v)
			require.NoError(t, err)
			elected := time.Now()
			assert.Equal(t, election.Leader{Value: v, Token: term.Token()}, elNext(t, seen, 5*time.Second))
			// A third of the TTL, and time for the read on a loaded
			// machine.
			assert.Less(t, time.Since(elected), ttl, "a new leader observed late")
			prev = term
		}
		require.NoError(t, prev.Resign(ctx))
		// A subscription not confirmed is given up after 2s, and made
		// again 100ms later: a refused one waits for a minute.
		time.Sleep(time.Until(start.Add(3 * time.Second)))
		assert.LessOrEqual(t, dials.Load(), int32(2), "connections: one for reads, one for the subscription")
		cancel()
		_, open := <-seen
		assert.False(t, open, "Observe's channel open after ctx ended")
		elNoGoroutinesLeft(t)
	})
}

// Observe returns at once even when Redis does not answer, and delivers
// the leader once it does.
func TestObserveReturnsAtOnceWhenRedisStalls(t *testing.T) {
	b := redistest.Real(t)
	ctx := elCtx(t)
	p := redistest.NewProxy(t, b.Client.Options().Addr)
	stalled := redis.NewClient(&redis.Options{Addr: p.Addr()})
	defer stalled.Close()
	e := election.New(fencedlock.New(stalled, fencedlock.WithPrefix(b.Prefix)), "stalls")

	p.Pause()
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	seen := e.Observe(octx)
	assert.Less(t, time.Since(start), 100*time.Millisecond, "Observe's return")
	term, err := election.New(elLocker(b), "stalls").Campaign(ctx, "a")
	require.NoError(t, err)
	p.Resume()
	assert.Equal(t, election.Leader{Value: "a", Token: term.Token()}, elNext(t, seen, 10*time.Second))
	require.NoError(t, term.Resign(ctx))
	cancel()
	elNoGoroutinesLeft(t)
}

// A subscription that stalls (its connection stays open but nothing comes
// back) is found out by a ping, and Observe reads the leader and
// subscribes again: a leader elected meanwhile is delivered while the
// stalled connection still hangs. An idle subscription that answers its
// pings is kept.
func TestObserveReconnectsAStalledSubscription(t *testing.T) {
	b := redistest.Real(t)
	ctx := elCtx(t)
	p := redistest.NewProxy(t, b.Client.Options().Addr)
	c := elSplitClient(t, b, p)
	l := fencedlock.New(c.Client, fencedlock.WithPrefix(b.Prefix))
	_, _, channel := elKeys(l, "stalls")
	e := election.New(l, "stalls")
	leaders := election.New(elLocker(b), "stalls")
	first, err := leaders.Campaign(ctx, "first")
	require.NoError(t, err)

	require.NoError(t, c.Ping(ctx).Err()) // a pooled connection, direct
	c.proxied.Store(1)                    // the subscription's, proxied
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	seen := e.Observe(octx)
	assert.Equal(t, election.Leader{Value: "first", Token: first.Token()}, elNext(t, seen, 5*time.Second))
	require.Eventually(t, func() bool {
		n, err := b.Client.PubSubNumSub(ctx, channel).Result()
		return err == nil && n[channel] == 1
	}, 5*time.Second, 5*time.Millisecond, "Observe did not subscribe")
	require.Zero(t, c.proxied.Load(), "Observe's subscription does not go through the proxy")
	// Idle but answering its pings, the subscription is kept.
	before := c.dials.Load()
	time.Sleep(3500 * time.Millisecond)
	assert.Equal(t, before, c.dials.Load(), "connections made while the subscription was idle")
	n, err := b.Client.PubSubNumSub(ctx, channel).Result()
	require.NoError(t, err)
	assert.EqualValues(t, 1, n[channel], "subscriptions after idling")

	p.Pause()
	stalledAt := time.Now()
	require.NoError(t, first.Resign(ctx))
	second, err := leaders.Campaign(ctx, "second")
	require.NoError(t, err)
	// Found out within about 3s (a ping after 1s idle, 2s for its reply).
	assert.Equal(t, election.Leader{Value: "second", Token: second.Token()}, elNext(t, seen, 8*time.Second))
	t.Logf("the leader elected after the subscription stalled was observed after %v", time.Since(stalledAt))

	// Subscribed again, on a direct connection.
	require.Eventually(t, func() bool { return c.directSubscriber(ctx, b.Client) }, 5*time.Second, 5*time.Millisecond, "Observe did not subscribe again")
	require.NoError(t, second.Resign(ctx))
	third, err := leaders.Campaign(ctx, "third")
	require.NoError(t, err)
	assert.Equal(t, election.Leader{Value: "third", Token: third.Token()}, elNext(t, seen, 5*time.Second))
	require.NoError(t, third.Resign(ctx))
	cancel()
	p.Resume()
	elNoGoroutinesLeft(t)
}

// Once subscribed, Observe reads the leader: one elected before the
// subscription was made, whose announcement it missed, is delivered.
func TestObserveReadsTheLeaderOnceSubscribed(t *testing.T) {
	b := redistest.Real(t)
	ctx := elCtx(t)
	p := redistest.NewProxy(t, b.Client.Options().Addr)
	c := elSplitClient(t, b, p)
	e := election.New(fencedlock.New(c.Client, fencedlock.WithPrefix(b.Prefix)), "late")
	require.NoError(t, c.Ping(ctx).Err()) // a pooled connection, direct
	c.proxied.Store(1)                    // the subscription's, proxied

	p.Pause() // the subscription waits
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	seen := e.Observe(octx)
	// Observe reads at once, before it subscribes, and next after a
	// second (a third of the TTL, at most 1s) if not subscribed by then.
	elNothing(t, seen, 200*time.Millisecond, "there is no leader yet")
	term, err := election.New(elLocker(b), "late").Campaign(ctx, "a")
	require.NoError(t, err)
	p.Resume()
	assert.Equal(t, election.Leader{Value: "a", Token: term.Token()}, elNext(t, seen, 5*time.Second))
	require.NoError(t, term.Resign(ctx))
	cancel()
	elNoGoroutinesLeft(t)
}

// Observe delivers the current leader first, then each new leader in
// order of election, and closes when its ctx ends.
func TestObserveInOrder(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := elCtx(t)
		e := election.New(elLocker(b), "observed")
		first, err := e.Campaign(ctx, "first")
		require.NoError(t, err)

		octx, cancel := context.WithCancel(ctx)
		seen := e.Observe(octx)
		got := func() election.Leader {
			t.Helper()
			select {
			case l := <-seen:
				return l
			case <-time.After(5 * time.Second):
				t.Fatal("Observe delivered nothing within 5s")
				return election.Leader{}
			}
		}
		assert.Equal(t, election.Leader{Value: "first", Token: first.Token()}, got(), "the current leader first")

		prev := first
		for _, v := range []string{"second", "third"} {
			require.NoError(t, prev.Resign(ctx))
			term, err := e.Campaign(ctx, v)
			require.NoError(t, err)
			assert.Equal(t, election.Leader{Value: v, Token: term.Token()}, got())
			prev = term
		}
		require.NoError(t, prev.Resign(ctx))
		cancel()
		select {
		case _, open := <-seen:
			assert.False(t, open, "a leader delivered after ctx ended")
		case <-time.After(5 * time.Second):
			t.Fatal("Observe's channel not closed after ctx ended")
		}
		elNoGoroutinesLeft(t)
	})
}

// An Observe with a subscription still hears of a leader whose candidate
// may not publish (its Campaign succeeds with the record alone): it keeps
// reading the leader while subscribed, less often.
func TestObserveHearsOfALeaderThatCouldNotPublish(t *testing.T) {
	elPubSubDenied(t, func(t *testing.T, admin, user *redis.Client) {
		ctx := elCtx(t)
		const ttl = 600 * time.Millisecond
		observer := election.New(fencedlock.New(admin), "mixed", election.WithTTL(ttl))
		octx, cancel := context.WithCancel(ctx)
		defer cancel()
		seen := observer.Observe(octx)
		time.Sleep(500 * time.Millisecond) // subscribed and read: no leader
		candidate := election.New(fencedlock.New(user), "mixed", election.WithTTL(ttl))
		term, err := candidate.Campaign(ctx, "quiet")
		require.NoError(t, err)
		defer term.Resign(context.Background())
		l, err := observer.Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, "quiet", l.Value)
		select {
		case got := <-seen:
			require.Equal(t, term.Token(), got.Token)
		case <-time.After(5 * time.Second):
			t.Fatalf("Observe delivered nothing within 5s (8 TTLs) though Leader reports %+v", l)
		}
	})
}
