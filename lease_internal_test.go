package fencedlock

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock/internal/call"
)

// A waiter's cleanup that Redis keeps answering "not now" tries again
// while its ctx lasts, and once right after the waiter's place lapsed, not
// up to a pause later: a release may hand the place the lock until then,
// and only a try after it passes that lock on.
func TestWithdrawTriesOnceThePlaceLapsed(t *testing.T) {
	hook := &tryAgainHook{}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // the hook answers: nothing is dialled
	c.AddHook(hook)
	t.Cleanup(func() { c.Close() })
	lock, err := New(c).newLock("r")
	require.NoError(t, err)
	const place = 700 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), place+call.Timeout)
	defer cancel()
	start := time.Now()
	err = lock.withdraw(ctx, 20000, place, 0)
	require.Error(t, err)
	assert.True(t, redis.HasErrorPrefix(err, "TRYAGAIN"), "the last try's error: %v", err)
	var after []time.Duration
	for _, at := range hook.times() {
		after = append(after, at.Sub(start).Round(time.Millisecond))
	}
	t.Logf("tries after: %v", after)
	lapsed := false
	for _, d := range after {
		lapsed = lapsed || d >= place && d < place+100*time.Millisecond
	}
	assert.True(t, lapsed, "no try within 100ms after the place lapsed: %v", after)
}

// tryAgainHook answers every script with TRYAGAIN, as a node does while
// a slot is split between two, and records when.
type tryAgainHook struct {
	mu    sync.Mutex
	tries []time.Time
}

// tryAgainErr is an error reply of Redis.
type tryAgainErr struct{}

func (tryAgainErr) Error() string { return "TRYAGAIN Multiple keys request during rehashing of slot" }
func (tryAgainErr) RedisError()   {}

func (h *tryAgainHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *tryAgainHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *tryAgainHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !strings.HasPrefix(strings.ToLower(cmd.Name()), "eval") {
			return next(ctx, cmd)
		}
		h.mu.Lock()
		h.tries = append(h.tries, time.Now())
		h.mu.Unlock()
		cmd.SetErr(tryAgainErr{})
		return tryAgainErr{}
	}
}

func (h *tryAgainHook) times() []time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]time.Time(nil), h.tries...)
}
