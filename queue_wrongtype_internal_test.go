package fencedlock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock/internal/redistest"
)

// A queue key of another type (which another client wrote) makes a
// waiter's attempt on a held lock fail with WRONGTYPE before it writes
// anything, and the release a waiter gives up with still sets its
// abandon marker, which refuses a copy of its attempt still on its way.
func TestQueueKeyOfAnotherTypeWritesNothing(t *testing.T) {
	be := redistest.Real(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := be.Client
	const ms, life, idle = 1000, 300, 0
	for _, wrong := range []int{keyQueue, keyDeadlines} {
		res := "wrong-type-" + strconv.Itoa(wrong)
		holder, waiter := fmt.Sprintf("%032x:", 1), fmt.Sprintf("%032x:", 2)
		keys := func(owner string) []any {
			return []any{
				keyFor(be.Prefix, res, "lock"), keyFor(be.Prefix, res, "token"),
				keyFor(be.Prefix, res, "queue"), keyFor(be.Prefix, res, "deadlines"),
				keyFor(be.Prefix, res, "abandoned:"+strings.TrimSuffix(owner, ":")),
			}
		}
		attempt := func(owner string, life any) (any, error) {
			return acquireScript.Run(ctx, c, keys(owner), owner, ms, life, idle).Result()
		}
		r, err := attempt(holder, "")
		require.NoError(t, err)
		require.IsType(t, int64(0), r, "the holder's grant")
		k := keys(waiter)
		require.NoError(t, c.Set(ctx, k[wrong].(string), "not a queue key", time.Minute).Err())
		other := k[keyQueue+keyDeadlines-wrong].(string)

		_, err = attempt(waiter, int64(life))
		require.ErrorContains(t, err, "WRONGTYPE")
		assert.Zero(t, c.Exists(ctx, other).Val(), "the attempt wrote %s before it failed", other)

		// The waiter gives up (Lock.withdraw): its entry leaves the queue,
		// and its marker is set.
		_, err = releaseScript.Run(ctx, c, k, waiter, keyFor(be.Prefix, res, "grants:"),
			waiter+strconv.Itoa(ms), int64(ms+16*60000), idle, "", "", "").Result()
		require.ErrorContains(t, err, "WRONGTYPE")
		assert.Equal(t, int64(1), c.Exists(ctx, k[keyMarker].(string)).Val(), "the give-up failed before it set the marker")
		assert.Zero(t, c.Exists(ctx, other).Val(), "the give-up wrote %s", other)
		r, err = attempt(waiter, int64(life))
		require.NoError(t, err)
		assert.Equal(t, []any{int64(acquireAbandoned)}, r, "the marker refuses a copy of the attempt")
		require.NoError(t, c.Del(ctx, k[wrong].(string)).Err())
	}
}
