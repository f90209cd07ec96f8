package fencedlock_test

import (
	"context"
	"fmt"
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

// ltQueueKeys returns the keys of resource's Redis queue: the sorted set of
// waiters and the hash of their deadlines.
func ltQueueKeys(l *fencedlock.Locker, resource string) (queue, deadlines string) {
	base := strings.TrimSuffix(l.LockKey(resource), "lock")
	return base + "queue", base + "deadlines"
}

// ltQueued returns how many waiters resource's Redis queue holds.
func ltQueued(t *testing.T, b *redistest.Backend, l *fencedlock.Locker, resource string) int64 {
	t.Helper()
	queue, _ := ltQueueKeys(l, resource)
	n, err := b.Client.ZCard(context.Background(), queue).Result()
	require.NoError(t, err)
	return n
}

// ltSubscribers returns how many connections are subscribed to resource's
// channel, by the kind of pub/sub the library uses on the server: sharded
// where the server has it, classic elsewhere (miniredis, Redis before 7).
func ltSubscribers(t *testing.T, b *redistest.Backend, l *fencedlock.Locker, resource string) int64 {
	t.Helper()
	return ltChannelSubscribers(t, b.Client, l, resource)
}

// ltChannelSubscribers is ltSubscribers for the server behind c (on
// Redis Cluster, for all its masters).
func ltChannelSubscribers(t *testing.T, c redis.UniversalClient, l *fencedlock.Locker, resource string) int64 {
	t.Helper()
	n, err := redistest.Subscribers(context.Background(), c, ltChannel(l, resource))
	require.NoError(t, err)
	return n
}

// ltChannel returns the channel on which resource's grants are published.
func ltChannel(l *fencedlock.Locker, resource string) string {
	return strings.TrimSuffix(l.LockKey(resource), "lock") + "grants"
}

// ltEventually waits up to 5s for cond, failing t with what otherwise.
func ltEventually(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting: " + what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// ltAwaitQueued waits until the one waiter for resource is queued in
// Redis, its Locker subscribed, and the waiter has heard its refusal,
// then a little longer for the attempt the waiter makes once the
// subscription is confirmed.
func ltAwaitQueued(t *testing.T, b *redistest.Backend, l *fencedlock.Locker, resource string) {
	t.Helper()
	ltEventually(t, func() bool {
		return ltQueued(t, b, l, resource) == 1 && ltSubscribers(t, b, l, resource) == 1 && l.WaiterRefused(resource)
	}, "the waiter for "+resource+" to queue, subscribe and hear its refusal")
	time.Sleep(20 * time.Millisecond)
}

// ltWaitFor starts Acquire in a goroutine with opts and returns the
// channel of its result.
func ltWaitFor(ctx context.Context, l *fencedlock.Locker, resource string, ttl time.Duration, opts ...fencedlock.AcquireOption) <-chan ltAcquireResult {
	done := make(chan ltAcquireResult, 1)
	go func() {
		lock, err := l.Acquire(ctx, resource, ttl, opts...)
		done <- ltAcquireResult{lock, err, time.Now()}
	}()
	return done
}

// ltHourDelay makes Acquire's fallback timer useless within a test: a
// waiter that gets the lock was woken by the release.
var ltHourDelay = fencedlock.WithRetryDelay(time.Hour, time.Hour)

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
				ctx := ltCtx(t)
				holderLocker := ltLocker(b)
				counter := &ltAttemptCounter{tokenKey: holderLocker.TokenKey("wake")}
				c := redis.NewClient(&redis.Options{Addr: b.Client.Options().Addr})
				c.AddHook(counter)
				t.Cleanup(func() { c.Close() })
				waiterLocker := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix))
				if sameLocker {
					holderLocker = waiterLocker
				}
				holder := ltTryAcquire(t, ctx, holderLocker, "wake", ltLongTTL)
				before := counter.count()
				done := ltWaitFor(ctx, waiterLocker, "wake", ltLongTTL, ltHourDelay)
				ltEventually(t, func() bool {
					return ltQueued(t, b, waiterLocker, "wake") == 1 && ltSubscribers(t, b, waiterLocker, "wake") >= 1
				}, "the waiter to queue and subscribe")
				ltRequireStillWaiting(t, done)

				released := time.Now()
				require.NoError(t, holder.Release(ctx))
				lock := ltAwait(t, done)
				woke := time.Since(released)
				t.Logf("woken %v after the release", woke)
				assert.Less(t, woke, 100*time.Millisecond, "the waiter was not woken by the release")
				assert.Greater(t, lock.Token(), holder.Token())
				v, _ := ltGetKey(t, b, waiterLocker.LockKey("wake"))
				assert.True(t, strings.HasSuffix(v, ":"+lock.Token().String()), "lock key %q is not the waiter's grant", v)
				assert.Zero(t, ltQueued(t, b, waiterLocker, "wake"))
				// The first attempt queued it; one more once subscribed;
				// the release handed it the lock: no polling.
				assert.LessOrEqual(t, counter.count()-before, 2, "the waiter polled")
				left, err := lock.TTL(ctx)
				require.NoError(t, err)
				assert.Greater(t, left, ltLongTTL-5*time.Second, "the handed-on lock did not get the waiter's TTL")
				require.NoError(t, lock.Release(ctx))
				ltNoGoroutinesLeft(t)
			})
		}
	})
}

// Waiters queue in Redis in order of arrival, one per Locker at a time:
// a Locker's other goroutines wait in the process behind its first.
func TestWaitersAreServedInOrder(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := ltCtx(t)
		lockers := map[string]*fencedlock.Locker{"A": ltLocker(b), "B": ltLocker(b), "C": ltLocker(b)}
		holder := ltTryAcquire(t, ctx, ltLocker(b), "order", ltLongTTL)

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
				lock, err := lockers[name[:1]].Acquire(ctx, "order", ltLongTTL, ltHourDelay)
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
			queued := ltQueued(t, b, lockers["A"], "order")
			start(name)
			if name == "A2" {
				time.Sleep(50 * time.Millisecond)
				assert.Equal(t, queued, ltQueued(t, b, lockers["A"], "order"), "A's second waiter queued in Redis")
				continue
			}
			ltEventually(t, func() bool { return ltQueued(t, b, lockers["A"], "order") == queued+1 }, name+" to queue")
		}
		require.NoError(t, holder.Release(ctx))
		wg.Wait()
		assert.Equal(t, []string{"A1", "B1", "C1", "A2"}, served)
		for i := 1; i < len(tokens); i++ {
			assert.Greater(t, tokens[i], tokens[i-1], "grant %d", i)
		}
		ltNoGoroutinesLeft(t)
	})
}

// Waiters that give up leave no queue entry, no lock and no goroutine,
// whether they were first in the process, behind another, or in another
// Locker.
func TestCancelledWaitersLeaveNothing(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := ltCtx(t)
		a, other := ltLocker(b), ltLocker(b)
		holder := ltTryAcquire(t, ctx, ltLocker(b), "cancel", ltLongTTL)
		wctx, cancel := context.WithCancel(ctx)
		first := ltWaitFor(wctx, a, "cancel", ltLongTTL)
		ltEventually(t, func() bool { return ltQueued(t, b, a, "cancel") == 1 }, "the first waiter to queue")
		second := ltWaitFor(wctx, a, "cancel", ltLongTTL)
		third := ltWaitFor(wctx, other, "cancel", ltLongTTL)
		ltEventually(t, func() bool { return ltQueued(t, b, a, "cancel") == 2 }, "the other Locker's waiter to queue")
		ltRequireStillWaiting(t, second)
		cancel()
		for _, done := range []<-chan ltAcquireResult{first, second, third} {
			r := <-done
			assert.Nil(t, r.lock)
			assert.ErrorIs(t, r.err, fencedlock.ErrNotAcquired)
			assert.ErrorIs(t, r.err, context.Canceled)
		}
		queue, deadlines := ltQueueKeys(a, "cancel")
		assert.False(t, ltExists(t, b, queue), "queue entries left")
		assert.False(t, ltExists(t, b, deadlines), "deadlines left")
		require.NoError(t, holder.Release(ctx))
		assert.False(t, ltExists(t, b, a.LockKey("cancel")), "the release handed the lock to a waiter that gave up")
		ltNoGoroutinesLeft(t)
	})
}

// A waiter that gives up while the release hands it the lock passes the
// lock on: the resource is never left locked by nobody.
func TestWaiterGivingUpAsTheLockIsHandedToIt(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := ltCtx(t)
		l, holders := ltLocker(b), ltLocker(b)
		got := 0
		for i := 0; i < 30; i++ {
			holder := ltTryAcquire(t, ctx, holders, "race", ltLongTTL)
			wctx, cancel := context.WithCancel(ctx)
			done := ltWaitFor(wctx, l, "race", ltLongTTL)
			ltEventually(t, func() bool { return ltQueued(t, b, l, "race") == 1 }, "the waiter to queue")
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
				ltAwaitCleanup(t, r.err, func() bool {
					return !ltExists(t, b, l.LockKey("race")) && ltQueued(t, b, l, "race") == 0
				})
			}
			require.False(t, ltExists(t, b, l.LockKey("race")), "round %d: the lock stayed with a waiter that gave up", i)
			require.Zero(t, ltQueued(t, b, l, "race"), "round %d: queue entry left", i)
		}
		t.Logf("the waiter got the lock in %d of 30 rounds", got)
		ltNoGoroutinesLeft(t)
	})
}

// TryAcquire does not take a free lock promised to a live waiter; a dead
// waiter (its deadline passed) is skipped and dropped.
func TestTryAcquireRespectsTheQueue(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := ltCtx(t)
		l := ltLocker(b)
		queue, deadlines := ltQueueKeys(l, "promised")
		entry := strings.Repeat("ab", 16) + ":30000"
		nowMS := int64(ltServerMicros(t, b) / 1000)
		require.NoError(t, b.Client.ZAdd(ctx, queue, redis.Z{Score: 1, Member: entry}).Err())
		require.NoError(t, b.Client.HSet(ctx, deadlines, entry, nowMS+60000).Err())
		_, err := l.TryAcquire(ctx, "promised", ltLongTTL)
		require.ErrorIs(t, err, fencedlock.ErrNotAcquired)

		require.NoError(t, b.Client.HSet(ctx, deadlines, entry, nowMS-1).Err())
		lock := ltTryAcquire(t, ctx, l, "promised", ltLongTTL)
		assert.False(t, ltExists(t, b, queue), "the dead waiter was not dropped")
		assert.False(t, ltExists(t, b, deadlines))
		require.NoError(t, lock.Release(ctx))
	})
}

// A waiter whose process stops (here: its connection stalls) keeps its
// place until its TTL: the lock handed to it holds the others back by at
// most about that long, and the token order holds.
func TestStalledWaiterDelaysOthersAtMostItsTTL(t *testing.T) {
	b := redistest.Real(t)
	ctx := ltCtx(t)
	p := redistest.NewProxy(t, b.Client.Options().Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { c.Close() })
	stalled, other := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix)), ltLocker(b)
	holder := ltTryAcquire(t, ctx, other, "stall", ltLongTTL)

	const stalledTTL = 400 * time.Millisecond
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	first := ltWaitFor(sctx, stalled, "stall", stalledTTL)
	ltEventually(t, func() bool {
		return ltQueued(t, b, stalled, "stall") == 1 && ltSubscribers(t, b, stalled, "stall") == 1
	}, "the first waiter to queue")
	second := ltWaitFor(ctx, other, "stall", ltLongTTL)
	ltEventually(t, func() bool { return ltQueued(t, b, stalled, "stall") == 2 }, "the second waiter to queue")
	p.Pause()
	defer p.Resume()

	released := time.Now()
	require.NoError(t, holder.Release(ctx))
	v, _ := ltGetKey(t, b, other.LockKey("stall"))
	handed, err := fencedlock.ParseToken(v[strings.LastIndexByte(v, ':')+1:])
	require.NoError(t, err)
	lock := ltAwait(t, second)
	took := time.Since(released)
	t.Logf("the second waiter got the lock %v after the release", took)
	assert.GreaterOrEqual(t, took, stalledTTL-50*time.Millisecond, "the lock handed to the stalled waiter was taken early")
	assert.Less(t, took, stalledTTL+fencedlock.DefaultMaxRetryDelay+500*time.Millisecond)
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
		ctx := ltCtx(t)
		p := redistest.NewProxy(t, b.Client.Options().Addr)
		c := redis.NewClient(&redis.Options{Addr: p.Addr()})
		t.Cleanup(func() { c.Close() })
		l := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix))
		holder := ltTryAcquire(t, ctx, ltLocker(b), "reconnect", ltLongTTL)
		done := ltWaitFor(ctx, l, "reconnect", ltLongTTL, ltHourDelay)
		ltAwaitQueued(t, b, l, "reconnect")
		p.Pause()
		p.CloseAll()
		require.NoError(t, holder.Release(ctx))
		p.Resume()
		lock := ltAwait(t, done)
		v, _ := ltGetKey(t, b, l.LockKey("reconnect"))
		assert.True(t, strings.HasSuffix(v, ":"+lock.Token().String()))
		assert.Greater(t, lock.Token(), holder.Token())
		require.NoError(t, lock.Release(ctx))
		ltNoGoroutinesLeft(t)
	})
}

// Under steady contention from two Lockers of three goroutines each, every
// goroutine gets the lock, no wait is long, and each grant's token is
// above the one before.
func TestWaitsAreBoundedUnderContention(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := ltCtx(t)
		lockers := []*fencedlock.Locker{ltLocker(b), ltLocker(b)}
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
						lock, err := l.Acquire(ctx, "busy", ltLongTTL)
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
		ltNoGoroutinesLeft(t)
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
	ctx := ltCtx(t)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr}})
	t.Cleanup(func() { client.Close() })
	holders, waiters := fencedlock.New(client), fencedlock.New(client)
	for _, resource := range []string{"a", "b", "c"} {
		holder, err := holders.TryAcquire(ctx, resource, ltLongTTL)
		require.NoError(t, err)
		done := ltWaitFor(ctx, waiters, resource, ltLongTTL, ltHourDelay)
		ltEventually(t, func() bool { return ltChannelSubscribers(t, client, waiters, resource) == 1 },
			"the waiter to subscribe to "+ltChannel(waiters, resource))
		released := time.Now()
		require.NoError(t, holder.Release(ctx))
		lock := ltAwait(t, done)
		assert.Less(t, time.Since(released), 100*time.Millisecond)
		assert.Greater(t, lock.Token(), holder.Token())
		require.NoError(t, lock.Release(ctx))
	}
	ltNoGoroutinesLeft(t)
}

// A waiter whose attempt gets an error reply (here OOM) leaves the Redis
// queue as it returns the error: the release does not hand the lock to it.
func TestWaiterLeavesTheQueueOnAnErrorReply(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := ltCtx(t)
	l := fencedlock.New(c)
	holder, err := l.TryAcquire(ctx, "oom", ltLongTTL)
	require.NoError(t, err)
	queue, _ := ltQueueKeys(l, "oom")
	done := ltWaitFor(ctx, l, "oom", ltLongTTL, fencedlock.WithRetryDelay(20*time.Millisecond, 20*time.Millisecond))
	ltEventually(t, func() bool { return c.ZCard(ctx, queue).Val() == 1 }, "the waiter to queue")
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
		ctx := ltCtx(t)
		first, second := ltLocker(b), ltLocker(b)
		ltTryAcquire(t, ctx, ltLocker(b), "crashed", ltLongTTL)
		fctx, cancel := context.WithCancel(ctx)
		defer cancel()
		firstDone := ltWaitFor(fctx, first, "crashed", ltLongTTL, ltHourDelay)
		ltEventually(t, func() bool { return ltQueued(t, b, first, "crashed") == 1 }, "the first waiter to queue")
		secondDone := ltWaitFor(ctx, second, "crashed", ltLongTTL, ltHourDelay)
		ltEventually(t, func() bool {
			return ltQueued(t, b, first, "crashed") == 2 && ltSubscribers(t, b, first, "crashed") == 2
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
		lock := ltAwait(t, secondDone)
		assert.Less(t, time.Since(left), 100*time.Millisecond, "the second waiter was not handed the free lock")
		require.NoError(t, lock.Release(ctx))
		ltNoGoroutinesLeft(t)
	})
}

// A subscription that takes long to connect holds up no other call of
// the Locker: subscribe and unsubscribe commands are not sent under the
// Locker's lock.
func TestSlowSubscriptionDoesNotStallTheLocker(t *testing.T) {
	b := redistest.Real(t)
	ctx := ltCtx(t)
	var slow atomic.Bool
	c := redis.NewClient(&redis.Options{
		Addr: b.Client.Options().Addr,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if slow.Load() {
				time.Sleep(2 * time.Second) // a connect that takes long
			}
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	})
	t.Cleanup(func() { c.Close() })
	l := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix))
	holders := ltLocker(b)
	// Connections for the commands, made before connecting gets slow.
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); c.Ping(ctx) }()
	}
	wg.Wait()
	for _, r := range []string{"r1", "r2"} {
		h := ltTryAcquire(t, ctx, holders, r, ltLongTTL)
		defer h.Release(ctx)
	}
	slow.Store(true)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	first := ltWaitFor(wctx, l, "r1", ltLongTTL)
	time.Sleep(100 * time.Millisecond) // r1's subscription is connecting
	second := ltWaitFor(wctx, l, "r2", ltLongTTL)
	time.Sleep(100 * time.Millisecond) // r2's waits for its turn
	start := time.Now()
	free, err := l.Acquire(ctx, "free", ltLongTTL)
	require.NoError(t, err)
	require.NoError(t, free.Release(ctx))
	assert.Less(t, time.Since(start), 500*time.Millisecond, "a free resource waited for another resource's subscription")
	cancel()
	<-first
	<-second
	// The subscriber's goroutine finishes its slow connect after the
	// waiters have gone, then closes the connection.
	ltNoGoroutinesLeftWithin(t, 5*time.Second)
}

// On a cluster of three masters, a waiter's sharded subscription that
// breaks is made again on the node serving its slot, and the waiter
// hears the grants published after that. (On servers without sharded
// pub/sub the subscription is classic, and a message published on any
// node reaches it.)
func TestClusterWaitersHearGrantsAfterReconnect(t *testing.T) {
	servers := redistest.StartClusterN(t, 3)
	ctx := ltCtx(t)
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr
	}
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { client.Close() })
	holders, waiters := fencedlock.New(client), fencedlock.New(client)
	for i := 0; i < 6; i++ {
		resource := fmt.Sprintf("res-%d", i)
		channel := ltChannel(waiters, resource)
		holder, err := holders.TryAcquire(ctx, resource, ltLongTTL)
		require.NoError(t, err)
		done := ltWaitFor(ctx, waiters, resource, ltLongTTL, ltHourDelay)
		subscribed := func() bool { return ltChannelSubscribers(t, client, waiters, resource) == 1 }
		ltEventually(t, subscribed, "the waiter to subscribe to "+channel)
		// Break every subscription connection, as a network blip would.
		require.NoError(t, client.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return c.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err()
		}))
		ltEventually(t, subscribed, "the subscription to "+channel+" to be made again")
		time.Sleep(50 * time.Millisecond)
		released := time.Now()
		require.NoError(t, holder.Release(ctx))
		lock := ltAwait(t, done)
		assert.Less(t, time.Since(released), 200*time.Millisecond, "%s: the grant was not heard", resource)
		require.NoError(t, lock.Release(ctx))
	}
	ltNoGoroutinesLeft(t)
}

// A holder that is not sure it still holds the lock (its TTL ran out by
// the local clock) hands nothing over: a late Release must not let the
// next waiter write with a token Redis never granted while another owner
// holds the lock.
func TestLateReleaseHandsNothingOver(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := ltCtx(t)
		l, other := ltLocker(b), ltLocker(b)
		store := ltRedisStore(b)
		const ttl = 100 * time.Millisecond
		stale := ltTryAcquire(t, ctx, l, "late", ttl)
		time.Sleep(ttl + 20*time.Millisecond)
		b.FastForward(t, ttl+20*time.Millisecond) // miniredis expires keys only when told
		owner := ltTryAcquire(t, ctx, other, "late", ltLongTTL)
		require.NoError(t, store.Put(ctx, "late", owner.Token(), []byte("owner")))
		done := ltWaitFor(ctx, l, "late", ltLongTTL, ltHourDelay)
		ltAwaitQueued(t, b, l, "late")

		assert.ErrorIs(t, stale.Release(ctx), fencedlock.ErrLockLost)
		ltRequireStillWaiting(t, done)
		require.NoError(t, store.Put(ctx, "late", owner.Token(), []byte("owner again")), "the owner's write was refused")
		require.NoError(t, owner.Release(ctx))
		lock := ltAwait(t, done)
		assert.Greater(t, lock.Token(), owner.Token())
		require.NoError(t, lock.Release(ctx))
		ltNoGoroutinesLeft(t)
	})
}

// A Release whose context is done hands nothing over and changes
// nothing; a later Release hands the lock on.
func TestReleaseWithDoneContextHandsNothingOver(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := ltCtx(t)
		l := ltLocker(b)
		holder := ltTryAcquire(t, ctx, l, "done-ctx", ltLongTTL)
		done := ltWaitFor(ctx, l, "done-ctx", ltLongTTL, ltHourDelay)
		ltAwaitQueued(t, b, l, "done-ctx")
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		assert.ErrorIs(t, holder.Release(cancelled), context.Canceled)
		ltRequireStillWaiting(t, done)
		assert.Equal(t, int64(1), ltQueued(t, b, l, "done-ctx"))
		require.NoError(t, holder.Release(ctx))
		lock := ltAwait(t, done)
		assert.Greater(t, lock.Token(), holder.Token())
		require.NoError(t, lock.Release(ctx))
		ltNoGoroutinesLeft(t)
	})
}
