package fencedlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock/internal/call"
	"github.com/fencedlock/fencedlock/internal/names"
)

// WithReplicas makes every acquire of the Locker wait, once its lock is
// granted, until at least n replicas of the Redis master that granted it
// have confirmed the grant (Redis's WAIT), for at most timeout, rounded
// down to whole milliseconds. When fewer confirm in time, the acquire
// releases the grant and returns an error wrapping ErrNotReplicated; the
// caller can try again later. Only grants wait: refreshes, releases,
// IssueToken and store writes do not.
//
// Use it where Redis fails over to a replica (Sentinel, Cluster with
// replicas), so that a promoted replica is less likely to have missed a
// grant. Fencing does not depend on it: stores refuse lower tokens
// whatever Redis loses. Keep timeout well below the TTL.
//
// An acquire can then also fail with an error wrapping ErrLockLost (the
// grant ended before it was confirmed), or with the error of the
// confirmation's round trips; a grant still held is then released, and
// the error says if that failed too. An acquire returns when its ctx
// ends, even during the WAIT, and its grant is released in the background.
//
// n must be at least 1, timeout at least one millisecond, and the client a
// *redis.Client (a single node or a Sentinel failover client) or a
// *redis.ClusterClient; otherwise every method of the Locker returns an
// error wrapping ErrInvalidArgument. What WAIT does and does not promise,
// its cost and pool sizing are in
// https://github.com/fencedlock/fencedlock/blob/main/docs/redis.md.
func WithReplicas(n int, timeout time.Duration) Option {
	return func(l *Locker) {
		l.replicas = &replicaWait{n: n, timeout: timeout}
	}
}

// replicaWait is the setting of WithReplicas.
type replicaWait struct {
	n       int
	timeout time.Duration
}

// check reports why the setting cannot work with client, or nil.
func (w *replicaWait) check(client redis.UniversalClient) error {
	if w.n < 1 {
		return invalidArg("WithReplicas: %d replicas: at least 1 is needed", w.n)
	}
	if w.timeout < time.Millisecond {
		return invalidArg("WithReplicas: timeout %v is below 1ms", w.timeout)
	}
	switch client.(type) {
	case *redis.Client, *redis.ClusterClient:
		return nil
	}
	return invalidArg("WithReplicas needs a *redis.Client or *redis.ClusterClient, not %T", client)
}

// replicate waits until the replicas confirm the grant of k, a Lock just
// granted for ttl, as WithReplicas says. When they do not, or the wait
// fails, it releases k and returns why; when ctx ended meanwhile, the
// error wraps ctx's error too.
func (l *Locker) replicate(ctx context.Context, k *Lock, ttl time.Duration) error {
	w := l.replicas
	if w == nil {
		return nil
	}
	err := l.replicaAcks(ctx, k, ttl)
	if err == nil {
		return nil
	}
	if cerr := call.Err(ctx); cerr != nil && !errors.Is(err, call.Ended(ctx)) {
		err = fmt.Errorf("%w: %w", err, cerr)
	}
	cerr := l.cleanups.Run(ctx, k.resource, "release an unconfirmed grant", call.Timeout, func(ctx context.Context) error {
		// A Lock that ended as its lease ran out by the local clock is
		// withdrawn by this Release (its key deleted if still its own).
		if err := k.Release(ctx); err != nil && k.Err() == nil {
			return err
		}
		return nil
	})
	return call.Report(err, "releasing the grant", "it may stay locked until its TTL ends", cerr)
}

// replicaAcks refreshes k, then sends WAIT on the same connection, and
// returns nil when enough replicas confirmed while the lock was certainly
// held. WAIT waits for the replication offset of the connection's own last
// write: the refresh makes that a write after the grant, which may have
// been made by another connection (a release that handed the lock over).
// The connection is one of the pool's, kept for the two commands
// (go-redis's Conn): if it breaks, the WAIT fails rather than going out on
// a new connection, where it would wait for nothing.
func (l *Locker) replicaAcks(ctx context.Context, k *Lock, ttl time.Duration) error {
	_, err := call.Bounded(ctx, l.heeds, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, l.replicaAcksOnce(ctx, k, ttl)
	})
	if err != nil && errors.Is(err, ctx.Err()) {
		return redisErr(ctx, "acquire", k.resource, err)
	}
	return err
}

// replicaAcksOnce is replicaAcks without its bound.
func (l *Locker) replicaAcksOnce(ctx context.Context, k *Lock, ttl time.Duration) error {
	w := l.replicas
	var node *redis.Client
	switch c := l.client.(type) {
	case *redis.Client:
		node = c
	case *redis.ClusterClient:
		var err error
		if node, err = c.MasterForKey(ctx, k.keys[keyLock]); err != nil {
			return fmt.Errorf("%w: acquire %s: finding the master of its slot: %w", ErrUnavailable, names.Quote(k.resource), err)
		}
	default: // New refused other clients
		return invalidArg("WithReplicas needs a *redis.Client or *redis.ClusterClient, not %T", l.client)
	}
	conn := node.Conn()
	defer conn.Close()
	sent := time.Now()
	n, err := refreshScript.Run(ctx, conn, k.keyArgs[:keyQueue], k.owner, ttl.Milliseconds(), l.idleArg).Int64()
	if err != nil {
		return redisErr(ctx, "acquire", k.resource, err, k.keys[keyLock])
	}
	if r, err := decodeRefresh(n); err != nil || r != refreshHeld {
		return k.lost("the grant ended before its replicas were asked to confirm it")
	}
	k.hold(sent, ttl)
	// Wait no longer than the lock is certainly held: confirmations of a
	// lock that may have expired would be worth nothing.
	limit := max(min(w.timeout, certainFor(ttl)), time.Millisecond) // WAIT's 0 waits forever
	got, err := conn.Wait(ctx, w.n, limit).Result()
	switch {
	case err != nil:
		return redisErr(ctx, fmt.Sprintf("acquire (WAIT for %d replicas)", w.n), k.resource, err)
	case int(got) < w.n:
		return fmt.Errorf("%w: %s: %d of %d replicas confirmed the grant of token %d within %v", ErrNotReplicated, names.Quote(k.resource), got, w.n, k.token, limit)
	case !k.certain():
		return fmt.Errorf("%w: %s: the replicas confirmed the grant of token %d after its TTL of %v had nearly run out", ErrNotReplicated, names.Quote(k.resource), k.token, ttl)
	}
	return nil
}
