package redistest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// The helpers here detect what a server can do, never its version, as the
// library does, so that the tests run on every Redis-compatible server:
// Redis 7 and Valkey, and Redis 5.0 and 6.2, which lack sharded pub/sub,
// CLUSTER ADDSLOTSRANGE and the busy-reply-threshold setting.

// unknown reports whether err is a server's reply that it does not know
// a command or a subcommand: "unknown command", "Unknown subcommand".
func unknown(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.Contains(strings.ToLower(err.Error()), "unknown")
}

// ShardedPubSub reports whether the server behind c has sharded pub/sub
// (SSUBSCRIBE, PUBSUB SHARDNUMSUB), as the library's probe finds out: it
// subscribes with SSUBSCRIBE where the server has it, else with
// SUBSCRIBE. miniredis has no sharded pub/sub.
func ShardedPubSub(ctx context.Context, c redis.UniversalClient) (bool, error) {
	err := c.Do(ctx, "PUBSUB", "SHARDNUMSUB").Err()
	switch {
	case err == nil:
		return true, nil
	case unknown(err):
		return false, nil
	}
	return false, err
}

// Subscribers returns how many subscriptions to channel the server behind
// c has, of the kind the library makes there: sharded ones (PUBSUB
// SHARDNUMSUB) where the server has sharded pub/sub, classic ones (PUBSUB
// NUMSUB) elsewhere. A subscription of the other kind is not counted, so
// that a test waiting for one also checks that the library took the
// server's path. On a ClusterClient the counts of all masters are added
// up: a server counts only the subscriptions made on it.
func Subscribers(ctx context.Context, c redis.UniversalClient, channel string) (int64, error) {
	if cc, ok := c.(*redis.ClusterClient); ok {
		var total atomic.Int64 // ForEachMaster asks the masters concurrently
		err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			n, err := Subscribers(ctx, m, channel)
			total.Add(n)
			return err
		})
		return total.Load(), err
	}
	sharded, err := ShardedPubSub(ctx, c)
	if err != nil {
		return 0, err
	}
	var counts map[string]int64
	if sharded {
		counts, err = c.PubSubShardNumSub(ctx, channel).Result()
	} else {
		counts, err = c.PubSubNumSub(ctx, channel).Result()
	}
	return counts[channel], err
}

// AddSlots assigns the slots from..to (inclusive) to the cluster node
// behind c: with CLUSTER ADDSLOTSRANGE where the server has it (Redis 7
// and later), else with CLUSTER ADDSLOTS listing every slot, in chunks.
func AddSlots(ctx context.Context, c *redis.Client, from, to int) error {
	err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", from, to).Err()
	if err == nil || !unknown(err) {
		return err
	}
	const chunk = 1024
	for lo := from; lo <= to; lo += chunk {
		hi := min(lo+chunk-1, to)
		args := make([]any, 0, 2+hi-lo+1)
		args = append(args, "CLUSTER", "ADDSLOTS")
		for slot := lo; slot <= hi; slot++ {
			args = append(args, slot)
		}
		if err := c.Do(ctx, args...).Err(); err != nil {
			return fmt.Errorf("CLUSTER ADDSLOTS %d..%d: %w", lo, hi, err)
		}
	}
	return nil
}

// SetBusyThreshold sets how long a script runs before the server answers
// other clients with BUSY (and accepts SCRIPT KILL), under the setting's
// name on that server, as CONFIG GET finds it: busy-reply-threshold
// (Redis 7, Valkey), else lua-time-limit (Redis 6.2 and before).
func SetBusyThreshold(ctx context.Context, c redis.Cmdable, ms int) error {
	name := "lua-time-limit"
	has, err := c.ConfigGet(ctx, "busy-reply-threshold").Result()
	if err != nil {
		return err
	}
	if _, ok := has["busy-reply-threshold"]; ok {
		name = "busy-reply-threshold"
	}
	return c.ConfigSet(ctx, name, strconv.Itoa(ms)).Err()
}
