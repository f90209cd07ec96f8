package fencedlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// The keys of issued tokens, kept by a Locker's goroutine while the
// other library's lock key holds the grant, and forgotten once it does
// not.

// A grant of another library that extends its lock key, and asks for its
// token again only later, long after the idle expiry, gets the same token:
// the Locker keeps the keys of its token as long as its lock key holds its
// value. Once the lock key is gone, it forgets the grant and its goroutine
// ends.
func TestIssueTokenSameGrantKeepsItsTokenWhileExtended(t *testing.T) {
	b := redistest.Real(t)
	ctx := testCtx(t)
	defer fencedlock.SetIssuedKeeping(time.Second, time.Minute)() // as in production
	l := fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix), fencedlock.WithIdleExpiry(time.Second))
	key := "locks:" + b.Prefix + ":x"
	t.Cleanup(func() { b.Client.Del(context.Background(), key) })
	require.NoError(t, b.Client.SetArgs(ctx, key, "grant-1", redis.SetArgs{Mode: "NX", TTL: time.Second}).Err())
	first, err := l.IssueToken(ctx, key, "grant-1")
	require.NoError(t, err)

	// The other library extends its lock every 500 ms for 4 s.
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); {
		time.Sleep(500 * time.Millisecond)
		held, err := b.Client.PExpire(ctx, key, time.Second).Result()
		require.NoError(t, err)
		require.True(t, held, "the lock key expired between two extends: the test ran too slowly")
	}
	again, err := l.IssueToken(ctx, key, "grant-1")
	require.NoError(t, err)
	assert.Equal(t, first, again, "the same grant got a new token")

	require.NoError(t, b.Client.Del(ctx, key).Err())
	requireNoGoroutinesLeftWithin(t, 3*time.Second)
	assert.Zero(t, l.KeptIssuedGrants())
}

// The same on miniredis, whose clock moves only when told: each time the
// lock key is extended, the Locker extends the keys of its token.
func TestIssueTokenKeepsTheKeysOfAnExtendedGrant(t *testing.T) {
	b := redistest.Mini(t)
	ctx := testCtx(t)
	const idle = time.Second
	l := fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix), fencedlock.WithIdleExpiry(idle))
	key := b.Prefix + ":other-lib"
	require.NoError(t, b.Client.Set(ctx, key, "grant-1", time.Second).Err())
	first, err := l.IssueToken(ctx, key, "grant-1")
	require.NoError(t, err)
	record := l.IssuedRecordKey(key)
	for i := 0; i < 8; i++ {
		b.FastForward(t, 500*time.Millisecond)
		require.NoError(t, b.Client.PExpire(ctx, key, time.Second).Err())
		waitUntil(t, func() bool { return keyPTTL(t, b, record) > 1500*time.Millisecond }, "the record to be kept")
		assert.Equal(t, time.Second+idle, keyPTTL(t, b, l.IssuedTokenKey(key)), "the counter is kept with it")
	}
	again, err := l.IssueToken(ctx, key, "grant-1")
	require.NoError(t, err)
	assert.Equal(t, first, again)
}

// The keeping goroutine sends its script again with EVAL when EVALSHA
// answers NOSCRIPT (a restart or SCRIPT FLUSH).
func TestIssueTokenKeepingAfterTheScriptCacheIsFlushed(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		const idle = time.Hour
		l := fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix), fencedlock.WithIdleExpiry(idle))
		key := b.Prefix + ":other-lib"
		require.NoError(t, b.Client.Set(ctx, key, "g", time.Minute).Err())
		_, err := l.IssueToken(ctx, key, "g")
		require.NoError(t, err)
		require.NoError(t, b.Client.ScriptFlush(ctx).Err())
		b.FastForward(t, 10*time.Second)
		require.NoError(t, b.Client.PExpire(ctx, key, time.Minute).Err()) // the other library extends
		record := l.IssuedRecordKey(key)
		waitUntil(t, func() bool { return keyPTTL(t, b, record) > time.Minute+idle-5*time.Second }, "the record to be kept after SCRIPT FLUSH")
		require.NoError(t, b.Client.Del(ctx, key).Err())
	})
}

// A Locker keeps the keys of all the grants it issued tokens to with one
// goroutine, started only when a grant needs it, and forgets each grant
// once its lock key no longer holds its value: deleted, taken by another
// grant, or expired. The goroutine ends with the last one.
func TestIssueTokenKeepingGoroutine(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		requireNoGoroutinesLeft(t)
		// keepers returns how many keeping goroutines run, once those
		// just started have run.
		keepers := func() int {
			time.Sleep(50 * time.Millisecond)
			return keepingGoroutines()
		}
		key := func(i int) string { return fmt.Sprintf("%s:other-lib-%d", b.Prefix, i) }
		t.Cleanup(func() {
			for i := 0; i < 4; i++ {
				b.Client.Del(context.Background(), key(i))
			}
		})

		// Keys kept for ever need no keeping: with WithIdleExpiry(0), and
		// for a lock key without expiry.
		forever := fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix), fencedlock.WithIdleExpiry(0))
		require.NoError(t, b.Client.Set(ctx, key(0), "g", time.Minute).Err())
		_, err := forever.IssueToken(ctx, key(0), "g")
		require.NoError(t, err)
		l := fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix))
		require.NoError(t, b.Client.Set(ctx, key(3), "g", 0).Err())
		_, err = l.IssueToken(ctx, key(3), "g")
		require.NoError(t, err)
		assert.Zero(t, keepers())
		assert.Zero(t, forever.KeptIssuedGrants()+l.KeptIssuedGrants())

		for i := 0; i < 3; i++ {
			require.NoError(t, b.Client.Set(ctx, key(i), "g", time.Minute).Err())
			_, err := l.IssueToken(ctx, key(i), "g")
			require.NoError(t, err)
			_, err = l.IssueToken(ctx, key(i), "g")
			require.NoError(t, err)
		}
		assert.Equal(t, 3, l.KeptIssuedGrants())
		assert.Equal(t, 1, keepers(), "one goroutine per Locker")

		require.NoError(t, b.Client.Del(ctx, key(0)).Err())
		waitUntil(t, func() bool { return l.KeptIssuedGrants() == 2 }, "the deleted lock key's grant to be forgotten")
		require.NoError(t, b.Client.Set(ctx, key(1), "another", time.Minute).Err())
		waitUntil(t, func() bool { return l.KeptIssuedGrants() == 1 }, "the grant whose lock key another took to be forgotten")
		assert.Equal(t, 1, keepers())
		b.FastForward(t, time.Minute)
		requireNoGoroutinesLeft(t)
		assert.Zero(t, l.KeptIssuedGrants())

		// A grant asking again after it was forgotten is kept again.
		require.NoError(t, b.Client.Set(ctx, key(2), "g2", time.Minute).Err())
		_, err = l.IssueToken(ctx, key(2), "g2")
		require.NoError(t, err)
		assert.Equal(t, 1, keepers())
		require.NoError(t, b.Client.Del(ctx, key(2)).Err())
		requireNoGoroutinesLeft(t)
	})
}

// The keeping goroutine ends when the Locker's client is closed.
func TestIssueTokenKeepingEndsWithTheClient(t *testing.T) {
	b := redistest.Real(t)
	ctx := testCtx(t)
	c := redis.NewClient(&redis.Options{Addr: b.Client.Options().Addr})
	l := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix))
	key := b.Prefix + ":other-lib"
	require.NoError(t, b.Client.Set(ctx, key, "g", time.Minute).Err())
	_, err := l.IssueToken(ctx, key, "g")
	require.NoError(t, err)
	require.Equal(t, 1, l.KeptIssuedGrants())
	waitUntil(t, func() bool { return keepingGoroutines() == 1 }, "the keeping goroutine to run")
	require.NoError(t, c.Close())
	requireNoGoroutinesLeft(t)
	assert.Zero(t, l.KeptIssuedGrants())
}

// The keeping goroutine rides out failed checks while the keys last, and
// gives a grant up, with a warning, once its keys would have expired.
func TestIssueTokenKeepingThroughAnOutage(t *testing.T) {
	b := redistest.Mini(t)
	faults := &pipelineFaults{}
	b.Client.AddHook(faults) // the keeping goroutine alone sends pipelines
	ctx := testCtx(t)
	logs := &syncBuffer{}
	const idle = time.Second
	l := fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix), fencedlock.WithIdleExpiry(idle),
		fencedlock.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	key := b.Prefix + ":other-lib"
	require.NoError(t, b.Client.Set(ctx, key, "g", time.Second).Err())
	_, err := l.IssueToken(ctx, key, "g")
	require.NoError(t, err)

	faults.fail.Store(true)
	waitUntil(t, func() bool { return faults.failed.Load() >= 3 }, "three checks to fail")
	faults.fail.Store(false)
	require.Equal(t, 1, l.KeptIssuedGrants(), "a grant given up while its keys last")
	b.FastForward(t, 500*time.Millisecond)
	require.NoError(t, b.Client.PExpire(ctx, key, time.Second).Err()) // the other library extends
	record := l.IssuedRecordKey(key)
	waitUntil(t, func() bool { return keyPTTL(t, b, record) > time.Second+idle-500*time.Millisecond }, "the record to be kept after the failures")
	assert.Empty(t, logs.String())

	faults.fail.Store(true)
	requireNoGoroutinesLeftWithin(t, 5*time.Second)
	assert.Zero(t, l.KeptIssuedGrants())
	assert.Contains(t, logs.String(), "the keys of an issued token were not kept")
	assert.Contains(t, logs.String(), key)
	assert.Contains(t, logs.String(), "injected fault")
}

// keepingGoroutines returns how many goroutines keep the keys of issued
// tokens. A goroutine that has never run yet is not among them:
// runtime.Stack leaves it out.
func keepingGoroutines() (n int) {
	for _, g := range ourGoroutines() {
		if strings.Contains(g, "keepIssuedKeys") {
			n++
		}
	}
	return n
}

// pipelineFaults is a client hook that fails every pipeline while fail is
// set, as go-redis fails one that gets no connection: the error is
// Exec's, none of the commands'.
type pipelineFaults struct {
	fail   atomic.Bool
	failed atomic.Int64
}

func (h *pipelineFaults) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *pipelineFaults) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *pipelineFaults) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.fail.Load() {
			h.failed.Add(1)
			return errors.New("injected fault")
		}
		return next(ctx, cmds)
	}
}
