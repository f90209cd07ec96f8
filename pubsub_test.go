package fencedlock_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// Grants heard by pub/sub: subscriptions that break, stall or connect
// slowly, sharded pub/sub on a cluster, and waiting when pub/sub is
// refused.

// restrictedClient creates the ACL user name with rules on srv and returns a
// client logged in as that user, closed when t ends. A server without
// ACL (Redis before 6) skips t: it has no user to refuse anything.
func restrictedClient(t *testing.T, srv *redistest.Server, name string, rules ...string) *redis.Client {
	t.Helper()
	ctx := testCtx(t)
	admin := srv.Client(t)
	if err := admin.Do(ctx, "ACL", "WHOAMI").Err(); err != nil {
		require.Contains(t, strings.ToLower(err.Error()), "unknown", "ACL WHOAMI")
		t.Skipf("this redis-server has no ACL (%v): nothing to refuse", err)
	}
	args := []any{"ACL", "SETUSER", name, "reset", "on", ">pw"}
	for _, r := range rules {
		args = append(args, r)
	}
	require.NoError(t, admin.Do(ctx, args...).Err())
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: name, Password: "pw"})
	t.Cleanup(func() { c.Close() })
	require.NoError(t, c.Ping(ctx).Err())
	return c
}

// warnings returns the records at Warn or above in a text log.
func warnings(log string) []string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			out = append(out, line)
		}
	}
	return out
}

// loggedLocker returns a Locker on c that logs into the returned buffer.
func loggedLocker(c redis.UniversalClient) (*fencedlock.Locker, *syncBuffer) {
	logs := &syncBuffer{}
	return fencedlock.New(c, fencedlock.WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))), logs
}

// A user with every command but no channel (Redis 7's default for a new
// user): a Release that hands the lock to a waiter of another process
// writes the grant, and then Redis refuses its PUBLISH. The Release
// stands: it returns nil, the Lock ends as released, and the waiter gets
// the lock (by its timer, as its subscription is refused too). The
// refusal is logged once per Locker, naming the ACL section.
func TestReleaseStandsWhenItsPublishIsRefused(t *testing.T) {
	srv := redistest.Start(t)
	ctx := testCtx(t)
	rules := []string{"resetchannels", "+@all", "~*"}
	holders, holderLog := loggedLocker(restrictedClient(t, srv, "nochannels", rules...))
	waiters, waiterLog := loggedLocker(restrictedClient(t, srv, "nochannels", rules...))
	for round := 0; round < 3; round++ {
		holder := mustTryAcquire(t, ctx, holders, "r", longTTL)
		done := acquireAsync(ctx, waiters, "r", longTTL, fencedlock.WithRetryDelay(2*time.Millisecond, 50*time.Millisecond))
		waitUntil(t, func() bool { return waiters.WaiterRefused("r") }, "the waiter to queue")
		require.NoError(t, holder.Release(ctx), "round %d: the Release handed the lock over: it must not fail", round)
		require.ErrorIs(t, holder.Err(), fencedlock.ErrReleased, "round %d", round)
		w := awaitAcquired(t, done)
		assert.Greater(t, w.Token(), holder.Token(), "round %d", round)
		require.NoError(t, w.Release(ctx))
	}
	for name, log := range map[string]string{"holder": holderLog.String(), "waiter": waiterLog.String()} {
		warns := warnings(log)
		require.Len(t, warns, 1, "%s: one Warn per Locker, whatever the rounds:\n%s", name, log)
		assert.Contains(t, warns[0], "docs/redis.md#acl", name)
	}
	assert.Contains(t, warnings(holderLog.String())[0], "PUBLISH")
}

// With pub/sub refused to the user (its channels, or its commands), a
// waiter still gets the lock, by its fallback timer, and the Locker says
// so once at Warn. How late the hand-over comes is the renewal of the
// waiter's place: a third of its TTL, at most the retry delay's maximum.
func TestWaitsWorkWithoutPubSub(t *testing.T) {
	for name, rules := range map[string][]string{
		"no channels":        {"resetchannels", "+@all", "~*"},
		"no pubsub commands": {"allchannels", "+@all", "-@pubsub", "~*"},
	} {
		rules := rules
		t.Run(name, func(t *testing.T) {
			srv := redistest.Start(t)
			ctx := testCtx(t)
			holders := fencedlock.New(srv.Client(t))
			waiters, logs := loggedLocker(restrictedClient(t, srv, "nopubsub", rules...))
			const ttl = 900 * time.Millisecond // renewed every 300 ms
			var late []time.Duration
			for round := 0; round < 3; round++ {
				holder := mustTryAcquire(t, ctx, holders, "r", longTTL)
				done := acquireAsync(ctx, waiters, "r", ttl)
				waitUntil(t, func() bool { return waiters.WaiterRefused("r") }, "the waiter to queue")
				released := time.Now()
				require.NoError(t, holder.Release(ctx))
				w := awaitAcquired(t, done)
				late = append(late, time.Since(released))
				require.NoError(t, w.Release(ctx))
			}
			t.Logf("%s: hand-overs by timer after %v", name, late)
			for _, d := range late {
				assert.Less(t, d, 2*time.Second, "the waiter's timer must find the released lock")
			}
			warns := warnings(logs.String())
			require.Len(t, warns, 1, "one Warn per Locker:\n%s", logs.String())
			assert.Contains(t, warns[0], "docs/redis.md#acl")
			requireNoGoroutinesLeftWithin(t, 5*time.Second)
		})
	}
}

// A subscription connection that stalls without closing is noticed by
// its unanswered PING and replaced: a hand-over reaches the waiter by
// pub/sub again within a few seconds, though its fallback timer is an
// hour away.
func TestStalledSubscriptionIsReplaced(t *testing.T) {
	srv := redistest.Start(t)
	ctx := testCtx(t)
	p := redistest.NewProxy(t, srv.Addr)
	pc := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { pc.Close() })
	holders, waiters := fencedlock.New(srv.Client(t)), fencedlock.New(pc)
	c := srv.Client(t)

	holder := mustTryAcquire(t, ctx, holders, "r", longTTL)
	done := acquireAsync(ctx, waiters, "r", longTTL, hourRetryDelay)
	waitUntil(t, func() bool { return waiters.WaiterRefused("r") && channelSubscribers(t, c, waiters, "r") == 1 }, "the waiter to subscribe")
	p.StallSubscriptions()
	stalled := time.Now()
	// The replacement subscribes on a new connection; the stalled one
	// keeps its subscription in Redis.
	// A second without a message, then two for the PING's answer: the
	// replacement comes about three seconds after the stall.
	require.True(t, pollUntil(15*time.Second, func() bool { return channelSubscribers(t, c, waiters, "r") == 2 }), "the stalled subscription was not replaced")
	replaced := time.Since(stalled)
	released := time.Now()
	require.NoError(t, holder.Release(ctx))
	w := awaitAcquired(t, done)
	handOver := time.Since(released)
	t.Logf("stalled subscription replaced after %v; hand-over %v later", replaced.Round(time.Millisecond), handOver.Round(time.Microsecond))
	assert.Less(t, replaced, 5*time.Second)
	assert.Less(t, handOver, 500*time.Millisecond, "the hand-over must come by pub/sub, not by the hour-long timer")
	require.NoError(t, w.Release(ctx))
	p.ResumeSubscriptions()
}

// A release published while the waiter's subscription was down is not
// missed: on reconnecting, the waiter asks again and finds its grant.
func TestWaiterFindsGrantPublishedWhileDisconnected(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		p := redistest.NewProxy(t, b.Client.Options().Addr)
		c := redis.NewClient(&redis.Options{Addr: p.Addr()})
		t.Cleanup(func() { c.Close() })
		l := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix))
		holder := mustTryAcquire(t, ctx, newLocker(b), "reconnect", longTTL)
		done := acquireAsync(ctx, l, "reconnect", longTTL, hourRetryDelay)
		awaitQueued(t, b, l, "reconnect")
		p.Pause()
		p.CloseAll()
		require.NoError(t, holder.Release(ctx))
		p.Resume()
		lock := awaitAcquired(t, done)
		v, _ := getKey(t, b, l.LockKey("reconnect"))
		assert.True(t, strings.HasSuffix(v, ":"+lock.Token().String()))
		assert.Greater(t, lock.Token(), holder.Token())
		require.NoError(t, lock.Release(ctx))
		requireNoGoroutinesLeft(t)
	})
}

// On Redis Cluster a waiter is woken through sharded pub/sub (classic
// pub/sub on servers without it).
func TestClusterWaiterWakesOnRelease(t *testing.T) {
	srv := redistest.StartCluster(t)
	ctx := testCtx(t)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr}})
	t.Cleanup(func() { client.Close() })
	holders, waiters := fencedlock.New(client), fencedlock.New(client)
	for _, resource := range []string{"a", "b", "c"} {
		holder, err := holders.TryAcquire(ctx, resource, longTTL)
		require.NoError(t, err)
		done := acquireAsync(ctx, waiters, resource, longTTL, hourRetryDelay)
		waitUntil(t, func() bool { return channelSubscribers(t, client, waiters, resource) == 1 },
			"the waiter to subscribe to "+grantsChannel(waiters, resource))
		released := time.Now()
		require.NoError(t, holder.Release(ctx))
		lock := awaitAcquired(t, done)
		assert.Less(t, time.Since(released), 100*time.Millisecond)
		assert.Greater(t, lock.Token(), holder.Token())
		require.NoError(t, lock.Release(ctx))
	}
	requireNoGoroutinesLeft(t)
}

// A subscription that takes long to connect holds up no other call of
// the Locker: subscribe and unsubscribe commands are not sent under the
// Locker's lock.
func TestSlowSubscriptionDoesNotStallTheLocker(t *testing.T) {
	b := redistest.Real(t)
	ctx := testCtx(t)
	var slow atomic.Bool
	var slowDials atomic.Int32
	c := redis.NewClient(&redis.Options{
		Addr: b.Client.Options().Addr,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if slow.Load() {
				slowDials.Add(1)
				time.Sleep(2 * time.Second) // a connect that takes long
			}
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	})
	t.Cleanup(func() { c.Close() })
	l := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix))
	holders := newLocker(b)
	// Connections for the commands, made before connecting gets slow.
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); c.Ping(ctx) }()
	}
	wg.Wait()
	for _, r := range []string{"r1", "r2"} {
		h := mustTryAcquire(t, ctx, holders, r, longTTL)
		defer h.Release(ctx)
	}
	slow.Store(true)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	first := acquireAsync(wctx, l, "r1", longTTL)
	waitUntil(t, func() bool { return l.WaiterRefused("r1") && slowDials.Load() >= 1 }, "r1's subscription to connect")
	second := acquireAsync(wctx, l, "r2", longTTL)
	// r2's subscription waits for its turn behind r1's.
	waitUntil(t, func() bool { return l.WaiterRefused("r2") }, "r2's waiter to be refused and subscribe")
	start := time.Now()
	free, err := l.Acquire(ctx, "free", longTTL)
	require.NoError(t, err)
	require.NoError(t, free.Release(ctx))
	assert.Less(t, time.Since(start), 500*time.Millisecond, "a free resource waited for another resource's subscription")
	cancel()
	<-first
	<-second
	// The subscriber's goroutine finishes its slow connect after the
	// waiters have gone, then closes the connection.
	requireNoGoroutinesLeftWithin(t, 5*time.Second)
}

// On a cluster of three masters, a waiter's sharded subscription that
// breaks is made again on the node serving its slot, and the waiter
// hears the grants published after that. (On servers without sharded
// pub/sub the subscription is classic, and a message published on any
// node reaches it.)
func TestClusterWaitersHearGrantsAfterReconnect(t *testing.T) {
	servers := redistest.StartClusterN(t, 3)
	ctx := testCtx(t)
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr
	}
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { client.Close() })
	holders, waiters := fencedlock.New(client), fencedlock.New(client)
	for i := 0; i < 6; i++ {
		resource := fmt.Sprintf("res-%d", i)
		channel := grantsChannel(waiters, resource)
		holder, err := holders.TryAcquire(ctx, resource, longTTL)
		require.NoError(t, err)
		done := acquireAsync(ctx, waiters, resource, longTTL, hourRetryDelay)
		subscribed := func() bool { return channelSubscribers(t, client, waiters, resource) == 1 }
		waitUntil(t, subscribed, "the waiter to subscribe to "+channel)
		// Break every subscription connection, as a network blip would.
		require.NoError(t, client.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return c.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err()
		}))
		waitUntil(t, subscribed, "the subscription to "+channel+" to be made again")
		time.Sleep(50 * time.Millisecond)
		released := time.Now()
		require.NoError(t, holder.Release(ctx))
		lock := awaitAcquired(t, done)
		assert.Less(t, time.Since(released), 200*time.Millisecond, "%s: the grant was not heard", resource)
		require.NoError(t, lock.Release(ctx))
	}
	requireNoGoroutinesLeft(t)
}

// While Redis is down, a waiter's subscription connects again after a
// pause that grows to a second, from one failed connection to the next:
// not a hundred dials a second. The waiter's own attempts pause an hour
// after an error here, so the dials are the subscription's.
func TestSubscriptionBacksOffWhileRedisIsDown(t *testing.T) {
	redistest.ClientSide(t)
	srv := redistest.Start(t)
	ctx := testCtx(t)
	var dials atomic.Int64
	wc := redis.NewClient(&redis.Options{
		Addr:       srv.Addr,
		MaxRetries: -1,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return (&net.Dialer{Timeout: time.Second}).DialContext(ctx, network, addr)
		},
	})
	t.Cleanup(func() { wc.Close() })
	holders, waiters := fencedlock.New(srv.Client(t)), fencedlock.New(wc)
	mustTryAcquire(t, ctx, holders, "r", longTTL)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := acquireAsync(wctx, waiters, "r", longTTL, hourRetryDelay)
	waitUntil(t, func() bool {
		return waiters.WaiterRefused("r") && channelSubscribers(t, srv.Client(t), waiters, "r") == 1
	}, "the waiter to subscribe")
	srv.Kill()
	before := dials.Load()
	time.Sleep(3 * time.Second)
	n := dials.Load() - before
	// Pauses of 10, 20, 40, ... 1000 ms: about 9 connections in 3 s, at
	// most two dials each.
	assert.Less(t, n, int64(30), "dials in a 3 s outage")
	cancel()
	<-done
}
