package election_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/election"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// keepCalls is a client hook that counts the runs of keep.lua.
type keepCalls struct {
	sha, src string
	n        atomic.Int64
}

func (h *keepCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *keepCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) > 1 && (a[1] == h.sha || a[1] == h.src) {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *keepCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A term stops keeping its leader record once keep.lua answers LOST:
// the lock no longer holds the term's token. Here the lock key is
// rewritten with the term's owner nonce and another token, so that the
// term's heartbeat still holds the lock, and only the keeping stops.
func TestTermStopsKeepingOnceRedisSaysItIsOver(t *testing.T) {
	src, err := os.ReadFile("keep.lua")
	require.NoError(t, err)
	sum := sha1.Sum(src)
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := elCtx(t)
		calls := &keepCalls{sha: hex.EncodeToString(sum[:]), src: string(src)}
		b.Client.AddHook(calls)
		l := fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix))
		// a heartbeat, and a check of the record, every 100ms
		e := election.New(l, "over", election.WithTTL(300*time.Millisecond))
		lockKey, _, _ := elKeys(l, "over")
		term, err := e.Campaign(ctx, "a")
		require.NoError(t, err)
		require.Eventually(t, func() bool { return calls.n.Load() >= 2 }, 5*time.Second, 10*time.Millisecond, "the term does not keep its record")

		held, err := b.Client.Get(ctx, lockKey).Result()
		require.NoError(t, err)
		i := strings.LastIndexByte(held, ':')
		require.Positive(t, i, held)
		other := term.Token() + 1
		// Right after a check, so that the term is still keeping when
		// the token changes. A check sent before the change may still be
		// answered after it: the term stops with the first answer that
		// says it is over, one or two checks later.
		n := calls.n.Load()
		require.Eventually(t, func() bool { return calls.n.Load() > n }, 5*time.Second, time.Millisecond, "the term stopped keeping its record early")
		require.NoError(t, b.Client.Set(ctx, lockKey, held[:i+1]+other.String(), 10*time.Second).Err())
		before := calls.n.Load()
		var stopped int64
		require.Eventually(t, func() bool {
			n := calls.n.Load()
			time.Sleep(500 * time.Millisecond) // five heartbeats
			stopped = calls.n.Load()
			return n == stopped
		}, 5*time.Second, time.Millisecond, "the term kept checking its record after Redis said it was over")
		assert.LessOrEqual(t, stopped-before, int64(2), "checks after the token changed")
		assert.NoError(t, term.Err(), "the term's lock is still its own")
		require.NoError(t, term.Resign(ctx))
		elNoGoroutinesLeft(t)
	})
}
