// Shared helpers of the root package's tests that provoke faults or
// watch commands: a Redis that stalls behind a proxy, client hooks that
// lose acquire replies, count acquire attempts or log commands, and the
// check that a call returns by its deadline. The other shared helpers are
// in helpers_test.go.

package fencedlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// isAcquireScript reports whether cmd runs the acquire script on the resource
// whose token counter is tokenKey: a script naming that key but not the
// resource's channel, which the release script names.
func isAcquireScript(cmd redis.Cmder, tokenKey string) bool {
	name := strings.ToLower(cmd.Name())
	if name != "eval" && name != "evalsha" {
		return false
	}
	named := false
	for _, a := range cmd.Args() {
		if s, ok := a.(string); ok {
			if strings.HasSuffix(s, ":grants:") {
				return false
			}
			named = named || s == tokenKey
		}
	}
	return named
}

// stalledRedis is a Locker and a RedisStore whose client reaches b's Redis
// through a proxy that the test stalls, and a Locker that reaches it
// directly.
type stalledRedis struct {
	b      *redistest.Backend
	p      *redistest.Proxy
	c      *redis.Client // l's and store's, through p
	l      *fencedlock.Locker
	store  *fencedlock.RedisStore
	direct *fencedlock.Locker
}

func newStalledRedis(t *testing.T, b *redistest.Backend, ctxTimeout bool) *stalledRedis {
	t.Helper()
	return newStalledRedisWith(t, b, func(o *redis.Options) { o.ContextTimeoutEnabled = ctxTimeout })
}

// newStalledRedisWith is newStalledRedis with the client's options set
// by opt.
func newStalledRedisWith(t *testing.T, b *redistest.Backend, opt func(*redis.Options)) *stalledRedis {
	t.Helper()
	p := redistest.NewProxy(t, b.Client.Options().Addr)
	o := &redis.Options{Addr: p.Addr()}
	opt(o)
	c := redis.NewClient(o)
	t.Cleanup(func() {
		p.Resume()
		c.Close()
	})
	return &stalledRedis{
		b: b, p: p, c: c,
		l:      fencedlock.New(c, fencedlock.WithPrefix(b.Prefix)),
		store:  fencedlock.NewRedisStore(c, fencedlock.WithStorePrefix(b.Prefix)),
		direct: newLocker(b),
	}
}

// commandLog is a client hook that records when each script call
// started and which script it ran, by the Lua it names in its arguments.
type commandLog struct {
	mu    sync.Mutex
	calls []loggedCommand
}

type loggedCommand struct {
	at   time.Time
	name string
	args []any
}

func (h *commandLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *commandLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *commandLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		h.calls = append(h.calls, loggedCommand{time.Now(), strings.ToLower(cmd.Name()), cmd.Args()})
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

// since returns the commands that started at or after t.
func (h *commandLog) since(t time.Time) []loggedCommand {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []loggedCommand
	for _, c := range h.calls {
		if !c.at.Before(t) {
			out = append(out, c)
		}
	}
	return out
}

// acquireAttemptCounter is a client hook that counts the acquire scripts (the
// EVALSHA or EVAL naming tokenKey) that got a reply.
type acquireAttemptCounter struct {
	tokenKey string
	n        atomic.Int32
}

func (h *acquireAttemptCounter) count() int { return int(h.n.Load()) }

func (h *acquireAttemptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *acquireAttemptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *acquireAttemptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && isAcquireScript(cmd, h.tokenKey) {
			h.n.Add(1)
		}
		return err
	}
}

// errLostReply stands for a reply lost on the network.
var errLostReply = errors.New("lt: reply lost in transit")

// loseReplyHook lets an acquire script run in Redis and then loses its
// reply, once per arm call: with errLostReply, or by cancelling the
// caller's context and returning its error.
type loseReplyHook struct {
	mu       sync.Mutex
	tokenKey string             // names the resource: see isAcquireScript
	armed    bool               // guarded by mu
	cancel   context.CancelFunc // guarded by mu; nil: return errLostReply
	lost     int                // guarded by mu
}

func (h *loseReplyHook) arm(cancel context.CancelFunc) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed, h.cancel = true, cancel
}

// lostCount returns how many replies the hook has lost.
func (h *loseReplyHook) lostCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lost
}

func (h *loseReplyHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *loseReplyHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *loseReplyHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil || !h.isAcquire(cmd) {
			return err
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if !h.armed {
			return nil
		}
		h.armed = false
		h.lost++
		err = errLostReply
		if h.cancel != nil {
			h.cancel()
			err = ctx.Err()
		}
		cmd.SetErr(err)
		return err
	}
}

func (h *loseReplyHook) isAcquire(cmd redis.Cmder) bool { return isAcquireScript(cmd, h.tokenKey) }

// warmProxiedClient readies c for dropping the replies of commands and nothing else.
// It loads the lock scripts into Redis (a first EVALSHA would get NOSCRIPT
// and be sent again as EVAL, and a dropped NOSCRIPT reply would take a drop
// meant for the script): acquire and release by a grant, and the cleanup
// of an acquire without a reply by an acquire whose reply a client hook
// loses. It leaves n connections in c's pool with their handshakes done: a
// new connection starts with HELLO and CLIENT SETINFO, whose replies would
// take drops meant for the next command. The proxy is paused while n Pings
// dial, so that each Ping holds a connection of its own.
func warmProxiedClient(t *testing.T, ctx context.Context, fl *fencedlock.Locker, c *redis.Client, p *redistest.Proxy, n int) {
	t.Helper()
	grantAndRelease(t, ctx, fl, "warm-up")
	h := &loseReplyHook{tokenKey: fl.TokenKey("warm-up-cleanup")}
	c.AddHook(h)
	h.arm(nil)
	_, err := fl.TryAcquire(ctx, "warm-up-cleanup", longTTL)
	require.ErrorIs(t, err, errLostReply)
	require.Equal(t, 1, h.lostCount())
	require.NotContains(t, strings.ToLower(err.Error()), "releas", "the warm-up cleanup failed")
	p.Pause()
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() { errs <- c.Ping(ctx).Err() }()
	}
	pollUntil(5*time.Second, func() bool { return c.PoolStats().TotalConns >= uint32(n) })
	p.Resume()
	for i := 0; i < n; i++ {
		require.NoError(t, <-errs)
	}
	require.GreaterOrEqual(t, c.PoolStats().IdleConns, uint32(n), "warm connections in the pool")
	require.Zero(t, p.Dropped())
}

// deadlineSlack is how long past its ctx deadline a call may return
// (more under the race detector: see raceSlack), beyond the lateness of
// the process's own timers at that deadline (see timerLateness).
const deadlineSlack = 50*time.Millisecond + raceSlack

// timerLateness arms a timer for d from now and returns a function that
// waits for it to fire and says how late it fired. On a loaded machine
// the whole process can be descheduled past a deadline, and no call can
// return before the process runs again: the deadline tests allow for
// that lateness, measured beside the call, and for no more. A call that
// ignores its deadline is late by far more than the timer.
func timerLateness(d time.Duration) (late func() time.Duration) {
	start := time.Now()
	fired := make(chan time.Duration, 1)
	time.AfterFunc(d, func() { fired <- time.Since(start) - d })
	return func() time.Duration { return <-fired }
}

// returnsWithin runs call with a ctx of deadline d and checks that it returns
// within d plus deadlineSlack with an error wrapping ctx's error.
func returnsWithin(t *testing.T, what string, d time.Duration, call func(ctx context.Context) error) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	late := timerLateness(d)
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- call(ctx) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(d + 10*time.Second):
		// A call that blocks for good fails here, not at the test's
		// timeout; it is left to run.
		t.Errorf("%s had not returned 10s after its deadline of %v", what, d)
		return time.Since(start)
	}
	took := time.Since(start)
	lateness := late()
	t.Logf("%s with a %v deadline returned after %v (timers ran %v late): %v", what, d, took.Round(time.Millisecond), lateness.Round(time.Millisecond), err)
	assert.LessOrEqual(t, took, d+deadlineSlack+lateness, "%s returned %v after its deadline", what, took-d)
	if assert.Error(t, err, what) {
		assert.ErrorIs(t, err, context.DeadlineExceeded, what)
	}
	return took
}
