package fencedlock

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

	"github.com/fencedlock/fencedlock/internal/call"
	"github.com/fencedlock/fencedlock/internal/redistest"
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

// errTimeout is a round trip's error that does not say whether the
// command reached Redis: a Release that fails with it may have run.
var errTimeout = errors.New("i/o timeout")

// endRecorder is a Lock without Redis, as granted for ttl, with a
// stand-in heartbeat (when beat) and an onEnded function, that records
// how they are called.
type endRecorder struct {
	k       *Lock
	stopped atomic.Int32 // calls of the heartbeat's stop
	ends    chan error   // what onEnded got
}

func newEndRecorder(t *testing.T, ttl time.Duration, beat bool) *endRecorder {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // nothing is sent
	t.Cleanup(func() { c.Close() })
	k, err := New(c).newLock("r")
	require.NoError(t, err)
	k.token = 7
	r := &endRecorder{k: k, ends: make(chan error, 2)}
	r.k.hold(time.Now(), ttl)
	if beat {
		_, ok := r.k.attachHeartbeat(func() { r.stopped.Add(1) })
		require.True(t, ok)
	}
	r.k.onEnded(func(err error) { r.ends <- err })
	return r
}

// failRelease runs a Release of r.k, without Redis, that fails with err.
func (r *endRecorder) failRelease(t *testing.T, err error) {
	t.Helper()
	require.NoError(t, r.k.beginRelease(context.Background()))
	assert.ErrorIs(t, r.k.finishRelease(false, err, time.Now()), err)
	require.NoError(t, r.k.Err(), "a failed Release ended the Lock")
}

// requireEnded checks that r.k ended with an error matching want, and
// that Done, onEnded and the heartbeat heard of it, once.
func (r *endRecorder) requireEnded(t *testing.T, want error) {
	t.Helper()
	require.ErrorIs(t, r.k.Err(), want)
	assert.True(t, isClosed(r.k.Done()), "Done open after the end")
	// onEnded runs after the Lock's mutex is released, so a moment after
	// Done is closed when a timer ends the Lock.
	select {
	case got := <-r.ends:
		assert.Equal(t, r.k.Err(), got, "onEnded got another error than Err")
	case <-time.After(5 * time.Second):
		t.Error("onEnded not called")
	}
	assert.Empty(t, r.ends, "onEnded called twice")
	assert.Positive(t, r.stopped.Load(), "the heartbeat not stopped")
}

// isClosed reports whether ch is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// A failed Release of a Lock whose heartbeat it stopped arms the expiry
// timer; every way the Lock ends after that stops the timer, so that it
// never fires for an ended Lock. (Stop returns false for a timer stopped
// before: its minute cannot have passed.)
func TestLeaseEndStopsTheExpiryTimer(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, k *Lock)
		want error
	}{
		{"released by a second Release", func(t *testing.T, k *Lock) {
			require.NoError(t, k.beginRelease(context.Background()))
			require.NoError(t, k.finishRelease(true, nil, time.Now()))
		}, ErrReleased},
		{"a second Release found it gone", func(t *testing.T, k *Lock) {
			require.NoError(t, k.beginRelease(context.Background()))
			require.ErrorIs(t, k.finishRelease(false, nil, time.Now()), ErrLockLost)
		}, ErrLockLost},
		{"a Refresh found it gone", func(t *testing.T, k *Lock) {
			require.ErrorIs(t, k.lost("refresh found the lock gone or taken"), ErrLockLost)
		}, ErrLockLost},
		{"a loss during a second Release that failed", func(t *testing.T, k *Lock) {
			require.NoError(t, k.beginRelease(context.Background()))
			require.ErrorIs(t, k.lost("refresh found the lock gone or taken"), ErrLockLost)
			require.NoError(t, k.Err(), "a loss during a Release ended the Lock before the Release did")
			require.ErrorIs(t, k.finishRelease(false, errTimeout, time.Now()), errTimeout)
		}, ErrLockLost},
	} {
		tc := tc
		for _, failure := range []error{errTimeout, redis.ErrPoolTimeout} {
			t.Run(tc.name+" after "+failure.Error(), func(t *testing.T) {
				r := newEndRecorder(t, time.Minute, true)
				r.failRelease(t, failure)
				assert.Equal(t, int32(1), r.stopped.Load(), "the failed Release did not stop the heartbeat")
				require.NotNil(t, r.k.expiry, "no expiry timer in place of the stopped heartbeat")
				tc.end(t, r.k)
				r.requireEnded(t, tc.want)
				assert.False(t, r.k.expiry.Stop(), "the expiry timer still armed after the Lock ended")
			})
		}
	}
}

// The expiry timer ends the Lock as lost when its lease runs out by the
// local clock, not before: a Refresh that succeeded meanwhile moves it
// on. A Lock that nobody watches (no Done, no onEnded, no observer) gets
// no timer: its calls find that its lease ran out.
func TestLeaseExpiryTimer(t *testing.T) {
	t.Run("ends the Lock at its lease", func(t *testing.T) {
		r := newEndRecorder(t, 60*time.Millisecond, true)
		r.failRelease(t, errTimeout)
		r.k.hold(time.Now(), 400*time.Millisecond) // a Refresh succeeded
		_, _, until := r.k.lease()
		time.Sleep(150 * time.Millisecond) // the first lease has run out
		require.NoError(t, r.k.Err(), "ended at the lease a Refresh had moved on")
		select {
		case <-r.k.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the Lock did not end at its lease")
		}
		assert.False(t, time.Now().Before(until), "ended %v before its lease ran out", time.Until(until))
		r.requireEnded(t, ErrLockLost)
		assert.Contains(t, r.k.Err().Error(), "the TTL ran out")
	})
	t.Run("a Refresh for a shorter TTL with no known outcome brings it nearer", func(t *testing.T) {
		r := newEndRecorder(t, time.Minute, false) // watched, by onEnded
		done := r.k.Done()                         // asked for before, as a caller would
		sent := time.Now()
		r.k.unknown(sent, sent, 60*time.Millisecond) // it may have run: the key may expire at sent+60ms
		_, _, until := r.k.lease()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("the Lock did not end at the lease the Refresh may have shortened")
		}
		assert.False(t, time.Now().Before(until), "ended %v before its lease ran out", time.Until(until))
		require.ErrorIs(t, r.k.Err(), ErrLockLost)
		assert.Contains(t, r.k.Err().Error(), "the TTL ran out")
	})
	t.Run("none when nobody watches", func(t *testing.T) {
		c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // nothing is sent
		t.Cleanup(func() { c.Close() })
		k, err := New(c).newLock("r")
		require.NoError(t, err)
		k.token = 7
		k.hold(time.Now(), 20*time.Millisecond)
		require.NoError(t, k.beginRelease(context.Background()))
		assert.ErrorIs(t, k.finishRelease(false, errTimeout, time.Now()), errTimeout)
		assert.Nil(t, k.expiry, "a timer armed for a Lock nobody watches")
		time.Sleep(60 * time.Millisecond)
		k.mu.Lock()
		state := k.state
		k.mu.Unlock()
		assert.Equal(t, leaseUncertain, state, "the Lock ended with nobody to see it")
		err = k.Err()
		require.ErrorIs(t, err, ErrLockLost, "Err did not find that the lease ran out")
		assert.Contains(t, err.Error(), "the TTL ran out")
		assert.Nil(t, k.expiry)
	})
}

// A loss found while a Release runs waits for the Release: one that
// released the lock ends the Lock released, one that failed ends it with
// the first loss found, one that found the key gone with its own loss.
func TestLeaseLossDuringRelease(t *testing.T) {
	for _, tc := range []struct {
		name    string
		held    bool
		err     error
		want    error
		wantMsg string
	}{
		{"released", true, nil, ErrReleased, "fencedlock: lock released"},
		{"release failed", false, errTimeout, ErrLockLost, "first loss"},
		{"release found it gone", false, nil, ErrLockLost, "release found the lock gone or taken"},
	} {
		tc := tc
		t.Run(tc.name, func(t *testing.T) {
			r := newEndRecorder(t, time.Minute, true)
			require.NoError(t, r.k.beginRelease(context.Background()))
			assert.ErrorIs(t, r.k.lost("first loss"), ErrLockLost)
			assert.ErrorIs(t, r.k.lose(evRanOut, "second loss"), ErrLockLost)
			require.NoError(t, r.k.Err())
			assert.False(t, isClosed(r.k.Done()))
			_ = r.k.finishRelease(tc.held, tc.err, time.Now())
			r.requireEnded(t, tc.want)
			if tc.want == ErrReleased {
				assert.NotErrorIs(t, r.k.Err(), ErrLockLost)
			} else {
				assert.NotErrorIs(t, r.k.Err(), ErrReleased)
			}
			assert.Contains(t, r.k.Err().Error(), tc.wantMsg)
			assert.Nil(t, r.k.expiry, "an ended Lock armed the expiry timer")
		})
	}
}

// A Release called while another runs waits for it: it finds the Lock
// released when that one released it, runs itself when that one failed,
// and stops waiting when its ctx ends.
func TestLeaseSecondReleaseWaits(t *testing.T) {
	second := func(k *Lock, ctx context.Context) <-chan error {
		got := make(chan error, 1)
		go func() { got <- k.beginRelease(ctx) }()
		return got
	}
	t.Run("the first released", func(t *testing.T) {
		r := newEndRecorder(t, time.Minute, true)
		require.NoError(t, r.k.beginRelease(context.Background()))
		got := second(r.k, context.Background())
		time.Sleep(20 * time.Millisecond)
		assert.Empty(t, got, "the second Release did not wait")
		require.NoError(t, r.k.finishRelease(true, nil, time.Now()))
		err := <-got
		assert.ErrorIs(t, err, ErrReleased)
		assert.Contains(t, err.Error(), `"r" (token 7)`)
	})
	t.Run("the first failed", func(t *testing.T) {
		r := newEndRecorder(t, time.Minute, true)
		require.NoError(t, r.k.beginRelease(context.Background()))
		got := second(r.k, context.Background())
		time.Sleep(20 * time.Millisecond)
		_ = r.k.finishRelease(false, errTimeout, time.Now())
		require.NoError(t, <-got, "the second Release did not run after the first failed")
		r.k.mu.Lock()
		state := r.k.state
		r.k.mu.Unlock()
		assert.Equal(t, leaseReleasingUncertain, state)
	})
	t.Run("its ctx ended", func(t *testing.T) {
		r := newEndRecorder(t, time.Minute, true)
		require.NoError(t, r.k.beginRelease(context.Background()))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		err := <-second(r.k, ctx)
		assert.ErrorIs(t, err, ErrUnavailable)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		cause := errors.New("shutting down")
		ctx, cancelCause := context.WithCancelCause(context.Background())
		cancelCause(cause)
		err = <-second(r.k, ctx)
		assert.ErrorIs(t, err, cause)
		assert.NotErrorIs(t, err, ErrUnavailable)
	})
}

// onEnded calls its function once with the end, or at once when the Lock
// has ended already.
func TestLeaseOnEnded(t *testing.T) {
	r := newEndRecorder(t, time.Minute, true)
	require.ErrorIs(t, r.k.lost("gone"), ErrLockLost)
	r.requireEnded(t, ErrLockLost)
	var late error
	r.k.onEnded(func(err error) { late = err })
	assert.Equal(t, r.k.Err(), late)
	require.ErrorIs(t, r.k.lost("again"), ErrLockLost)
	assert.Empty(t, r.ends, "onEnded called again")
}

// failEvalHook fails every script call while err is set, with that error.
type failEvalHook struct{ err atomic.Pointer[error] }

func (h *failEvalHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *failEvalHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *failEvalHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := h.err.Load(); err != nil && strings.HasPrefix(strings.ToLower(cmd.Name()), "eval") {
			cmd.SetErr(*err)
			return *err
		}
		return next(ctx, cmd)
	}
}

// A watched Lock released after a failed Release stopped its heartbeat
// leaves no expiry timer armed: on Redis, for a failure that may have run
// and one that was never sent.
func TestReleasedAfterAFailedReleaseLeavesNoTimer(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		for _, failure := range []error{errTimeout, redis.ErrPoolTimeout} {
			failure := failure
			h := &failEvalHook{}
			c := redis.NewClient(&redis.Options{Addr: b.Client.Options().Addr, MaxRetries: -1})
			c.AddHook(h)
			t.Cleanup(func() { c.Close() })
			ctx := context.Background()
			k, err := New(c, WithPrefix(b.Prefix)).Acquire(ctx, "timer", time.Minute, WithHeartbeat(0))
			require.NoError(t, err)
			k.Done() // watched: a timer takes the heartbeat's place
			h.err.Store(&failure)
			require.ErrorIs(t, k.Release(ctx), ErrUnavailable)
			require.NoError(t, k.Err())
			k.mu.Lock()
			timer := k.expiry
			k.mu.Unlock()
			require.NotNil(t, timer, "no expiry timer in place of the stopped heartbeat")
			h.err.Store(nil)
			require.NoError(t, k.Release(ctx))
			assert.Equal(t, ErrReleased, k.Err())
			assert.False(t, timer.Stop(), "the expiry timer still armed after the Lock was released (%v)", failure)
		}
	})
}

// A success sent before a Refresh or Release of unknown outcome returned
// leaves the Lock uncertain: the call may have run after it, shortening
// the lock or deleting it. Its lease's end moves on only as far as both
// may have left it, and not at all after a Release. A success sent after
// the call returned ends the uncertainty.
func TestSuccessSentBeforeAnUnknownCallLeavesTheLockUncertain(t *testing.T) {
	const long, short = 30 * time.Second, 2 * time.Second
	for _, tc := range []struct {
		name      string
		unknownOf time.Duration // the unknown Refresh's TTL; 0: a Release
		// the lease's end after the earlier success, from t1 (the
		// success's send), t2 (the unknown call's) and the end before
		want func(t1, t2, before time.Time) time.Time
	}{
		{"refresh for a shorter TTL", short, func(_, t2, _ time.Time) time.Time { return t2.Add(certainFor(short)) }},
		{"refresh for the same TTL", long, func(t1, _, _ time.Time) time.Time { return t1.Add(certainFor(long)) }},
		{"release", 0, func(_, _, before time.Time) time.Time { return before }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newEndRecorder(t, long, false)
			k := r.k
			k.mu.Lock()
			t1 := k.base.Add(time.Millisecond) // the success, sent first
			k.mu.Unlock()
			t2 := t1.Add(time.Millisecond)       // the call of unknown outcome, sent
			returned := t2.Add(time.Millisecond) // and given up
			if tc.unknownOf > 0 {
				k.unknown(t2, returned, tc.unknownOf)
			} else {
				require.NoError(t, k.beginRelease(context.Background()))
				require.ErrorIs(t, k.finishRelease(false, errTimeout, returned), errTimeout)
			}
			k.mu.Lock()
			before, base := k.until, k.base
			k.mu.Unlock()

			for _, sent := range []time.Time{t1, t2.Add(time.Millisecond / 2)} {
				k.hold(sent, long)
				k.mu.Lock()
				state, until := k.state, k.until
				k.mu.Unlock()
				assert.Equal(t, leaseUncertain, state, "a success sent before the unknown call returned made the Lock certain")
				assert.Equal(t, base, k.base, "a success sent before the unknown call returned moved the base")
				if sent == t1 {
					assert.Equal(t, tc.want(t1, t2, before), until, "the lease's end after a success sent before the unknown call")
				}
			}

			t3 := returned.Add(time.Millisecond)
			k.hold(t3, long)
			k.mu.Lock()
			state, until := k.state, k.until
			k.mu.Unlock()
			assert.Equal(t, leaseHeld, state, "a success sent after the unknown call returned left the Lock uncertain")
			assert.Equal(t, t3.Add(certainFor(long)), until)
		})
	}
}
