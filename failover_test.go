package fencedlock_test

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// A failover to a replica that missed the latest grant: A is granted a
// token on the master while replication is stalled, the replica is
// promoted without A's grant (its counter lags one INCR behind), and B
// acquires on it. The grant raises the lagging counter to the clock, so B's
// token is above A's and the store refuses A's late write. Without that
// raise B would get A's token again, and an equal token passes the fence.
func TestFailoverToALaggingReplicaGrantsAHigherToken(t *testing.T) {
	ctx := testCtx(t)
	// No delay before a diskless full sync (the default waits 5s for more
	// replicas to come).
	master := redistest.Start(t, "--repl-diskless-sync-delay", "0")
	replica := redistest.Start(t)
	mc, rc := master.Client(t), replica.Client(t)

	// The replica replicates through the proxy, so that Pause stalls the
	// replication stream.
	p := redistest.NewProxy(t, master.Addr)
	host, port, err := net.SplitHostPort(p.Addr())
	require.NoError(t, err)
	require.NoError(t, rc.Do(ctx, "REPLICAOF", host, port).Err())
	foWaitInSync(t, ctx, mc, rc)

	const res = "failover"
	onMaster, onReplica := fencedlock.New(mc), fencedlock.New(rc)
	first := grantAndRelease(t, ctx, onMaster, res)
	foWaitInSync(t, ctx, mc, rc)
	counter, err := rc.Get(ctx, onReplica.TokenKey(res)).Result()
	require.NoError(t, err)
	require.Equal(t, first.String(), counter, "the replica must hold the counter of the first grant")

	// Replication stalls; A is granted a token on the master.
	p.Pause()
	a := mustTryAcquire(t, ctx, onMaster, res, longTTL)
	require.Greater(t, a.Token(), first)

	// Failover: the replica becomes a master without A's grant.
	require.NoError(t, rc.Do(ctx, "REPLICAOF", "NO", "ONE").Err())
	r, err := redistest.Info(ctx, rc, "replication")
	require.NoError(t, err)
	require.Equal(t, "master", r["role"])
	counter, err = rc.Get(ctx, onReplica.TokenKey(res)).Result()
	require.NoError(t, err)
	require.Equal(t, first.String(), counter, "the promoted replica must have missed A's grant: its counter lags")
	n, err := rc.Exists(ctx, onReplica.LockKey(res)).Result()
	require.NoError(t, err)
	require.Zero(t, n, "the promoted replica must not hold A's lock")

	// B acquires on the new master: it must get a token above A's.
	bl := mustTryAcquire(t, ctx, onReplica, res, longTTL)
	require.Greater(t, bl.Token(), a.Token(), "the promoted replica granted a token (%d) not above the one the old master granted (%d): its lagging counter %s was not raised", bl.Token(), a.Token(), first)

	// A still believes it holds the lock. B writes, then A's late write
	// is refused.
	s := fencedlock.NewMemoryStore()
	require.NoError(t, s.Put(ctx, res, bl.Token(), []byte("B")))
	err = s.Put(ctx, res, a.Token(), []byte("A"))
	requireStale(t, err, res, a.Token(), bl.Token())
	requireValue(t, ctx, s, res, "B", bl.Token())
	t.Logf("first grant %d, A on the old master %d, B on the promoted replica %d (%s µs later)",
		first, a.Token(), bl.Token(), strconv.FormatUint(uint64(bl.Token()-a.Token()), 10))
}
