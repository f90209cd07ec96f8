package fencedlock_test

import (
	"context"
	"fmt"
	"math"
	"net"
	"strconv"
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

// grantSubscribers returns how many connections are subscribed to resource's
// channel, by the kind of pub/sub the library uses on the server: sharded
// where the server has it, classic elsewhere (miniredis, Redis before 7).
func grantSubscribers(t *testing.T, b *redistest.Backend, l *fencedlock.Locker, resource string) int64 {
	t.Helper()
	return channelSubscribers(t, b.Client, l, resource)
}

// A waiter is woken by the release that hands it the lock, within
// milliseconds, without polling: in the same Locker (the release's reply
// carries the grant) and in another one (the grant is published).
func TestWaiterWakesOnRelease(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		for _, sameLocker := range []bool{true, false} {
			name := "another Locker"
			if sameLocker {
				name = "same Locker"
			}
			sameLocker := sameLocker
			t.Run(name, func(t *testing.T) {
				ctx := testCtx(t)
				holderLocker := newLocker(b)
				counter := &acquireAttemptCounter{tokenKey: holderLocker.TokenKey("wake")}
				c := redis.NewClient(&redis.Options{Addr: b.Client.Options().Addr})
				c.AddHook(counter)
				t.Cleanup(func() { c.Close() })
				waiterLocker := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix))
				if sameLocker {
					holderLocker = waiterLocker
				}
				holder := mustTryAcquire(t, ctx, holderLocker, "wake", longTTL)
				before := counter.count()
				done := acquireAsync(ctx, waiterLocker, "wake", longTTL, hourRetryDelay)
				waitUntil(t, func() bool {
					return queuedCount(t, b, waiterLocker, "wake") == 1 && grantSubscribers(t, b, waiterLocker, "wake") >= 1
				}, "the waiter to queue and subscribe")
				requireStillWaiting(t, done)

				released := time.Now()
				require.NoError(t, holder.Release(ctx))
				lock := awaitAcquired(t, done)
				woke := time.Since(released)
				t.Logf("woken %v after the release", woke)
				assert.Less(t, woke, 100*time.Millisecond, "the waiter was not woken by the release")
				assert.Greater(t, lock.Token(), holder.Token())
				v, _ := getKey(t, b, waiterLocker.LockKey("wake"))
				assert.True(t, strings.HasSuffix(v, ":"+lock.Token().String()), "lock key %q is not the waiter's grant", v)
				assert.Zero(t, queuedCount(t, b, waiterLocker, "wake"))
				// The first attempt queued it; one more once subscribed;
				// the release handed it the lock: no polling.
				assert.LessOrEqual(t, counter.count()-before, 2, "the waiter polled")
				left, err := lock.TTL(ctx)
				require.NoError(t, err)
				assert.Greater(t, left, longTTL-5*time.Second, "the handed-on lock did not get the waiter's TTL")
				require.NoError(t, lock.Release(ctx))
				requireNoGoroutinesLeft(t)
			})
		}
	})
}

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

// A waiter that gives up while the release hands it the lock passes the
// lock on: the resource is never left locked by nobody.
func TestWaiterGivingUpAsTheLockIsHandedToIt(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l, holders := newLocker(b), newLocker(b)
		got := 0
		for i := 0; i < 30; i++ {
			holder := mustTryAcquire(t, ctx, holders, "race", longTTL)
			wctx, cancel := context.WithCancel(ctx)
			done := acquireAsync(wctx, l, "race", longTTL)
			waitUntil(t, func() bool { return queuedCount(t, b, l, "race") == 1 }, "the waiter to queue")
			// The waiter gives up a little before, at, or a little after
			// the release.
			late := time.Duration(i%4) * 300 * time.Microsecond
			go func() {
				time.Sleep(late)
				cancel()
			}()
			time.Sleep(time.Duration(i%3) * 300 * time.Microsecond)
			require.NoError(t, holder.Release(ctx))
			r := <-done
			if r.err == nil {
				got++
				require.NoError(t, r.lock.Release(ctx))
			} else {
				require.ErrorIs(t, r.err, context.Canceled)
				// Leaving the queue may outlive the cancelled ctx.
				awaitCleanupAfterCtxEnd(t, r.err, func() bool {
					return !keyExists(t, b, l.LockKey("race")) && queuedCount(t, b, l, "race") == 0
				})
			}
			require.False(t, keyExists(t, b, l.LockKey("race")), "round %d: the lock stayed with a waiter that gave up", i)
			require.Zero(t, queuedCount(t, b, l, "race"), "round %d: queue entry left", i)
		}
		t.Logf("the waiter got the lock in %d of 30 rounds", got)
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

// The hash slot computed for grouping subscriptions is the cluster's.
func TestHashSlot(t *testing.T) {
	srv := redistest.StartCluster(t)
	ctx := context.Background()
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr}})
	t.Cleanup(func() { client.Close() })
	for i, key := range []string{"", "a", "fencedlock:{order-queue}:grants", "{}x", "a{b}c{d}", "{", "}{", "x{y", "ünï", strconv.Itoa(123456789)} {
		want, err := client.ClusterKeySlot(ctx, key).Result()
		if key == "" {
			// CLUSTER KEYSLOT of "" is 0, as the CRC of nothing.
			require.NoError(t, err)
		}
		require.NoError(t, err, "key %d %q", i, key)
		assert.Equal(t, want, int64(fencedlock.HashSlot(key)), "key %q", key)
	}
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

// When the first waiter gives up while the lock is free (its holder
// crashed) and promised to it, the lock goes on to the next waiter at
// once, not when the next one's timer fires.
func TestFirstWaiterGivingUpHandsAFreeLockOn(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		first, second := newLocker(b), newLocker(b)
		mustTryAcquire(t, ctx, newLocker(b), "crashed", longTTL)
		fctx, cancel := context.WithCancel(ctx)
		defer cancel()
		firstDone := acquireAsync(fctx, first, "crashed", longTTL, hourRetryDelay)
		waitUntil(t, func() bool { return queuedCount(t, b, first, "crashed") == 1 }, "the first waiter to queue")
		secondDone := acquireAsync(ctx, second, "crashed", longTTL, hourRetryDelay)
		waitUntil(t, func() bool {
			return queuedCount(t, b, first, "crashed") == 2 && grantSubscribers(t, b, first, "crashed") == 2
		}, "the second waiter to queue and subscribe")
		time.Sleep(20 * time.Millisecond)
		// The holder crashed: its key expires (deleted here, as a real
		// Redis would at the end of the TTL). The first waiter, whose timer
		// has an hour to go, gives up.
		require.NoError(t, b.Client.Del(ctx, first.LockKey("crashed")).Err())
		cancel()
		r := <-firstDone
		require.ErrorIs(t, r.err, context.Canceled)
		left := time.Now()
		lock := awaitAcquired(t, secondDone)
		assert.Less(t, time.Since(left), 100*time.Millisecond, "the second waiter was not handed the free lock")
		require.NoError(t, lock.Release(ctx))
		requireNoGoroutinesLeft(t)
	})
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

// A holder that is not sure it still holds the lock (its TTL ran out by
// the local clock) hands nothing over: a late Release must not let the
// next waiter write with a token Redis never granted while another owner
// holds the lock.
func TestLateReleaseHandsNothingOver(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l, other := newLocker(b), newLocker(b)
		store := newRedisStore(b)
		const ttl = 100 * time.Millisecond
		stale := mustTryAcquire(t, ctx, l, "late", ttl)
		time.Sleep(ttl + 20*time.Millisecond)
		b.FastForward(t, ttl+20*time.Millisecond) // miniredis expires keys only when told
		owner := mustTryAcquire(t, ctx, other, "late", longTTL)
		require.NoError(t, store.Put(ctx, "late", owner.Token(), []byte("owner")))
		done := acquireAsync(ctx, l, "late", longTTL, hourRetryDelay)
		awaitQueued(t, b, l, "late")

		assert.ErrorIs(t, stale.Release(ctx), fencedlock.ErrLockLost)
		requireStillWaiting(t, done)
		require.NoError(t, store.Put(ctx, "late", owner.Token(), []byte("owner again")), "the owner's write was refused")
		require.NoError(t, owner.Release(ctx))
		lock := awaitAcquired(t, done)
		assert.Greater(t, lock.Token(), owner.Token())
		require.NoError(t, lock.Release(ctx))
		requireNoGoroutinesLeft(t)
	})
}

// A Release whose context is done hands nothing over and changes
// nothing; a later Release hands the lock on.
func TestReleaseWithDoneContextHandsNothingOver(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l := newLocker(b)
		holder := mustTryAcquire(t, ctx, l, "done-ctx", longTTL)
		done := acquireAsync(ctx, l, "done-ctx", longTTL, hourRetryDelay)
		awaitQueued(t, b, l, "done-ctx")
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		assert.ErrorIs(t, holder.Release(cancelled), context.Canceled)
		requireStillWaiting(t, done)
		assert.Equal(t, int64(1), queuedCount(t, b, l, "done-ctx"))
		require.NoError(t, holder.Release(ctx))
		lock := awaitAcquired(t, done)
		assert.Greater(t, lock.Token(), holder.Token())
		require.NoError(t, lock.Release(ctx))
		requireNoGoroutinesLeft(t)
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
				require.NoError(t, holder.Release(ctx))
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

// heldToken returns the token the lock key of resource holds in Redis
// now, or 0 when the key is missing.
func heldToken(t *testing.T, b *redistest.Backend, l *fencedlock.Locker, resource string) fencedlock.Token {
	t.Helper()
	v, ok := getKey(t, b, l.LockKey(resource))
	if !ok {
		return 0
	}
	m := lockValuePattern.FindStringSubmatch(v)
	require.NotNil(t, m, "lock key value %q", v)
	tok, err := fencedlock.ParseToken(m[2])
	require.NoError(t, err)
	return tok
}

// An Acquire returns only a Lock that Redis granted and whose answer came
// back, even after a Release or Refresh of the holder in the same Locker
// whose outcome is unknown: its reply was delayed past its context while
// Redis handed the lock to another process's waiter.
func TestAcquireReturnsOnlyGrantedLocksAfterAnUnknownOutcome(t *testing.T) {
	for _, how := range []string{"release", "refresh"} {
		t.Run(how, func(t *testing.T) {
			b := redistest.Real(t)
			ctx := testCtx(t)
			p := redistest.NewProxy(t, b.Client.Options().Addr)
			c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			l := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix))
			x := newLocker(b)
			const res = "r"
			// Loads the scripts: a NOSCRIPT reply delayed like the others
			// would keep the release from running at all.
			warm := mustTryAcquire(t, ctx, l, "warm-up", longTTL)
			require.NoError(t, warm.Refresh(ctx, longTTL))
			require.NoError(t, warm.Release(ctx))

			holder := mustTryAcquire(t, ctx, l, res, longTTL)
			xDone := acquireAsync(ctx, x, res, longTTL, fencedlock.WithRetryDelay(5*time.Millisecond, 20*time.Millisecond))
			waitUntil(t, func() bool { return queuedCount(t, b, x, res) == 1 }, "X to queue")

			p.DelayReplies(300 * time.Millisecond)
			short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			var err error
			if how == "release" {
				err = holder.Release(short)
			} else {
				// The refresh runs in Redis and shortens the lock to 5ms:
				// it expires and X takes it, while the reply is on its way.
				err = holder.Refresh(short, 5*time.Millisecond)
			}
			cancel()
			require.Error(t, err, "the %s's reply came back in time: the proxy did not delay it", how)
			xLock := awaitAcquired(t, xDone)
			require.Equal(t, xLock.Token(), heldToken(t, b, l, res), "X holds the lock in Redis")

			// A goroutine of L waits, and the holder releases again while
			// replies are still delayed.
			lDone := acquireAsync(ctx, l, res, longTTL, hourRetryDelay)
			// Its refusal comes back, delayed.
			waitUntil(t, func() bool { return l.WaiterRefused(res) }, "L's waiter to hear its refusal")
			// and its subscription's confirmation, and its next refusal.
			time.Sleep(1500 * time.Millisecond)
			again, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			rerr := holder.Release(again)
			cancel()
			t.Logf("second release: %v; holder.Err %v", rerr, holder.Err())
			select {
			case r := <-lDone:
				held := heldToken(t, b, l, res)
				if r.err == nil {
					t.Fatalf("Acquire returned a Lock with token %d while Redis holds token %d (X's is %d)", r.lock.Token(), held, xLock.Token())
				}
				t.Logf("waiter's Acquire: %v", r.err)
				// An error is fine; the waiter is not waiting any more.
				lDone = nil
			case <-time.After(500 * time.Millisecond):
			}
			p.DelayReplies(0)
			requireNotHolding(t, holder)
			require.NoError(t, xLock.Release(ctx))
			if lDone != nil {
				lock := awaitAcquired(t, lDone)
				assert.Greater(t, lock.Token(), xLock.Token())
				assert.Equal(t, lock.Token(), heldToken(t, b, l, res), "the waiter's Lock is Redis's grant")
				require.NoError(t, lock.Release(ctx))
			}
			requireNoGoroutinesLeft(t)
		})
	}
}

// requireNotHolding checks that lock no longer claims to hold its lock
// once a call asks Redis.
func requireNotHolding(t *testing.T, lock *fencedlock.Lock) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := lock.TTL(ctx)
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "lost") || strings.Contains(err.Error(), "released"), "%v", err)
}

// acquireAsyncPolling runs Acquire in a goroutine.
func acquireAsyncPolling(ctx context.Context, l *fencedlock.Locker, resource string) <-chan acquireResult {
	return acquireAsync(ctx, l, resource, longTTL, fencedlock.WithRetryDelay(time.Millisecond, 5*time.Millisecond))
}

// acquireAttemptCounter is a client hook that counts the acquire scripts (the
// EVALSHA or EVAL naming tokenKey) that got a reply.
type acquireAttemptCounter struct {
	tokenKey string
	n        atomic.Int32
}

func (h *acquireAttemptCounter) count() int { return int(h.n.Load()) }

func (h *acquireAttemptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *acquireAttemptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *acquireAttemptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && isAcquireScript(cmd, h.tokenKey) {
			h.n.Add(1)
		}
		return err
	}
}
