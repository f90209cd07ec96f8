package fencedlock_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// Pub/sub between Lockers that know different kinds of it: sharded
// (Redis 7 and later) and classic (Redis 6 and before). A server without
// sharded pub/sub is played here by a Redis 7 whose SSUBSCRIBE, SPUBLISH
// and PUBSUB are renamed away: it answers as Redis 6 does.

// requireSharded skips t on a server without sharded pub/sub: there is no
// other kind to switch to.
func requireSharded(t *testing.T, c redis.UniversalClient) {
	t.Helper()
	sharded, err := redistest.ShardedPubSub(context.Background(), c)
	require.NoError(t, err)
	if !sharded {
		t.Skip("the server has no sharded pub/sub (Redis before 7): nothing to switch between")
	}
}

// startWithoutShardedPubSub starts a server that answers as one without
// sharded pub/sub does: SSUBSCRIBE and SPUBLISH are unknown commands, so
// is PUBSUB (the library's probe), which the test still has as
// renamedPubSub. extra are more arguments of the server.
func startWithoutShardedPubSub(t *testing.T, extra ...string) *redistest.Server {
	return redistest.Start(t, append([]string{"--rename-command", "SSUBSCRIBE", "", "--rename-command", "SPUBLISH", "", "--rename-command", "PUBSUB", renamedPubSub}, extra...)...)
}

const renamedPubSub = "PUBSUB-OF-THE-TEST"

// handOver makes holders hold resource and waiters wait for it (their
// timer an hour away), and returns how long after the release the
// waiter got the lock.
func handOver(t *testing.T, holders, waiters *fencedlock.Locker, resource string) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	holder := mustTryAcquire(t, ctx, holders, resource, longTTL)
	done := acquireAsync(ctx, waiters, resource, longTTL, hourRetryDelay)
	waitUntil(t, func() bool { return waiters.WaiterRefused(resource) }, "the waiter to queue")
	time.Sleep(100 * time.Millisecond) // its subscription settles
	released := time.Now()
	require.NoError(t, holder.Release(ctx))
	lock := awaitAcquired(t, done)
	took := time.Since(released)
	require.NoError(t, lock.Release(ctx))
	return took
}

// A Locker learns the kind of pub/sub once: after a failover between
// servers of different versions, Lockers that started before it and
// after it know different kinds, and each must still hear the other's
// hand-overs by pub/sub, not by its fallback timer.
func TestHandOversAcrossAFailoverToAnotherVersion(t *testing.T) {
	withSharded := redistest.Start(t)
	requireSharded(t, withSharded.Client(t))
	without := startWithoutShardedPubSub(t)
	proxied := func(t *testing.T, p *redistest.Proxy) *fencedlock.Locker {
		c := redis.NewClient(&redis.Options{Addr: p.Addr()})
		t.Cleanup(func() { c.Close() })
		return fencedlock.New(c)
	}

	t.Run("to a server without sharded pub/sub", func(t *testing.T) {
		p := redistest.NewProxy(t, withSharded.Addr)
		before := proxied(t, p) // learns sharded
		took := handOver(t, fencedlock.New(withSharded.Client(t)), before, "down")
		require.Less(t, took, time.Second, "before the failover")
		// Its subscription ends (the channel lingers a second), so that
		// no reconnect tells it of the failover before it releases.
		waitUntil(t, func() bool { return channelSubscribers(t, withSharded.Client(t), before, "down") == 0 }, "the subscription to end")
		p.Retarget(without.Addr)
		after := fencedlock.New(without.Client(t))
		took = handOver(t, before, after, "down")
		assert.Less(t, took, time.Second, "a release by a Locker that learnt sharded pub/sub, on a server without SPUBLISH")
		took = handOver(t, after, before, "down")
		assert.Less(t, took, time.Second, "a waiter that learnt sharded pub/sub, on a server without SSUBSCRIBE")
		took = handOver(t, before, after, "down")
		assert.Less(t, took, time.Second, "a release by that Locker again")
	})

	t.Run("to a server with sharded pub/sub", func(t *testing.T) {
		p := redistest.NewProxy(t, without.Addr)
		before := proxied(t, p) // learns classic
		took := handOver(t, fencedlock.New(without.Client(t)), before, "up")
		require.Less(t, took, time.Second, "before the failover")
		p.Retarget(withSharded.Addr)
		after := fencedlock.New(withSharded.Client(t))
		took = handOver(t, after, before, "up")
		assert.Less(t, took, time.Second, "a waiter subscribed with SUBSCRIBE, a release by a Locker that learnt nothing yet")
		took = handOver(t, before, after, "up") // after learns sharded
		assert.Less(t, took, time.Second, "a waiter subscribed with SSUBSCRIBE, a release by a Locker that learnt classic pub/sub")
		took = handOver(t, after, before, "up")
		assert.Less(t, took, time.Second, "a waiter subscribed with SUBSCRIBE, a release by a Locker that learnt sharded pub/sub")
	})
	requireNoGoroutinesLeftWithin(t, 5*time.Second)
}

// A waiter already subscribed with SSUBSCRIBE when a failover takes its
// connections to a server without sharded pub/sub: its subscription's
// reconnect is refused as an unknown command, and the waiter, woken,
// asks the new server, subscribes with SUBSCRIBE, and hears the hand-over
// there.
func TestSubscribedWaiterFollowsAFailoverToAServerWithoutShardedPubSub(t *testing.T) {
	withSharded := redistest.Start(t)
	requireSharded(t, withSharded.Client(t))
	without := startWithoutShardedPubSub(t)
	ctx := testCtx(t)
	p := redistest.NewProxy(t, withSharded.Addr)
	pc := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { pc.Close() })
	waiters := fencedlock.New(pc)
	mustTryAcquire(t, ctx, fencedlock.New(withSharded.Client(t)), "r", longTTL)
	done := acquireAsync(ctx, waiters, "r", longTTL, hourRetryDelay)
	waitUntil(t, func() bool {
		return waiters.WaiterRefused("r") && channelSubscribers(t, withSharded.Client(t), waiters, "r") == 1
	}, "the waiter to subscribe with SSUBSCRIBE")
	// The new primary: the lock is held there too (its data is not the
	// old one's), by a holder that releases once the waiter is there.
	holder := mustTryAcquire(t, ctx, fencedlock.New(without.Client(t)), "r", longTTL)
	p.Retarget(without.Addr)
	waitUntil(t, func() bool {
		// PUBSUB NUMSUB, under its other name: [channel, count]
		n, err := without.Client(t).Do(ctx, renamedPubSub, "NUMSUB", grantsChannel(waiters, "r")).Slice()
		return err == nil && len(n) == 2 && n[1] == int64(1)
	}, "the waiter to subscribe with SUBSCRIBE on the new server")
	released := time.Now()
	require.NoError(t, holder.Release(ctx))
	lock := awaitAcquired(t, done)
	assert.Less(t, time.Since(released), time.Second, "the hand-over must come by pub/sub, not by the hour-long timer")
	assert.Greater(t, lock.Token(), holder.Token())
	require.NoError(t, lock.Release(ctx))
}

// A server whose PUBSUB SHARDNUMSUB answers but whose SSUBSCRIBE does not
// exist (as a half-upgraded cluster answers, the probe reaching a new
// node and the subscription an old one): the waiter subscribes with
// SUBSCRIBE from then on, and hears its hand-over; it does not probe and
// attempt again and again.
func TestWaiterWhoseSSubscribeIsUnknownSubscribesClassic(t *testing.T) {
	// Redis before 7 refuses to rename a command it does not have.
	requireSharded(t, redistest.Start(t).Client(t))
	srv := redistest.Start(t, "--rename-command", "SSUBSCRIBE", "")
	admin := srv.Client(t)
	ctx := testCtx(t)
	holders, waiters := fencedlock.New(srv.Client(t)), fencedlock.New(srv.Client(t))
	holder := mustTryAcquire(t, ctx, holders, "r", longTTL)
	done := acquireAsync(ctx, waiters, "r", longTTL, hourRetryDelay)
	waitUntil(t, func() bool { return waiters.WaiterRefused("r") }, "the waiter to queue")
	before, err := redistest.CommandStats(ctx, admin)
	require.NoError(t, err)
	time.Sleep(time.Second)
	after, err := redistest.CommandStats(ctx, admin)
	require.NoError(t, err)
	probes := after["pubsub|shardnumsub"].Calls - before["pubsub|shardnumsub"].Calls
	attempts := after["evalsha"].Calls - before["evalsha"].Calls
	assert.LessOrEqual(t, probes, int64(1), "probes in a second of waiting")
	assert.LessOrEqual(t, attempts, int64(3), "scripts run in a second of waiting")
	n, err := admin.PubSubNumSub(ctx, grantsChannel(waiters, "r")).Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n[grantsChannel(waiters, "r")], "classic subscriptions of the waiter's channel")
	released := time.Now()
	require.NoError(t, holder.Release(ctx))
	lock := awaitAcquired(t, done)
	assert.Less(t, time.Since(released), time.Second, "the hand-over must come by pub/sub, not by the hour-long timer")
	require.NoError(t, lock.Release(ctx))
}

// A releasing user whose ACL lacks SPUBLISH, where the waiter subscribed
// with SSUBSCRIBE: the hand-over was not heard, and the Locker says so at
// Warn, though its PUBLISH went through (to nobody). (It warned before
// the release published with both kinds too: the test is that the
// second publish does not hide the refusal of the first.)
func TestRefusedSPublishIsWarnedOf(t *testing.T) {
	srv, admin := aclServer(t)
	requireSharded(t, admin)
	setUser(t, admin, "full", aclPassword, append([]string{"resetkeys", "resetchannels", "-@all"}, aclRule(t)...)...)
	setUser(t, admin, "nospublish", aclPassword, append(append([]string{"resetkeys", "resetchannels", "-@all"}, aclRule(t)...), "-spublish")...)
	logs := &syncBuffer{}
	releaser := fencedlock.New(userClient(t, srv, "nospublish", aclPassword, true), fencedlock.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	waiter := fencedlock.New(userClient(t, srv, "full", aclPassword, true))
	handOver(t, waiter, releaser, "learn") // the releaser learns sharded pub/sub
	require.Empty(t, warnings(logs.String()), "before its first refused publish")
	ctx := testCtx(t)
	holder := mustTryAcquire(t, ctx, releaser, "r", longTTL)
	done := acquireAsync(ctx, waiter, "r", longTTL, fencedlock.WithRetryDelay(200*time.Millisecond, 200*time.Millisecond))
	waitUntil(t, func() bool { return waiter.WaiterRefused("r") }, "the waiter to queue")
	require.NoError(t, holder.Release(ctx))
	lock := awaitAcquired(t, done)
	require.NoError(t, lock.Release(ctx))
	warns := warnings(logs.String())
	require.Len(t, warns, 1, "%s", logs.String())
	assert.Contains(t, warns[0], "PUBLISH of a hand-over")
}

// A ClusterClient made with ReadOnly subscribes on a replica, whose
// subscribers the primary's SPUBLISH does not count: its hand-overs are
// heard, and do not PUBLISH (to every node of a cluster) as well. The
// client's slots are a primary and its replica, not a cluster.
func TestReadOnlyClusterHandOversPublishOnce(t *testing.T) {
	ctx := testCtx(t)
	primary := redistest.Start(t)
	pc := primary.Client(t)
	requireSharded(t, pc)
	replica := startReplica(t, primary)
	rc := replica.Client(t)
	locker := func() *fencedlock.Locker {
		c := redis.NewClusterClient(&redis.ClusterOptions{
			ReadOnly: true,
			ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
				return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: primary.Addr}, {Addr: replica.Addr}}}}, nil
			},
		})
		t.Cleanup(func() { c.Close() })
		return fencedlock.New(c)
	}
	holders, waiters := locker(), locker()
	before, err := redistest.CommandStats(ctx, pc)
	require.NoError(t, err)
	const n = 6
	for i := 0; i < n; i++ {
		took := handOver(t, holders, waiters, fmt.Sprintf("ro-%d", i%3))
		assert.Less(t, took, time.Second, "hand-over %d", i)
	}
	after, err := redistest.CommandStats(ctx, pc)
	require.NoError(t, err)
	subscribed, err := redistest.CommandStats(ctx, rc)
	require.NoError(t, err)
	spublish := after["spublish"].Calls - before["spublish"].Calls
	publish := after["publish"].Calls - before["publish"].Calls
	t.Logf("%d hand-overs: SPUBLISH %d, PUBLISH %d on the primary; SSUBSCRIBE %d on the replica", n, spublish, publish, subscribed["ssubscribe"].Calls)
	require.NotZero(t, subscribed["ssubscribe"].Calls, "no subscription on the replica: the test tests nothing")
	assert.Equal(t, int64(n), spublish, "SPUBLISH on the primary")
	assert.Zero(t, publish, "PUBLISH on the primary")
}

// On Redis Cluster, a failover of one node to a server without sharded
// pub/sub switches the Locker to classic pub/sub on every node: the
// subscriber of that node meets SSUBSCRIBE as an unknown command, and the
// sharded subscriber of the other node ends too, though its server has
// sharded pub/sub and its connection never broke (so that nothing but
// the unlearning of the first can end it); its waiter subscribes again
// with SUBSCRIBE, on the Locker's one classic connection, which a
// cluster's PUBLISH reaches from any node, and both waiters hear their
// hand-overs. Node 2 is sent no SSUBSCRIBE again. Node 1 is a plain
// server (which takes keys of any slot) that fails over, through a
// proxy, to a node of a two-node cluster without sharded pub/sub; node 2
// is the cluster's other node and stays.
func TestFailoverOfOneClusterNodeWithoutShardedPubSubEndsEveryShardedSubscriber(t *testing.T) {
	withSharded := redistest.Start(t)
	requireSharded(t, withSharded.Client(t))
	without := startWithoutShardedPubSub(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	node2 := redistest.Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	redistest.FormCluster(t, without, node2) // without serves 0..8191, node2 8192..16383
	ctx := testCtx(t)
	n1, n1new, n2 := withSharded.Client(t), without.Client(t), node2.Client(t)
	p := redistest.NewProxy(t, withSharded.Addr)
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
			return []redis.ClusterSlot{
				{Start: 0, End: 8191, Nodes: []redis.ClusterNode{{Addr: p.Addr()}}},
				{Start: 8192, End: 16383, Nodes: []redis.ClusterNode{{Addr: node2.Addr}}},
			}, nil
		},
	})
	t.Cleanup(func() { cc.Close() })
	waiters := fencedlock.New(cc)
	r1, r2 := resourceInSlots(t, waiters, 0, 8191), resourceInSlots(t, waiters, 8192, 16383)
	ch1, ch2 := grantsChannel(waiters, r1), grantsChannel(waiters, r2)

	mustTryAcquire(t, ctx, fencedlock.New(n1), r1, longTTL)
	holder2 := mustTryAcquire(t, ctx, fencedlock.New(n2), r2, longTTL)
	done1 := acquireAsync(ctx, waiters, r1, longTTL, hourRetryDelay)
	done2 := acquireAsync(ctx, waiters, r2, longTTL, hourRetryDelay)
	waitUntil(t, func() bool {
		return waiters.WaiterRefused(r1) && waiters.WaiterRefused(r2) &&
			channelSubscribers(t, n1, waiters, r1) == 1 && channelSubscribers(t, n2, waiters, r2) == 1
	}, "both waiters to subscribe with SSUBSCRIBE, each on its node")

	before, err := redistest.CommandStats(ctx, n2)
	require.NoError(t, err)

	// Node 1's new primary: the lock is held there too (its data is not
	// the old one's), by a holder that releases once the waiter is there.
	holder1 := mustTryAcquire(t, ctx, fencedlock.New(n1new), r1, longTTL)
	p.Retarget(without.Addr)
	classic := func(channel string) int64 {
		var total int64
		for _, c := range []struct {
			client *redis.Client
			pubsub string
		}{{n1new, renamedPubSub}, {n2, "PUBSUB"}} {
			// PUBSUB NUMSUB: [channel, count]
			n, err := c.client.Do(ctx, c.pubsub, "NUMSUB", channel).Slice()
			require.NoError(t, err)
			require.Len(t, n, 2)
			count, ok := n[1].(int64)
			require.True(t, ok, "PUBSUB NUMSUB %s: %v", channel, n)
			total += count
		}
		return total
	}
	waitUntil(t, func() bool { return channelSubscribers(t, n2, waiters, r2) == 0 },
		"node 2's sharded subscriber to end: its server has SSUBSCRIBE, but the Locker learnt classic pub/sub on node 1")
	// A sharded subscriber of a cluster also holds a classic subscription
	// of its first channel (to keep go-redis's reconnect on its node):
	// one classic subscription each, with node 2's sharded one gone, is
	// the waiters' new one.
	waitUntil(t, func() bool {
		return classic(ch1) == 1 && classic(ch2) == 1 && channelSubscribers(t, n2, waiters, r2) == 0
	}, "both waiters to subscribe with SUBSCRIBE")

	released := time.Now()
	require.NoError(t, holder1.Release(ctx))
	require.NoError(t, holder2.Release(ctx))
	lock1 := awaitAcquired(t, done1)
	took1 := time.Since(released)
	lock2 := awaitAcquired(t, done2)
	took2 := time.Since(released)
	assert.Less(t, took1, time.Second, "the hand-over on node 1 must come by pub/sub, not by the hour-long timer")
	assert.Less(t, took2, time.Second, "the hand-over on node 2 must come by pub/sub, not by the hour-long timer")
	assert.Greater(t, lock1.Token(), holder1.Token())
	assert.Greater(t, lock2.Token(), holder2.Token())
	after, err := redistest.CommandStats(ctx, n2)
	require.NoError(t, err)
	assert.Zero(t, after["ssubscribe"].Calls-before["ssubscribe"].Calls,
		"SSUBSCRIBE on node 2 after the Locker learnt classic pub/sub")
	require.NoError(t, lock1.Release(ctx))
	require.NoError(t, lock2.Release(ctx))
}

// resourceInSlots returns a resource whose keys and grants channel of l
// hash to a slot in from..to.
func resourceInSlots(t *testing.T, l *fencedlock.Locker, from, to uint16) string {
	t.Helper()
	for i := 0; i < 1000; i++ {
		r := fmt.Sprintf("r%d", i)
		if s := fencedlock.HashSlot(grantsChannel(l, r)); s >= from && s <= to {
			require.Equal(t, s, fencedlock.HashSlot(l.LockKey(r)), "the channel and the lock of %q in one slot", r)
			return r
		}
	}
	t.Fatalf("no resource in slots %d..%d", from, to)
	return ""
}
