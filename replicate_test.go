package fencedlock_test

import (
	"context"
	"errors"
	"net"
	"strings"
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
	ltEventually(t, func() bool {
		m, err := foInfo(ctx, master, "replication")
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
	ctx := ltCtx(t)
	rp := rpStart(t, ctx)
	rp.link.Delay(100 * time.Millisecond)
	l := fencedlock.New(rp.master, fencedlock.WithReplicas(1, 5*time.Second))

	t.Run("TryAcquire", func(t *testing.T) {
		lock := ltTryAcquire(t, ctx, l, "try", ltLongTTL)
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
			holder := ltTryAcquire(t, ctx, holderLocker, res, ltLongTTL)
			done := ltWaitFor(ctx, l, res, ltLongTTL, ltHourDelay)
			ltEventually(t, func() bool { return l.Reserved(res) != 0 }, "the waiter to queue")
			time.Sleep(20 * time.Millisecond) // its subscription
			// The master knows that the replica has the waiter's own
			// writes before the grant: a WAIT for those alone would return
			// at once.
			rpWaitAcked(t, ctx, rp.master)
			require.NoError(t, holder.Release(ctx))
			lock := ltAwait(t, done)
			require.Greater(t, lock.Token(), holder.Token())
			rpRequireOnReplica(t, ctx, rp.replica, l, lock)
			require.NoError(t, lock.Release(ctx))
		})
	}
}

// When the replica does not confirm in time, the acquire fails with
// ErrNotReplicated after the timeout, and the grant is released at once:
// another owner can take the lock, with a higher token.
func TestWithReplicasFailsWhenReplicasDoNotConfirm(t *testing.T) {
	ctx := ltCtx(t)
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
		lock := ltTryAcquire(t, ctx, other, res, ltLongTTL)
		require.NoError(t, lock.Release(ctx))
	}

	t.Run("more replicas than there are", func(t *testing.T) {
		l := fencedlock.New(rp.master, fencedlock.WithReplicas(2, timeout))
		start := time.Now()
		lock, err := l.TryAcquire(ctx, "two", ltLongTTL)
		require.Nil(t, lock)
		requireRefused(t, err, time.Since(start), "two")
	})

	t.Run("replication stalled", func(t *testing.T) {
		rp.link.Pause()
		defer rp.link.Resume()
		l := fencedlock.New(rp.master, fencedlock.WithReplicas(1, timeout))
		start := time.Now()
		lock, err := l.TryAcquire(ctx, "stalled", ltLongTTL)
		require.Nil(t, lock)
		requireRefused(t, err, time.Since(start), "stalled")

		// A waiting Acquire is refused too, at once rather than at the
		// end of its context.
		start = time.Now()
		lock, err = l.Acquire(ctx, "stalled-wait", ltLongTTL)
		require.Nil(t, lock)
		requireRefused(t, err, time.Since(start), "stalled-wait")
	})

	t.Run("confirmed again once replication resumes", func(t *testing.T) {
		foWaitInSync(t, ctx, rp.master, rp.replica)
		l := fencedlock.New(rp.master, fencedlock.WithReplicas(1, 5*time.Second))
		lock := ltTryAcquire(t, ctx, l, "resumed", ltLongTTL)
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
			lock, err := l.TryAcquire(ctx, res, ltLongTTL)
			require.Nil(t, lock)
			require.ErrorIs(t, err, fencedlock.ErrNotReplicated)
			require.Contains(t, err.Error(), "0 of 1 replicas")
			n, err := client.Exists(ctx, l.LockKey(res)).Result()
			require.NoError(t, err)
			require.Zero(t, n, "the unconfirmed grant of %q must be released", res)
		}
	}
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		check(t, ltCtx(t), b.Client, b.Prefix)
	})
	t.Run("cluster", func(t *testing.T) {
		servers := redistest.StartClusterN(t, 3)
		addrs := make([]string, len(servers))
		for i, s := range servers {
			addrs[i] = s.Addr
		}
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		t.Cleanup(func() { _ = cc.Close() })
		check(t, ltCtx(t), cc, "fencedlock")
	})
}

// WithReplicas refuses settings that cannot work: every call of the
// Locker returns ErrInvalidArgument and nothing is sent.
func TestWithReplicasInvalid(t *testing.T) {
	b := redistest.Mini(t)
	ctx := ltCtx(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"one": b.Client.Options().Addr}})
	t.Cleanup(func() { _ = ring.Close() })
	for name, l := range map[string]*fencedlock.Locker{
		"no replicas":       fencedlock.New(b.Client, fencedlock.WithReplicas(0, time.Second)),
		"negative replicas": fencedlock.New(b.Client, fencedlock.WithReplicas(-1, time.Second)),
		"zero timeout":      fencedlock.New(b.Client, fencedlock.WithReplicas(1, 0)),
		"sub-ms timeout":    fencedlock.New(b.Client, fencedlock.WithReplicas(1, 999*time.Microsecond)),
		"a Ring":            fencedlock.New(ring, fencedlock.WithReplicas(1, time.Second)),
	} {
		lock, err := l.TryAcquire(ctx, "r", ltLongTTL)
		require.Nil(t, lock, name)
		require.ErrorIs(t, err, fencedlock.ErrInvalidArgument, name)
		require.Contains(t, err.Error(), "WithReplicas", name)
		lock, err = l.Acquire(ctx, "r", ltLongTTL)
		require.Nil(t, lock, name)
		require.ErrorIs(t, err, fencedlock.ErrInvalidArgument, name)
		require.True(t, errors.Is(l.Do(ctx, "r", ltLongTTL, func(context.Context, *fencedlock.Lock) error { return nil }), fencedlock.ErrInvalidArgument), name)
	}
	require.Empty(t, b.Miniredis().Keys(), "nothing may be sent")
}
