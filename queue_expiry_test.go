package fencedlock_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// queueSnapshot reads, in one script so that no time passes between the
// reads, the server clock in milliseconds, the deadline of every place in
// a queue and the PTTL of the queue's two keys.
var queueSnapshot = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return {now, redis.call('HGETALL', KEYS[2]), redis.call('PTTL', KEYS[1]), redis.call('PTTL', KEYS[2])}
`)

// queueState is what queueSnapshot read: how long each place has left,
// the longest of those, and the PTTL of the queue's keys.
type queueState struct {
	left    map[string]time.Duration
	longest time.Duration
	pttl    [2]time.Duration
}

func snapshotQueue(t *testing.T, c *redis.Client, queue, deadlines string) queueState {
	t.Helper()
	r, err := queueSnapshot.Run(context.Background(), c, []string{queue, deadlines}).Slice()
	require.NoError(t, err)
	now := r[0].(int64)
	st := queueState{left: map[string]time.Duration{}}
	fields := r[1].([]any)
	for i := 0; i+1 < len(fields); i += 2 {
		ms, err := strconv.ParseInt(fields[i+1].(string), 10, 64)
		require.NoError(t, err)
		left := time.Duration(ms-now) * time.Millisecond
		st.left[fields[i].(string)] = left
		st.longest = max(st.longest, left)
	}
	st.pttl = [2]time.Duration{time.Duration(r[2].(int64)) * time.Millisecond, time.Duration(r[3].(int64)) * time.Millisecond}
	return st
}

// commandCalls returns how many times the server behind c has run each
// of cmds (INFO commandstats: those scripts run count too).
func commandCalls(t *testing.T, c *redis.Client, cmds ...string) []int {
	t.Helper()
	stats, err := redistest.CommandStats(context.Background(), c)
	require.NoError(t, err)
	counts := make([]int, len(cmds))
	for i, cmd := range cmds {
		counts[i] = int(stats[cmd].Calls) // absent for a command never run: 0
	}
	return counts
}

// The queue's two keys outlive every place in them, a lone waiter's
// renewals extend them only now and then, and a queue whose waiters died
// is gone from Redis at most twice the place's life after their last
// attempt.
func TestQueueKeysLiveAsLongAsTheirPlaces(t *testing.T) {
	// A server of its own: its command counts are this test's.
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := testCtx(t)
	p := redistest.NewProxy(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { c.Close() })
	dying, other, third := fencedlock.New(c), fencedlock.New(admin), fencedlock.New(admin)
	const ttl = 600 * time.Millisecond // a place of 600ms, renewed every 200ms
	queued := func(l *fencedlock.Locker, resource string) func() int64 {
		queue, _ := queueKeys(l, resource)
		return func() int64 {
			n, err := admin.ZCard(ctx, queue).Result()
			require.NoError(t, err)
			return n
		}
	}

	// A lone waiter renews its place: the keys outlive it by at most its
	// life, and are extended about once per life, not at every renewal.
	const res = "queue-expiry"
	holder := mustTryAcquire(t, ctx, other, res, longTTL)
	queue, deadlines := queueKeys(other, res)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := acquireAsync(wctx, dying, res, ttl)
	inQueue := queued(other, res)
	waitUntil(t, func() bool { return inQueue() == 1 }, "the waiter to queue")
	require.NoError(t, admin.ConfigResetStat(ctx).Err())
	const snapshots = 12
	for i := 0; i < snapshots; i++ {
		st := snapshotQueue(t, admin, queue, deadlines)
		require.Len(t, st.left, 1)
		for k, pttl := range st.pttl {
			assert.GreaterOrEqual(t, pttl, st.longest-time.Millisecond, "key %d of the queue expires before the place", k)
			assert.LessOrEqual(t, pttl, 2*ttl, "key %d of the queue lives longer than twice the place's life", k)
		}
		// Redis before 7.0 reads the clock at each command of a script:
		// the two PEXPIREs may be a moment apart.
		assert.InDelta(t, st.pttl[0], st.pttl[1], float64(3*time.Millisecond), "the queue's keys expire apart")
		time.Sleep(ttl / 6)
	}
	calls := commandCalls(t, admin, "pexpire", "hset", "pttl")
	t.Logf("%d renewals of the place (HSET), %d PEXPIRE, %d PTTL", calls[1], calls[0], calls[2])
	require.Greater(t, calls[1], 2, "the waiter did not renew its place")
	assert.Less(t, calls[0], 2*calls[1], "the queue's keys were extended at every renewal (two PEXPIREs each)")
	// Each renewal is a refused attempt, which reads the lock's PTTL and
	// the order's (and the snapshots read two each): the deadlines' is
	// not read.
	assert.LessOrEqual(t, calls[2], 2*calls[1]+2*snapshots, "a renewal read more than the lock's and the order's expiry")

	// A long-lived place and a short one that renews: the keys outlive
	// the long one all the while.
	const mixed = "queue-expiry-mixed"
	mixedHolder := mustTryAcquire(t, ctx, other, mixed, longTTL)
	mqueue, mdeadlines := queueKeys(other, mixed)
	long := acquireAsync(wctx, third, mixed, 20*time.Second)
	inMixed := queued(other, mixed)
	waitUntil(t, func() bool { return inMixed() == 1 }, "the long waiter to queue")
	short := acquireAsync(wctx, dying, mixed, ttl)
	waitUntil(t, func() bool { return inMixed() == 2 }, "the short waiter to queue")
	for i := 0; i < 8; i++ {
		st := snapshotQueue(t, admin, mqueue, mdeadlines)
		require.Len(t, st.left, 2)
		for k, pttl := range st.pttl {
			assert.GreaterOrEqual(t, pttl, st.longest-time.Millisecond, "key %d of the queue expires before the longest place", k)
		}
		time.Sleep(ttl / 4)
	}

	// The first waiter's process stops: nothing renews its place any
	// more. (The lock stays held: a release would hand it to the waiter
	// and empty the queue.)
	p.Pause()
	stopped := time.Now()
	gone := func() bool {
		n, err := admin.Exists(ctx, queue, deadlines).Result()
		require.NoError(t, err)
		return n == 0
	}
	waitUntil(t, gone, "the queue's keys to expire")
	took := time.Since(stopped)
	t.Logf("the queue's keys were gone %v after its waiter stopped", took.Round(time.Millisecond))
	assert.Less(t, took, 2*ttl+500*time.Millisecond)

	cancel()
	p.Resume()
	for _, ch := range []<-chan acquireResult{done, long, short} {
		if r := <-ch; r.err == nil {
			require.NoError(t, r.lock.Release(ctx))
		}
	}
	require.NoError(t, holder.Release(ctx))
	require.NoError(t, mixedHolder.Release(ctx))
}

// The queue's deadlines deleted alone (by hand, or evicted) while a
// waiter queues: its next attempt, which makes the key afresh, gives it
// the order's expiry, so that it does not outlive the queue without one.
// (Another waiter's attempt would find the place without a deadline dead,
// and remove it: the waiter's own attempt is the one that makes the
// deadlines again with the order still there.)
func TestQueueDeadlinesDeletedAloneGetTheOrdersExpiry(t *testing.T) {
	be := redistest.Real(t)
	ctx := testCtx(t)
	admin := be.Client
	holder, waiter := newLocker(be), newLocker(be)
	const res = "deadlines-deleted"
	lock := mustTryAcquire(t, ctx, holder, res, longTTL)
	queue, deadlines := queueKeys(holder, res)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A place of 1.5 s, renewed every 0.5 s: the order lives 3 s from
	// each renewal that finds it with less than 1.5 s left, so every
	// renewal in between finds it with more than the place's life.
	done := acquireAsync(wctx, waiter, res, 1500*time.Millisecond)
	waitUntil(t, func() bool { return admin.ZCard(ctx, queue).Val() == 1 }, "the waiter to queue")
	require.NoError(t, admin.Del(ctx, deadlines).Err())
	waitUntil(t, func() bool { return admin.HLen(ctx, deadlines).Val() == 1 }, "the waiter's next attempt")
	st := snapshotQueue(t, admin, queue, deadlines)
	assert.Equal(t, int64(1), admin.ZCard(ctx, queue).Val(), "the waiter's place")
	assert.Positive(t, st.pttl[1], "the deadlines made again have no expiry")
	assert.InDelta(t, st.pttl[0], st.pttl[1], float64(3*time.Millisecond), "the deadlines do not expire with the order")

	cancel()
	if r := <-done; r.err == nil {
		require.NoError(t, r.lock.Release(ctx))
	}
	require.NoError(t, lock.Release(ctx))
}

// Waiters whose processes died leave their places in the queue. While
// the lock stays held no release walks the queue, so the refused attempts
// of the waiters still alive remove the dead: those ahead of them and
// those behind, a few each attempt, and never a live one.
func TestQueueDeadPlacesGoWhileTheLockIsHeld(t *testing.T) {
	be := redistest.Real(t)
	ctx := testCtx(t)
	admin := be.Client
	holder, waiter := newLocker(be), newLocker(be)
	const res = "dead-places"
	lock := mustTryAcquire(t, ctx, holder, res, longTTL)
	queue, deadlines := queueKeys(holder, res)
	// 20 places of waiters long dead, 10 ahead of the live waiter to come
	// and 10 behind it (arrivals are server microseconds: 1 is the
	// earliest, 1<<52 later than any), and one entry that is no entry.
	var dead []string
	for i := 0; i < 20; i++ {
		entry := fmt.Sprintf("%032x:1000", i+1)
		score := float64(i + 1)
		if i >= 10 {
			score = float64(1<<52 + i)
		}
		require.NoError(t, admin.ZAdd(ctx, queue, redis.Z{Score: score, Member: entry}).Err())
		require.NoError(t, admin.HSet(ctx, deadlines, entry, 1).Err())
		dead = append(dead, entry)
	}
	require.NoError(t, admin.ZAdd(ctx, queue, redis.Z{Score: 0, Member: "not an entry"}).Err())
	require.NoError(t, admin.HSet(ctx, deadlines, "not an entry", 1<<50).Err())
	require.NoError(t, admin.PExpire(ctx, queue, time.Minute).Err())
	require.NoError(t, admin.PExpire(ctx, deadlines, time.Minute).Err())

	// Two live waiters with a short TTL renew their places every 300 ms;
	// a place lasts 900 ms, room for a stall on busy cores.
	// Their places must stay as they are: a place removed and taken again
	// would have a later arrival.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	isDead := map[string]bool{"not an entry": true}
	for _, e := range dead {
		isDead[e] = true
	}
	arrivals := map[string]float64{}
	live := func() {
		for _, z := range admin.ZRangeWithScores(ctx, queue, 0, -1).Val() {
			e := z.Member.(string)
			if _, seen := arrivals[e]; !seen && !isDead[e] {
				arrivals[e] = z.Score
			}
		}
	}
	done := acquireAsync(wctx, waiter, res, 900*time.Millisecond)
	waitUntil(t, func() bool { live(); return len(arrivals) == 1 }, "the first live waiter to queue")
	second := acquireAsync(wctx, newLocker(be), res, 900*time.Millisecond)
	waitUntil(t, func() bool { live(); return len(arrivals) == 2 }, "the second live waiter to queue")
	waitUntil(t, func() bool { return admin.ZCard(ctx, queue).Val() == 2 }, "the dead places to go, and the live waiters' to stay")
	// Two more renewals each, with the dead gone.
	time.Sleep(700 * time.Millisecond)
	left := admin.ZRangeWithScores(ctx, queue, 0, -1).Val()
	require.Len(t, left, 2)
	for _, z := range left {
		e := z.Member.(string)
		assert.Equal(t, arrivals[e], z.Score, "the place of live waiter %s was taken again", e)
	}
	assert.Equal(t, int64(2), admin.HLen(ctx, deadlines).Val(), "the deadlines keep the dead")

	require.NoError(t, lock.Release(ctx))
	for _, ch := range []<-chan acquireResult{done, second} {
		r := <-ch
		require.NoError(t, r.err)
		require.NoError(t, r.lock.Release(ctx))
	}
}
