package fencedlock_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
	"github.com/fencedlock/fencedlock/observe"
)

// These tests move a resource's hash slot between the two masters of a
// real Redis Cluster while a waiter waits for it, as a reshard does: for
// splitFor, some of the resource's keys are on the new owner and some on
// the old, and the scripts, which name several of them, are answered with
// TRYAGAIN.

// splitFor is how long the tests leave a slot split between two nodes.
const splitFor = 2500 * time.Millisecond

// reshard is a cluster of two masters and the slot of a resource's keys,
// which the test moves from its owner, from, to the other master, to.
type reshard struct {
	servers  []*redistest.Server
	slot     int
	from, to *redistest.Server
	admin    *redis.ClusterClient // the test's own client
}

func newReshard(t *testing.T, resource string) *reshard {
	t.Helper()
	rs := &reshard{servers: redistest.StartClusterN(t, 2)}
	rs.admin = rs.client(t)
	rs.slot = int(fencedlock.HashSlot(fencedlock.New(rs.admin).LockKey(resource)))
	rs.from = redistest.SlotOwner(t, rs.servers, rs.slot)
	rs.to = rs.servers[0]
	if rs.to == rs.from {
		rs.to = rs.servers[1]
	}
	return rs
}

// client returns a new client of the cluster with hooks, closed when t's
// test ends.
func (rs *reshard) client(t *testing.T, hooks ...redis.Hook) *redis.ClusterClient {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{rs.servers[0].Addr, rs.servers[1].Addr}})
	for _, h := range hooks {
		c.AddHook(h)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// queued returns the entries of resource's Redis queue and of the hash
// of their deadlines.
func (rs *reshard) queued(t *testing.T, l *fencedlock.Locker, resource string) (entries, deadlines []string) {
	t.Helper()
	ctx := context.Background()
	queue, dl := queueKeys(l, resource)
	entries, err := rs.admin.ZRange(ctx, queue, 0, -1).Result()
	require.NoError(t, err)
	deadlines, err = rs.admin.HKeys(ctx, dl).Result()
	require.NoError(t, err)
	return entries, deadlines
}

// awaitWaiting waits until l's one waiter for resource is queued in
// Redis, has heard its refusal, and its Locker is subscribed.
func (rs *reshard) awaitWaiting(t *testing.T, l *fencedlock.Locker, resource string) {
	t.Helper()
	waitUntil(t, func() bool {
		entries, _ := rs.queued(t, l, resource)
		return len(entries) == 1 && l.WaiterRefused(resource) && channelSubscribers(t, rs.admin, l, resource) == 1
	}, "the waiter to queue and subscribe")
}

// scriptLog is a client hook that records the outcome of each script
// the client runs (NOSCRIPT replies, which the library answers with the
// script itself, aside).
type scriptLog struct {
	mu    sync.Mutex
	calls []scriptCall
}

type scriptCall struct {
	at      time.Time // when the reply came
	release bool      // the release script (it names the grants channel), not the acquire script
	err     error
}

func (h *scriptLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *scriptLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if name := strings.ToLower(cmd.Name()); (name == "eval" || name == "evalsha") && !redis.HasErrorPrefix(err, "NOSCRIPT") {
			release := false
			for _, a := range cmd.Args() {
				if s, ok := a.(string); ok && strings.HasSuffix(s, ":grants:") {
					release = true
				}
			}
			h.mu.Lock()
			h.calls = append(h.calls, scriptCall{time.Now(), release, err})
			h.mu.Unlock()
		}
		return err
	}
}

// count returns how many recorded calls after since satisfy match.
func (h *scriptLog) count(since time.Time, match func(scriptCall) bool) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, c := range h.calls {
		if c.at.After(since) && match(c) {
			n++
		}
	}
	return n
}

// first returns when the first recorded call after since that satisfies
// match returned, and whether there was one.
func (h *scriptLog) first(since time.Time, match func(scriptCall) bool) (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.calls {
		if c.at.After(since) && match(c) {
			return c.at, true
		}
	}
	return time.Time{}, false
}

func tryAgain(c scriptCall) bool { return !c.release && redis.HasErrorPrefix(c.err, "TRYAGAIN") }

func answeredAcquire(c scriptCall) bool { return !c.release && c.err == nil }

func answeredRelease(c scriptCall) bool { return c.release && c.err == nil }

// handOvers is an Observer that records the tokens of the hand-overs of
// its Locker's releases.
type handOvers struct {
	mu     sync.Mutex
	tokens []fencedlock.Token
}

func (h *handOvers) Observe(ctx context.Context, e observe.Event) context.Context {
	if e.Kind == observe.HandOver {
		h.mu.Lock()
		h.tokens = append(h.tokens, fencedlock.Token(e.Token))
		h.mu.Unlock()
	}
	return ctx
}

func (h *handOvers) list() []fencedlock.Token {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]fencedlock.Token(nil), h.tokens...)
}

// split begins moving rs's slot and moves half of its keys, which are the
// resource's lock, counter and queue keys.
func (rs *reshard) split(t *testing.T) *redistest.Migration {
	t.Helper()
	m := redistest.BeginMigration(t, rs.servers, rs.slot, rs.to)
	n := redistest.KeysInSlot(t, rs.from, rs.slot)
	require.GreaterOrEqual(t, n, int64(2), "the slot holds too few keys to split")
	moved := m.MoveKeys(t, int(n/2))
	t.Logf("%v: split, %d of %d keys moved: %v", m, len(moved), n, moved)
	return m
}

// A waiter rides out a reshard of its resource's slot: while the slot is
// split its attempts are answered with TRYAGAIN and it keeps waiting;
// once the slot has moved, it queues on the new owner, and the holder's
// release there hands it the lock, which it learns of at once.
func TestAcquireRidesOutAReshard(t *testing.T) {
	rs := newReshard(t, "r")
	ctx := testCtx(t)
	seen := &handOvers{}
	holders := fencedlock.New(rs.client(t), fencedlock.WithObserver(seen))
	log := &scriptLog{}
	waiters := fencedlock.New(rs.client(t, log))
	holder := mustTryAcquire(t, ctx, holders, "r", longTTL)
	done := acquireAsync(ctx, waiters, "r", 20*time.Second)
	rs.awaitWaiting(t, waiters, "r")

	m := rs.split(t)
	split := time.Now()
	waitUntil(t, func() bool { return log.count(split, tryAgain) > 0 }, "an attempt of the waiter to get TRYAGAIN")
	select {
	case r := <-done:
		t.Fatalf("Acquire returned while the slot was split: %v, %v", r.lock, r.err)
	case <-time.After(time.Until(split.Add(splitFor))):
	}
	m.Finish(t)
	finished := time.Now()
	tries := log.count(split, tryAgain)
	t.Logf("the waiter's attempts got TRYAGAIN %d times in %v", tries, finished.Sub(split).Round(time.Millisecond))
	assert.GreaterOrEqual(t, tries, 2, "the waiter went on trying while the slot was split")

	// The waiter's place is renewed on the new owner by its next attempt.
	waitUntil(t, func() bool { _, ok := log.first(finished, answeredAcquire); return ok }, "the waiter to ask the new owner")
	at, _ := log.first(finished, answeredAcquire)
	t.Logf("the waiter's first answered attempt came %v after the slot moved", at.Sub(finished).Round(time.Millisecond))
	requireStillWaiting(t, done)

	released := time.Now()
	require.NoError(t, holder.Release(ctx))
	var w *fencedlock.Lock
	select {
	case r := <-done:
		require.NoError(t, r.err)
		w = r.lock
		took := r.at.Sub(released)
		t.Logf("the waiter got the lock %v after the release", took.Round(time.Microsecond))
		assert.Less(t, took, 100*time.Millisecond, "the waiter learns of the hand-over at once")
	case <-time.After(3 * time.Second):
		t.Fatal("the waiter did not get the lock after the release")
	}
	assert.Equal(t, []fencedlock.Token{w.Token()}, seen.list(), "the release handed the lock to the waiter")
	assert.Greater(t, w.Token(), holder.Token())
	assert.Equal(t, rs.to, redistest.SlotOwner(t, rs.servers, rs.slot))
	require.NoError(t, w.Release(ctx))
	requireNoGoroutinesLeftWithin(t, 5*time.Second)
}

// A waiter whose ctx ends while its resource's slot is split returns at
// once, and leaves the queue once the slot has moved: the holder's
// release hands the lock to nobody, a third Locker takes it at once, and
// the queue holds no entry of the waiter.
func TestAcquireGivingUpInAReshardLeavesNoPlace(t *testing.T) {
	rs := newReshard(t, "r")
	ctx := testCtx(t)
	seen := &handOvers{}
	holders := fencedlock.New(rs.client(t), fencedlock.WithObserver(seen))
	log := &scriptLog{}
	waiters := fencedlock.New(rs.client(t, log))
	holder := mustTryAcquire(t, ctx, holders, "r", longTTL)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := acquireAsync(wctx, waiters, "r", 20*time.Second)
	rs.awaitWaiting(t, waiters, "r")

	m := rs.split(t)
	split := time.Now()
	waitUntil(t, func() bool { return log.count(split, tryAgain) > 0 }, "an attempt of the waiter to get TRYAGAIN")
	cancelled := time.Now()
	cancel()
	select {
	case r := <-done:
		require.Error(t, noLock(r.lock, r.err))
		t.Logf("Acquire returned %v after its ctx ended: %v", r.at.Sub(cancelled).Round(time.Microsecond), r.err)
		assert.ErrorIs(t, r.err, context.Canceled)
		assert.Less(t, r.at.Sub(cancelled), 250*time.Millisecond, "Acquire returns when its ctx ends")
	case <-time.After(3 * time.Second):
		t.Fatal("Acquire did not return after its ctx ended")
	}
	time.Sleep(time.Until(split.Add(splitFor)))
	m.Finish(t)
	finished := time.Now()

	// The waiter's cleanup, which goes on in the background, leaves the
	// queue on the new owner.
	if pollUntil(4*time.Second, func() bool { _, ok := log.first(finished, answeredRelease); return ok }) {
		at, _ := log.first(finished, answeredRelease)
		t.Logf("the waiter left the queue %v after the slot moved", at.Sub(finished).Round(time.Millisecond))
	} else {
		t.Errorf("the waiter did not leave the queue after the slot moved")
	}
	entries, deadlines := rs.queued(t, waiters, "r")
	assert.Empty(t, entries, "the queue holds an entry of the waiter that gave up")
	assert.Empty(t, deadlines, "the queue's deadlines hold an entry of the waiter that gave up")

	require.NoError(t, holder.Release(ctx))
	assert.Empty(t, seen.list(), "the release handed the lock to a waiter")
	third := fencedlock.New(rs.client(t))
	lock, err := third.TryAcquire(ctx, "r", longTTL)
	require.NoError(t, err, "the lock is free once its holder released it")
	require.NoError(t, lock.Release(ctx))
	requireNoGoroutinesLeftWithin(t, 5*time.Second)
}

// A slot move drops the sharded subscription of a waiter on the slot's old
// owner (Redis sends sunsubscribe): the waiter subscribes again on the
// new owner at once, and the holder's release wakes it within
// milliseconds, its fallback timer set to an hour.
func TestReshardMovesTheWaitersSubscription(t *testing.T) {
	rs := newReshard(t, "r")
	ctx := testCtx(t)
	sharded, err := redistest.ShardedPubSub(ctx, rs.admin)
	require.NoError(t, err)
	if !sharded {
		t.Skip("the server has no sharded pub/sub: a slot move drops no subscription of classic pub/sub")
	}
	holders := fencedlock.New(rs.client(t))
	waiters := fencedlock.New(rs.client(t))
	holder := mustTryAcquire(t, ctx, holders, "r", longTTL)
	done := acquireAsync(ctx, waiters, "r", longTTL, hourRetryDelay)
	rs.awaitWaiting(t, waiters, "r")
	channel := grantsChannel(waiters, "r")
	from, to := rs.from.Client(t), rs.to.Client(t)
	subscribers := func(c *redis.Client) int64 {
		n, err := redistest.Subscribers(ctx, c, channel)
		require.NoError(t, err)
		return n
	}
	require.Equal(t, int64(1), subscribers(from), "the waiter is subscribed on the slot's owner")

	redistest.MigrateSlot(t, rs.servers, rs.slot, rs.to)
	moved := time.Now()
	if pollUntil(3*time.Second, func() bool { return subscribers(to) == 1 }) {
		t.Logf("the waiter was subscribed on the new owner %v after the slot moved", time.Since(moved).Round(time.Millisecond))
	} else {
		t.Errorf("the waiter is not subscribed on the new owner 3s after the slot moved")
	}
	assert.Equal(t, int64(0), subscribers(from), "the old owner dropped the subscription")

	released := time.Now()
	require.NoError(t, holder.Release(ctx))
	select {
	case r := <-done:
		require.NoError(t, r.err)
		took := r.at.Sub(released)
		t.Logf("the waiter got the lock %v after the release", took.Round(time.Microsecond))
		assert.Less(t, took, 100*time.Millisecond, "the release's message woke the waiter")
		require.NoError(t, r.lock.Release(ctx))
	case <-time.After(3 * time.Second):
		t.Fatal("the waiter did not get the lock within 3s of the release (its timer is set to an hour)")
	}
	requireNoGoroutinesLeftWithin(t, 5*time.Second)
}

// A waiter that gave up while its resource's slot was split may yet be
// handed the lock: its place in the queue lasts until its deadline, and
// the slot may move, and the holder release, before the waiter's cleanup
// tries again. Here that happens late in the place's life, right after
// one of the cleanup's tries, which pauses up to a second between them:
// the cleanup passes the lock on once the place has lapsed, so that a
// third Locker takes it within a second, not after the gone waiter's TTL.
func TestReshardHandOverToAWaiterThatGaveUpIsPassedOn(t *testing.T) {
	rs := newReshard(t, "r")
	ctx := testCtx(t)
	seen := &handOvers{}
	holders := fencedlock.New(rs.client(t), fencedlock.WithObserver(seen))
	log := &scriptLog{}
	waiters := fencedlock.New(rs.client(t, log))
	holder := mustTryAcquire(t, ctx, holders, "r", longTTL)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The waiter renews its place every 800 ms, and it lasts 2.4 s.
	const life = 2400 * time.Millisecond
	done := acquireAsync(wctx, waiters, "r", 20*time.Second, fencedlock.WithRetryDelay(2*time.Millisecond, 800*time.Millisecond))
	rs.awaitWaiting(t, waiters, "r")

	// Right after a renewal, the slot splits and the waiter gives up:
	// its place lasts until renewed+life.
	since := time.Now()
	waitUntil(t, func() bool { _, ok := log.first(since, answeredAcquire); return ok }, "the waiter to renew its place")
	renewed, _ := log.first(since, answeredAcquire)
	m := rs.split(t)
	gaveUp := time.Now()
	cancel()
	r := <-done
	require.Error(t, noLock(r.lock, r.err))

	// The slot moves right after a try of the cleanup made a second or
	// less before the place lapses (from then on the cleanup pauses a
	// second between tries), or 250 ms before the place lapses if none
	// came, and the holder releases at once, while the place lasts.
	tried := func(c scriptCall) bool { return c.release && redis.HasErrorPrefix(c.err, "TRYAGAIN") }
	pollUntil(time.Until(renewed.Add(life-250*time.Millisecond)), func() bool {
		return log.count(gaveUp.Add(life-time.Second), tried) > 0
	})
	m.Finish(t)
	released := time.Now()
	require.NoError(t, holder.Release(ctx))
	late := time.Since(renewed)
	t.Logf("the slot moved and the holder released %v after the waiter's last renewal (its place lasts %v)", late.Round(time.Millisecond), life)
	require.Less(t, late, life-100*time.Millisecond, "too late to test: the place had lapsed")
	require.Len(t, seen.list(), 1, "the release handed the lock to the waiter that gave up")

	third := fencedlock.New(rs.client(t))
	var lock *fencedlock.Lock
	free := pollUntil(3*time.Second, func() bool {
		var err error
		lock, err = third.TryAcquire(ctx, "r", longTTL)
		return err == nil
	})
	require.True(t, free, "the lock stays with the waiter that gave up")
	t.Logf("a third Locker took the lock %v after the release", time.Since(released).Round(time.Millisecond))
	assert.Less(t, time.Since(released), 1500*time.Millisecond)
	entries, deadlines := rs.queued(t, waiters, "r")
	assert.Empty(t, entries, "the queue holds an entry of the waiter that gave up")
	assert.Empty(t, deadlines, "the queue's deadlines hold an entry of the waiter that gave up")
	require.NoError(t, lock.Release(ctx))
	requireNoGoroutinesLeftWithin(t, 5*time.Second)
}
