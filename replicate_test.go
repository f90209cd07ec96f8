package fencedlock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// rpPair is a master and a replica that replicates through a proxy, so
// that a test can slow or stall the replication stream.
type rpPair struct {
	master, replica *redis.Client
	link            *redistest.Proxy
}

// rpStart starts a master and a replica of it, in sync.
func rpStart(t *testing.T, ctx context.Context) rpPair {
	t.Helper()
	master := redistest.Start(t, "--repl-diskless-sync-delay", "0")
	replica := redistest.Start(t)
	mc, rc := master.Client(t), replica.Client(t)
	p := redistest.NewProxy(t, master.Addr)
	host, port, err := net.SplitHostPort(p.Addr())
	require.NoError(t, err)
	require.NoError(t, rc.Do(ctx, "REPLICAOF", host, port).Err())
	foWaitInSync(t, ctx, mc, rc)
	return rpPair{master: mc, replica: rc, link: p}
}

// rpWaitAcked waits until the master has heard from its replica that it
// has everything the master has sent (replicas say so every second).
func rpWaitAcked(t *testing.T, ctx context.Context, master *redis.Client) {
	t.Helper()
	waitUntil(t, func() bool {
		m, err := redistest.Info(ctx, master, "replication")
		require.NoError(t, err)
		return m["master_repl_offset"] != "" && strings.Contains(m["slave0"], ",offset="+m["master_repl_offset"]+",")
	}, "the replica's acknowledgement of the master's offset")
}

// rpRequireOnReplica checks, at once, that the replica holds lock's grant:
// its lock key with the lock's token, and the counter at that token.
func rpRequireOnReplica(t *testing.T, ctx context.Context, rc *redis.Client, l *fencedlock.Locker, lock *fencedlock.Lock) {
	t.Helper()
	owner, err := rc.Get(ctx, l.LockKey(lock.Resource())).Result()
	require.NoError(t, err, "the replica must hold the lock key when the acquire returns")
	require.Regexp(t, ":"+lock.Token().String()+"$", owner)
	counter, err := rc.Get(ctx, l.TokenKey(lock.Resource())).Result()
	require.NoError(t, err)
	require.Equal(t, lock.Token().String(), counter)
}

// With WithReplicas, an acquire returns only once a replica has the
// grant, on each way a grant can come: TryAcquire's own script, a waiter
// that a release of another Locker hands the lock to (the grant is made
// by the releaser's connection), and a waiter handed the lock by a release
// in its own Locker before Redis confirmed it. Replication is slowed by
// 100ms, so a replica read right after an acquire that did not wait would
// find nothing.
func TestWithReplicasWaitsForTheReplica(t *testing.T) {
	ctx := testCtx(t)
	rp := rpStart(t, ctx)
	rp.link.Delay(100 * time.Millisecond)
	// The waiter's client hands out its idle connections oldest first, so
	// the connection of the WAIT is seldom the one that sent the last
	// command: a WAIT that is not on the refresh's own connection would
	// wait for the wrong write.
	wc := redis.NewClient(&redis.Options{Addr: rp.master.Options().Addr, PoolFIFO: true, MinIdleConns: 4})
	t.Cleanup(func() { _ = wc.Close() })
	l := fencedlock.New(wc, fencedlock.WithReplicas(1, 5*time.Second))

	t.Run("TryAcquire", func(t *testing.T) {
		lock := mustTryAcquire(t, ctx, l, "try", longTTL)
		rpRequireOnReplica(t, ctx, rp.replica, l, lock)
		require.NoError(t, lock.Release(ctx))
	})

	for _, sameLocker := range []bool{false, true} {
		sameLocker := sameLocker
		name := "Acquire handed over by another Locker"
		// Another client too, as in another process: a WAIT on a
		// connection of the waiter's pool must not be answered for the
		// release's write by chance.
		hc := redis.NewClient(&redis.Options{Addr: rp.master.Options().Addr})
		t.Cleanup(func() { _ = hc.Close() })
		holderLocker := fencedlock.New(hc)
		if sameLocker {
			name = "Acquire handed over in its own Locker"
			holderLocker = l
		}
		t.Run(name, func(t *testing.T) {
			res := "handover-" + name
			holder := mustTryAcquire(t, ctx, holderLocker, res, longTTL)
			done := acquireAsync(ctx, l, res, longTTL, hourRetryDelay)
			if sameLocker {
				// A release in its own Locker hands it the lock: it waits
				// for it without asking Redis.
				waitUntil(t, func() bool { return l.WaiterHeldBack(res) }, "the waiter to wait for the release")
			} else {
				waitUntil(t, func() bool {
					return l.WaiterRefused(res) && channelSubscribers(t, rp.master, l, res) == 1
				}, "the waiter to queue and subscribe")
			}
			// The master knows that the replica has the waiter's own
			// writes before the grant: a WAIT for those alone would return
			// at once.
			rpWaitAcked(t, ctx, rp.master)
			require.NoError(t, holder.Release(ctx))
			lock := awaitAcquired(t, done)
			require.Greater(t, lock.Token(), holder.Token())
			rpRequireOnReplica(t, ctx, rp.replica, l, lock)
			require.NoError(t, lock.Release(ctx))
		})
	}
}

// A waiter handed the lock in its own Locker must not ask the replicas
// before Redis has made the hand-over: the release is held up on its way
// while the waiter already has the Lock, and the waiter's refresh, on
// another connection, would otherwise find the old holder's lock.
func TestWithReplicasWaitsForTheHandOver(t *testing.T) {
	ctx := testCtx(t)
	rp := rpStart(t, ctx)
	rp.link.Delay(100 * time.Millisecond)
	p := redistest.NewProxy(t, rp.master.Options().Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	l := fencedlock.New(c, fencedlock.WithReplicas(1, 5*time.Second))

	const res = "held-up"
	holder := mustTryAcquire(t, ctx, l, res, longTTL)
	done := acquireAsync(ctx, l, res, longTTL, hourRetryDelay)
	waitUntil(t, func() bool { return l.WaiterHeldBack(res) }, "the waiter to wait for the release")
	p.HoldRequests(1, 300*time.Millisecond)
	require.NoError(t, holder.Release(ctx))
	require.Equal(t, 1, p.Released(), "the release must have been held up")
	lock := awaitAcquired(t, done)
	require.Greater(t, lock.Token(), holder.Token())
	rpRequireOnReplica(t, ctx, rp.replica, l, lock)
	require.NoError(t, lock.Release(ctx))
}

// When the replica does not confirm in time, the acquire fails with
// ErrNotReplicated after the timeout, and the grant is released at once:
// another owner can take the lock, with a higher token.
func TestWithReplicasFailsWhenReplicasDoNotConfirm(t *testing.T) {
	ctx := testCtx(t)
	rp := rpStart(t, ctx)
	const timeout = 200 * time.Millisecond
	other := fencedlock.New(rp.master)

	// requireRefused checks the error of an acquire that did not get the
	// confirmations, and that it left the lock free.
	requireRefused := func(t *testing.T, err error, took time.Duration, res string) {
		t.Helper()
		require.ErrorIs(t, err, fencedlock.ErrNotReplicated)
		require.NotErrorIs(t, err, fencedlock.ErrNotAcquired)
		require.GreaterOrEqual(t, took, timeout, "the acquire must have waited for the replicas")
		n, err := rp.master.Exists(ctx, other.LockKey(res)).Result()
		require.NoError(t, err)
		require.Zero(t, n, "the unconfirmed grant must be released")
		lock := mustTryAcquire(t, ctx, other, res, longTTL)
		require.NoError(t, lock.Release(ctx))
	}

	t.Run("more replicas than there are", func(t *testing.T) {
		l := fencedlock.New(rp.master, fencedlock.WithReplicas(2, timeout))
		start := time.Now()
		lock, err := l.TryAcquire(ctx, "two", longTTL)
		require.Nil(t, lock)
		requireRefused(t, err, time.Since(start), "two")
	})

	t.Run("replication stalled", func(t *testing.T) {
		rp.link.Pause()
		defer rp.link.Resume()
		l := fencedlock.New(rp.master, fencedlock.WithReplicas(1, timeout))
		start := time.Now()
		lock, err := l.TryAcquire(ctx, "stalled", longTTL)
		require.Nil(t, lock)
		requireRefused(t, err, time.Since(start), "stalled")

		// A waiting Acquire is refused too, at once rather than at the
		// end of its context.
		start = time.Now()
		lock, err = l.Acquire(ctx, "stalled-wait", longTTL)
		require.Nil(t, lock)
		requireRefused(t, err, time.Since(start), "stalled-wait")
	})

	t.Run("confirmed again once replication resumes", func(t *testing.T) {
		foWaitInSync(t, ctx, rp.master, rp.replica)
		l := fencedlock.New(rp.master, fencedlock.WithReplicas(1, 5*time.Second))
		lock := mustTryAcquire(t, ctx, l, "resumed", longTTL)
		rpRequireOnReplica(t, ctx, rp.replica, l, lock)
		require.NoError(t, lock.Release(ctx))
	})
}

// A server without replicas never confirms: miniredis (whose WAIT answers
// 0), a real standalone server, and a cluster, where the WAIT goes to the
// master of the lock's slot. The grant is released each time.
func TestWithReplicasWithoutReplicas(t *testing.T) {
	check := func(t *testing.T, ctx context.Context, client redis.UniversalClient, prefix string) {
		t.Helper()
		l := fencedlock.New(client, fencedlock.WithPrefix(prefix), fencedlock.WithReplicas(1, 20*time.Millisecond))
		for _, res := range []string{"a", "b", "c"} {
			lock, err := l.TryAcquire(ctx, res, longTTL)
			require.Nil(t, lock)
			require.ErrorIs(t, err, fencedlock.ErrNotReplicated)
			require.Contains(t, err.Error(), "0 of 1 replicas")
			n, err := client.Exists(ctx, l.LockKey(res)).Result()
			require.NoError(t, err)
			require.Zero(t, n, "the unconfirmed grant of %q must be released", res)
		}
	}
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		check(t, testCtx(t), b.Client, b.Prefix)
	})
	t.Run("cluster", func(t *testing.T) {
		servers := redistest.StartClusterN(t, 3)
		addrs := make([]string, len(servers))
		for i, s := range servers {
			addrs[i] = s.Addr
		}
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		t.Cleanup(func() { _ = cc.Close() })
		check(t, testCtx(t), cc, "fencedlock")
	})
}

// WithReplicas refuses settings that cannot work: every call of the
// Locker returns ErrInvalidArgument and nothing is sent.
func TestWithReplicasInvalid(t *testing.T) {
	b := redistest.Mini(t)
	ctx := testCtx(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"one": b.Client.Options().Addr}})
	t.Cleanup(func() { _ = ring.Close() })
	for name, l := range map[string]*fencedlock.Locker{
		"no replicas":       fencedlock.New(b.Client, fencedlock.WithReplicas(0, time.Second)),
		"negative replicas": fencedlock.New(b.Client, fencedlock.WithReplicas(-1, time.Second)),
		"zero timeout":      fencedlock.New(b.Client, fencedlock.WithReplicas(1, 0)),
		"sub-ms timeout":    fencedlock.New(b.Client, fencedlock.WithReplicas(1, 999*time.Microsecond)),
		"a Ring":            fencedlock.New(ring, fencedlock.WithReplicas(1, time.Second)),
	} {
		lock, err := l.TryAcquire(ctx, "r", longTTL)
		require.Nil(t, lock, name)
		require.ErrorIs(t, err, fencedlock.ErrInvalidArgument, name)
		require.Contains(t, err.Error(), "WithReplicas", name)
		lock, err = l.Acquire(ctx, "r", longTTL)
		require.Nil(t, lock, name)
		require.ErrorIs(t, err, fencedlock.ErrInvalidArgument, name)
		require.True(t, errors.Is(l.Do(ctx, "r", longTTL, func(context.Context, *fencedlock.Lock) error { return nil }), fencedlock.ErrInvalidArgument), name)
	}
	require.Empty(t, b.Miniredis().Keys(), "nothing may be sent")
}

// rpHook runs before each command of a client whose name is cmd, while
// armed: it may fail the command by returning an error.
type rpHook struct {
	cmd    string
	armed  atomic.Bool
	before func(ctx context.Context, c redis.Cmder) error
}

func (h *rpHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *rpHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *rpHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, c redis.Cmder) error {
		if h.armed.Load() && strings.EqualFold(c.Name(), h.cmd) {
			if err := h.before(ctx, c); err != nil {
				c.SetErr(err)
				return err
			}
		}
		return next(ctx, c)
	}
}

// The failures of the wait itself: the grant gone before the refresh, a
// WAIT that fails, a TTL shorter than the replication takes, and a ctx
// that ends. Each time the acquire returns no Lock and the lock is free.
func TestWithReplicasFailures(t *testing.T) {
	ctx := testCtx(t)
	rp := rpStart(t, ctx)

	// requireFree checks that the failed acquire left res free.
	requireFree := func(t *testing.T, l *fencedlock.Locker, res string) {
		t.Helper()
		n, err := rp.master.Exists(ctx, l.LockKey(res)).Result()
		require.NoError(t, err)
		require.Zero(t, n, "the grant must be released")
	}

	t.Run("grant gone before the refresh", func(t *testing.T) {
		const res = "gone"
		c := redis.NewClient(&redis.Options{Addr: rp.master.Options().Addr})
		t.Cleanup(func() { _ = c.Close() })
		l := fencedlock.New(c, fencedlock.WithReplicas(1, time.Second))
		// The refresh is the only script with two keys (lock and counter).
		h := &rpHook{cmd: "evalsha", before: func(ctx context.Context, cmd redis.Cmder) error {
			if fmt.Sprint(cmd.Args()[2]) == "2" {
				return rp.master.Del(ctx, l.LockKey(res)).Err()
			}
			return nil
		}}
		c.AddHook(h)
		h.armed.Store(true)
		lock, err := l.TryAcquire(ctx, res, longTTL)
		h.armed.Store(false)
		require.Nil(t, lock)
		require.ErrorIs(t, err, fencedlock.ErrLockLost)
		require.Contains(t, err.Error(), "before its replicas were asked")
		requireFree(t, l, res)
	})

	t.Run("WAIT fails", func(t *testing.T) {
		const res = "wait-fails"
		injected := errors.New("injected WAIT failure")
		c := redis.NewClient(&redis.Options{Addr: rp.master.Options().Addr})
		t.Cleanup(func() { _ = c.Close() })
		h := &rpHook{cmd: "wait", before: func(context.Context, redis.Cmder) error { return injected }}
		c.AddHook(h)
		h.armed.Store(true)
		l := fencedlock.New(c, fencedlock.WithReplicas(1, time.Second))
		lock, err := l.TryAcquire(ctx, res, longTTL)
		require.Nil(t, lock)
		require.ErrorIs(t, err, injected)
		require.NotErrorIs(t, err, fencedlock.ErrNotReplicated)
		requireFree(t, l, res)
	})

	t.Run("replication slower than the TTL", func(t *testing.T) {
		// WAIT would wait up to 5s for a replica 400ms away, but a lock
		// of 200ms cannot be confirmed in time: the WAIT is cut short
		// before the TTL runs out, and the grant is refused.
		const res, ttl = "slow", 200 * time.Millisecond
		rp.link.Delay(400 * time.Millisecond)
		defer rp.link.Delay(0)
		l := fencedlock.New(rp.master, fencedlock.WithReplicas(1, 5*time.Second))
		start := time.Now()
		lock, err := l.TryAcquire(ctx, res, ttl)
		took := time.Since(start)
		require.Nil(t, lock)
		require.ErrorIs(t, err, fencedlock.ErrNotReplicated)
		require.Less(t, took, time.Second, "the WAIT must end before the TTL does, not at its timeout")
		requireFree(t, l, res)
	})

	t.Run("ctx ends", func(t *testing.T) {
		// The acquire returns at ctx's deadline, during the WAIT; its
		// error says that ctx ended and Redis did not answer in time.
		rp.link.Pause()
		defer rp.link.Resume()
		c := redis.NewClient(&redis.Options{Addr: rp.master.Options().Addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		l := fencedlock.New(c, fencedlock.WithReplicas(1, 5*time.Second))
		for name, acquire := range map[string]func(context.Context, string) (*fencedlock.Lock, error){
			"TryAcquire": func(ctx context.Context, res string) (*fencedlock.Lock, error) {
				return l.TryAcquire(ctx, res, longTTL)
			},
			"Acquire": func(ctx context.Context, res string) (*fencedlock.Lock, error) {
				return l.Acquire(ctx, res, longTTL)
			},
		} {
			tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			lock, err := acquire(tctx, "ctx-"+name)
			cancel()
			require.Nil(t, lock, name)
			require.ErrorIs(t, err, context.DeadlineExceeded, name)
			// The WAIT got no answer in time: Redis did not say the lock
			// was held.
			require.ErrorIs(t, err, fencedlock.ErrUnavailable, name)
			require.NotErrorIs(t, err, fencedlock.ErrNotAcquired, name)
			// The release of the unconfirmed grant may finish in the
			// background, past ctx.
			waitUntil(t, func() bool {
				n, err := rp.master.Exists(ctx, l.LockKey("ctx-"+name)).Result()
				return err == nil && n == 0
			}, "the grant to be released")
		}
	})
}
