package fencedlock_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
	"github.com/fencedlock/fencedlock/observe"
)

// obsRecorder is an Observer that records every event, and marks the ctx
// it returns for start events so that tests can see it passed on.
type obsRecorder struct {
	mu     sync.Mutex
	events []observe.Event
	ctxOK  []bool // per event: whether ctx carried the mark of a start event
}

type obsMark struct{}

func (r *obsRecorder) Observe(ctx context.Context, e observe.Event) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	r.ctxOK = append(r.ctxOK, ctx.Value(obsMark{}) != nil)
	switch e.Kind {
	case observe.AcquireStart, observe.ReleaseStart, observe.StoreWriteStart:
		return context.WithValue(ctx, obsMark{}, e.Kind)
	}
	return ctx
}

func (r *obsRecorder) take() []observe.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	ev := r.events
	r.events, r.ctxOK = nil, nil
	return ev
}

func (r *obsRecorder) kinds() []observe.Kind {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := make([]observe.Kind, len(r.events))
	for i, e := range r.events {
		k[i] = e.Kind
	}
	return k
}

func (r *obsRecorder) find(kind observe.Kind) (observe.Event, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if e.Kind == kind {
			return e, true
		}
	}
	return observe.Event{}, false
}

// An acquire and release report their start and end, with the start's ctx
// passed on to the end, and the lock's end with how long it was held.
func TestObserverSeesAcquireAndRelease(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rec := &obsRecorder{}
		l := fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix), fencedlock.WithObserver(rec))
		lock, err := l.TryAcquire(ctx, "obs", longTTL)
		require.NoError(t, err)
		time.Sleep(5 * time.Millisecond)
		require.NoError(t, lock.Release(ctx))

		ev := rec.take()
		kinds := make([]observe.Kind, len(ev))
		for i, e := range ev {
			kinds[i] = e.Kind
			assert.Equal(t, "obs", e.Resource, "event %v", e.Kind)
		}
		require.Equal(t, []observe.Kind{
			observe.AcquireStart, observe.AcquireEnd,
			observe.ReleaseStart, observe.LockEnd, observe.ReleaseEnd,
		}, kinds)
		end := ev[1]
		assert.Equal(t, observe.Acquired, end.Outcome)
		assert.EqualValues(t, lock.Token(), end.Token)
		assert.Equal(t, longTTL, end.TTL)
		assert.Positive(t, end.Duration)
		assert.NoError(t, end.Err)
		lockEnd := ev[3]
		assert.Equal(t, observe.Released, lockEnd.Outcome)
		assert.EqualValues(t, lock.Token(), lockEnd.Token)
		assert.GreaterOrEqual(t, lockEnd.Duration, 5*time.Millisecond, "held at least the sleep")
		assert.ErrorIs(t, lockEnd.Err, fencedlock.ErrReleased)
		assert.NoError(t, ev[4].Err)
	})
}

// The ctx an Observer returns for a start event is the one the operation
// goes on with, and the one its end event gets.
func TestObserverCtxIsPassedOn(t *testing.T) {
	b := redistest.Mini(t)
	ctx := testCtx(t)
	rec := &obsRecorder{}
	l := fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix), fencedlock.WithObserver(rec))
	lock, err := l.Acquire(ctx, "obs", longTTL)
	require.NoError(t, err)
	require.NoError(t, lock.Release(ctx))
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for i, e := range rec.events {
		switch e.Kind {
		case observe.AcquireEnd, observe.ReleaseEnd:
			assert.True(t, rec.ctxOK[i], "%v did not get the ctx its start event returned", e.Kind)
		}
	}
}

// The outcomes of acquires that fail: a held lock, a ctx that ended, an
// unreachable Redis, a bad argument.
func TestObserverAcquireOutcomes(t *testing.T) {
	b := redistest.Mini(t)
	ctx := testCtx(t)
	rec := &obsRecorder{}
	l := fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix), fencedlock.WithObserver(rec))
	holder := mustTryAcquire(t, ctx, newLocker(b), "held", longTTL)
	defer holder.Release(ctx)

	check := func(want observe.Outcome, wantErr error, call func() (*fencedlock.Lock, error)) {
		t.Helper()
		lock, err := call()
		require.Nil(t, lock)
		require.ErrorIs(t, err, wantErr)
		e, ok := rec.find(observe.AcquireEnd)
		require.True(t, ok, "no acquire_end event")
		assert.Equal(t, want, e.Outcome)
		assert.Zero(t, e.Token)
		assert.Equal(t, err, e.Err, "the event carries the error returned")
		_, ended := rec.find(observe.LockEnd)
		assert.False(t, ended, "a lock never held reported an end")
		rec.take()
	}
	check(observe.NotAcquired, fencedlock.ErrNotAcquired, func() (*fencedlock.Lock, error) {
		return l.TryAcquire(ctx, "held", longTTL)
	})
	wctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	check(observe.Timeout, context.DeadlineExceeded, func() (*fencedlock.Lock, error) {
		return l.Acquire(wctx, "held", longTTL)
	})
	cctx, cancelNow := context.WithCancel(ctx)
	time.AfterFunc(30*time.Millisecond, cancelNow)
	check(observe.Canceled, context.Canceled, func() (*fencedlock.Lock, error) {
		return l.Acquire(cctx, "held", longTTL)
	})
	check(observe.Canceled, fencedlock.ErrNotAcquired, func() (*fencedlock.Lock, error) {
		return l.TryAcquire(cctx, "held", longTTL) // ctx ended before the call
	})
	check(observe.Failed, fencedlock.ErrInvalidArgument, func() (*fencedlock.Lock, error) {
		return l.TryAcquire(ctx, "", longTTL)
	})
	unreachable := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer unreachable.Close()
	down := fencedlock.New(unreachable, fencedlock.WithObserver(rec))
	check(observe.Unavailable, fencedlock.ErrUnavailable, func() (*fencedlock.Lock, error) {
		return down.TryAcquire(ctx, "down", longTTL)
	})
}

// A release that hands the lock to a waiter reports the hand-over with the
// waiter's token; a lock found lost reports its end as lost, and the
// logger warns of it.
func TestObserverHandOverAndLoss(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		rec := &obsRecorder{}
		logs := &syncBuffer{}
		logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		l := fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix), fencedlock.WithObserver(rec), fencedlock.WithLogger(logger))
		holder := mustTryAcquire(t, ctx, l, "handover", longTTL)
		waiting := newLocker(b)
		done := acquireAsync(ctx, waiting, "handover", 500*time.Millisecond, fencedlock.WithHeartbeat(0))
		awaitQueued(t, b, waiting, "handover")
		require.NoError(t, holder.Release(ctx))
		waiter := awaitAcquired(t, done)
		e, ok := rec.find(observe.HandOver)
		require.True(t, ok, "no hand_over event: %v", rec.kinds())
		assert.EqualValues(t, waiter.Token(), e.Token)

		// A lock of this Locker, found lost by its heartbeat.
		rec.take()
		require.NoError(t, waiter.Release(ctx))
		lock, err := l.Acquire(ctx, "lost", 300*time.Millisecond, fencedlock.WithHeartbeat(50*time.Millisecond))
		require.NoError(t, err)
		require.NoError(t, b.Client.Del(ctx, l.LockKey("lost")).Err())
		select {
		case <-lock.Done():
		case <-ctx.Done():
			t.Fatal("the heartbeat did not find the lock lost")
		}
		waitUntil(t, func() bool { _, ok := rec.find(observe.LockEnd); return ok }, "the lock_end event")
		end, _ := rec.find(observe.LockEnd)
		assert.Equal(t, observe.Lost, end.Outcome)
		assert.EqualValues(t, lock.Token(), end.Token)
		assert.ErrorIs(t, end.Err, fencedlock.ErrLockLost)

		records := logRecords(t, logs.String())
		lost := findLogRecord(records, "fencedlock: lock lost")
		require.NotNil(t, lost, "no Warn record of the loss in:\n%s", logs.String())
		assert.Equal(t, "WARN", lost["level"])
		assert.Equal(t, "lost", lost["resource"])
		assert.Equal(t, lock.Token().String(), lost["token"], "token is logged in decimal")
		assert.Contains(t, lost["err"], "lock lost")
		granted := findLogRecord(records, "fencedlock: lock granted")
		require.NotNil(t, granted, "no Debug record of a grant")
		assert.Equal(t, "DEBUG", granted["level"])
		for _, key := range []string{"resource", "token", "ttl", "wait"} {
			assert.Contains(t, granted, key)
		}
		assert.NotNil(t, findLogRecord(records, "fencedlock: lock handed over"), "no record of the hand-over")
		assert.NotNil(t, findLogRecord(records, "fencedlock: lock released"), "no record of the release")
	})
}

// A heartbeat refresh that fails and will be retried is reported, and
// logged at Warn.
func TestObserverRefreshFailed(t *testing.T) {
	b := redistest.Real(t)
	ctx := testCtx(t)
	rec := &obsRecorder{}
	logs := &syncBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	p := redistest.NewProxy(t, b.Client.Options().Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ReadTimeout: 100 * time.Millisecond})
	defer c.Close()
	l := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix), fencedlock.WithObserver(rec), fencedlock.WithLogger(logger))
	lock, err := l.Acquire(ctx, "refresh", 3*time.Second, fencedlock.WithHeartbeat(100*time.Millisecond))
	require.NoError(t, err)
	// The reply to the next refresh is lost: it fails at the client's
	// read timeout, and the heartbeat tries again.
	p.DropReplies(1)
	waitUntil(t, func() bool { _, ok := rec.find(observe.RefreshFailed); return ok }, "a refresh_failed event")
	e, _ := rec.find(observe.RefreshFailed)
	assert.EqualValues(t, lock.Token(), e.Token)
	assert.Equal(t, 3*time.Second, e.TTL)
	assert.Error(t, e.Err)
	require.NoError(t, lock.Refresh(ctx, 3*time.Second), "the lock is still held")
	rec2 := findLogRecord(logRecords(t, logs.String()), "fencedlock: heartbeat refresh failed")
	require.NotNil(t, rec2, "no Warn record in:\n%s", logs.String())
	assert.Equal(t, "WARN", rec2["level"])
	require.NoError(t, lock.Release(ctx))
}

// ObserveStore reports every write with its outcome, and passes values,
// tokens and errors through unchanged.
func TestObserveStore(t *testing.T) {
	ctx := context.Background()
	rec := &obsRecorder{}
	inner := fencedlock.NewMemoryStore()
	s := fencedlock.ObserveStore(inner, rec)
	require.NoError(t, s.Put(ctx, "r", 5, []byte("five")))
	err := s.Put(ctx, "r", 4, []byte("four"))
	var stale *fencedlock.StaleTokenError
	require.ErrorAs(t, err, &stale, "the store's own error type passes through")
	errInvalid := s.Put(ctx, "r", 0, []byte("zero"))
	require.ErrorIs(t, errInvalid, fencedlock.ErrInvalidToken)
	v, tok, err := s.Get(ctx, "r")
	require.NoError(t, err)
	assert.Equal(t, "five", string(v))
	assert.Equal(t, fencedlock.Token(5), tok)

	ev := rec.take()
	require.Len(t, ev, 6, "a start and an end per write, nothing for Get")
	want := []observe.Outcome{observe.Accepted, observe.Stale, observe.Failed}
	for i, o := range want {
		start, end := ev[2*i], ev[2*i+1]
		assert.Equal(t, observe.StoreWriteStart, start.Kind)
		assert.Equal(t, observe.StoreWriteEnd, end.Kind)
		assert.Equal(t, o, end.Outcome, "write %d", i)
		assert.Equal(t, "r", end.Resource)
	}
	assert.EqualValues(t, 4, ev[3].Token)
	assert.Equal(t, errInvalid, ev[5].Err)
	assert.Same(t, inner, fencedlock.ObserveStore(inner, nil), "no observer: the store itself")
}

// A value written to a store is never logged.
func TestLoggerNeverLogsValues(t *testing.T) {
	b := redistest.Mini(t)
	ctx := testCtx(t)
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	l := fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix), fencedlock.WithLogger(logger))
	require.NoError(t, l.Do(ctx, "secret", time.Second, func(ctx context.Context, lock *fencedlock.Lock) error {
		return newRedisStore(b).Put(ctx, "secret", lock.Token(), []byte("s3cr3t-value"))
	}))
	require.NotEmpty(t, logs.String(), "Debug records expected")
	assert.NotContains(t, logs.String(), "s3cr3t-value")
}

func logRecords(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), "log line %q", line)
		out = append(out, m)
	}
	return out
}

func findLogRecord(records []map[string]any, msg string) map[string]any {
	for _, r := range records {
		if r["msg"] == msg {
			return r
		}
	}
	return nil
}
