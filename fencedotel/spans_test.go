package fencedotel_test

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/fencedotel"
	"github.com/fencedlock/fencedlock/internal/redistest"
	"github.com/fencedlock/fencedlock/observe"
)

// otSpanHook is a go-redis hook that records the span in the ctx of
// every command and pipeline the client sends.
type otSpanHook struct {
	mu    sync.Mutex
	spans map[trace.SpanID]int // commands sent per span in their ctx
}

func (h *otSpanHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *otSpanHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.note(ctx)
		return next(ctx, cmd)
	}
}

func (h *otSpanHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.note(ctx)
		return next(ctx, cmds)
	}
}

func (h *otSpanHook) note(ctx context.Context) {
	id := trace.SpanContextFromContext(ctx).SpanID()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.spans == nil {
		h.spans = map[trace.SpanID]int{}
	}
	h.spans[id]++
}

func (h *otSpanHook) sent(id trace.SpanID) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.spans[id]
}

// otWaitSlackMS is how much longer, in ms, the wait of an acquire may be
// than its span: the Locker times the wait from the call, and the span
// starts a moment later.
const otWaitSlackMS = 5

// otSpanMS returns the duration of span s in milliseconds.
func otSpanMS(s sdktrace.ReadOnlySpan) float64 {
	return float64(s.EndTime().Sub(s.StartTime())) / float64(time.Millisecond)
}

// otOne returns the one ended span named name.
func otOne(t *testing.T, o *otTelemetry, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	spans := o.ended(name)
	require.Len(t, spans, 1, "ended spans named %s", name)
	return spans[0]
}

// otAssertAttr checks that span s has attribute key with value want.
func otAssertAttr(t *testing.T, s sdktrace.ReadOnlySpan, key attribute.Key, want attribute.Value) {
	t.Helper()
	got, ok := otAttr(s, key)
	if assert.True(t, ok, "%s has no attribute %s", s.Name(), key) {
		assert.Equal(t, want, got, "%s: %s", s.Name(), key)
	}
}

// An acquire and a release each have a span, a child of the caller's,
// with the resource, TTL, token, outcome and wait; the Redis commands
// they send carry their span; the caller's span is left running.
func TestSpansAcquireAndRelease(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		o := otNew(t)
		hook := &otSpanHook{}
		b.Client.AddHook(hook)
		l := o.locker(b)
		ctx, caller := o.tp.Tracer("test").Start(otCtx(t), "caller")

		lock, err := l.TryAcquire(ctx, "spans", 10*time.Second)
		require.NoError(t, err)
		require.NoError(t, lock.Release(ctx))
		assert.True(t, caller.IsRecording(), "the caller's span was ended")
		caller.End()

		acq := otOne(t, o, fencedotel.SpanAcquire)
		assert.Equal(t, caller.SpanContext().SpanID(), acq.Parent().SpanID(), "a child of the caller's span")
		assert.Equal(t, trace.SpanKindInternal, acq.SpanKind())
		otAssertAttr(t, acq, fencedotel.AttrResource, attribute.StringValue("spans"))
		otAssertAttr(t, acq, fencedotel.AttrTTL, attribute.Int64Value(10000))
		otAssertAttr(t, acq, fencedotel.AttrToken, attribute.Int64Value(int64(lock.Token())))
		otAssertAttr(t, acq, fencedotel.AttrOutcome, attribute.StringValue("acquired"))
		wait, ok := otAttr(acq, fencedotel.AttrWait)
		if assert.True(t, ok, "no wait attribute") {
			assert.Equal(t, attribute.FLOAT64, wait.Type())
			assert.Positive(t, wait.AsFloat64())
			assert.LessOrEqual(t, wait.AsFloat64(), otSpanMS(acq)+otWaitSlackMS, "the wait, in ms, about the span's duration")
		}
		assert.Equal(t, codes.Unset, acq.Status().Code)
		assert.Equal(t, fencedotel.ScopeName, acq.InstrumentationScope().Name)
		assert.Positive(t, hook.sent(acq.SpanContext().SpanID()), "no Redis command of the acquire carried its span")

		rel := otOne(t, o, fencedotel.SpanRelease)
		assert.Equal(t, caller.SpanContext().SpanID(), rel.Parent().SpanID())
		otAssertAttr(t, rel, fencedotel.AttrResource, attribute.StringValue("spans"))
		otAssertAttr(t, rel, fencedotel.AttrToken, attribute.Int64Value(int64(lock.Token())))
		assert.Equal(t, codes.Unset, rel.Status().Code)
		assert.Positive(t, hook.sent(rel.SpanContext().SpanID()), "no Redis command of the release carried its span")
		assert.Len(t, o.spans.Ended(), 3, "the acquire's, the release's and the caller's")
	})
}

// A failed acquire, and a release of a lock already lost, end their
// spans with the error status and the error recorded.
func TestSpansFailures(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := otCtx(t)
		o := otNew(t)
		l := o.locker(b)
		holder, err := l.TryAcquire(ctx, "failing", 10*time.Second)
		require.NoError(t, err)
		_, err = l.TryAcquire(ctx, "failing", 10*time.Second)
		require.ErrorIs(t, err, fencedlock.ErrNotAcquired)

		acqs := o.ended(fencedotel.SpanAcquire)
		require.Len(t, acqs, 2)
		refused := acqs[1]
		otAssertAttr(t, refused, fencedotel.AttrOutcome, attribute.StringValue("not_acquired"))
		_, hasToken := otAttr(refused, fencedotel.AttrToken)
		assert.False(t, hasToken, "no token without a grant")
		assert.Equal(t, codes.Error, refused.Status().Code)
		assert.Equal(t, err.Error(), refused.Status().Description)
		otAssertErrorEvent(t, refused, err)

		// An Acquire that waits 30ms and gives up: the wait, in ms.
		wctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		_, err = l.Acquire(wctx, "failing", 10*time.Second)
		cancel()
		require.ErrorIs(t, err, fencedlock.ErrNotAcquired)
		acqs = o.ended(fencedotel.SpanAcquire)
		require.Len(t, acqs, 3)
		waited := acqs[2]
		otAssertAttr(t, waited, fencedotel.AttrOutcome, attribute.StringValue("timeout"))
		assert.Equal(t, codes.Error, waited.Status().Code)
		wait, ok := otAttr(waited, fencedotel.AttrWait)
		require.True(t, ok, "no wait attribute")
		assert.GreaterOrEqual(t, wait.AsFloat64(), 30.0, "waited 30ms at least")
		assert.LessOrEqual(t, wait.AsFloat64(), otSpanMS(waited)+otWaitSlackMS, "about the span's duration")

		require.NoError(t, b.Client.Del(ctx, mustKey(l.Key("failing", "lock"))).Err())
		err = holder.Release(ctx)
		require.ErrorIs(t, err, fencedlock.ErrLockLost)
		rel := otOne(t, o, fencedotel.SpanRelease)
		assert.Equal(t, codes.Error, rel.Status().Code)
		otAssertErrorEvent(t, rel, err)
	})
}

// otAssertErrorEvent checks that span s recorded err as an exception event.
func otAssertErrorEvent(t *testing.T, s sdktrace.ReadOnlySpan, err error) {
	t.Helper()
	for _, ev := range s.Events() {
		if ev.Name != "exception" {
			continue
		}
		for _, kv := range ev.Attributes {
			if kv.Key == "exception.message" {
				assert.Equal(t, err.Error(), kv.Value.AsString())
				return
			}
		}
	}
	t.Errorf("%s recorded no exception event for %v: %v", s.Name(), err, s.Events())
}

// A write through ObserveStore has a span with its outcome; a stale one
// has the error status.
func TestSpansStorePut(t *testing.T) {
	ctx := otCtx(t)
	o := otNew(t)
	store := fencedlock.ObserveStore(fencedlock.NewMemoryStore(), o.obs)
	require.NoError(t, store.Put(ctx, "doc", 7, []byte("seven")))
	err := store.Put(ctx, "doc", 6, []byte("six"))
	require.ErrorIs(t, err, fencedlock.ErrStaleToken)

	puts := o.ended(fencedotel.SpanStorePut)
	require.Len(t, puts, 2)
	otAssertAttr(t, puts[0], fencedotel.AttrResource, attribute.StringValue("doc"))
	otAssertAttr(t, puts[0], fencedotel.AttrToken, attribute.Int64Value(7))
	otAssertAttr(t, puts[0], fencedotel.AttrOutcome, attribute.StringValue("accepted"))
	assert.Equal(t, codes.Unset, puts[0].Status().Code)
	_, hasTTL := otAttr(puts[0], fencedotel.AttrTTL)
	assert.False(t, hasTTL, "a write has no TTL")
	otAssertAttr(t, puts[1], fencedotel.AttrToken, attribute.Int64Value(6))
	otAssertAttr(t, puts[1], fencedotel.AttrOutcome, attribute.StringValue("stale"))
	assert.Equal(t, codes.Error, puts[1].Status().Code)
	otAssertErrorEvent(t, puts[1], err)
}

// A Fence through ObserveStore, and the fenced read of Update, have a
// span with the resource, the token and the outcome, a child of the
// caller's; the Redis command of the fence carries it; a stale fence has
// the error status. Update's fence span ends before its put span starts:
// fn runs between them.
func TestSpansStoreFence(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		o := otNew(t)
		hook := &otSpanHook{}
		b.Client.AddHook(hook)
		store := fencedlock.ObserveStore(fencedlock.NewRedisStore(b.Client, fencedlock.WithStorePrefix(b.Prefix)), o.obs)
		ctx, caller := o.tp.Tracer("test").Start(otCtx(t), "caller")

		require.NoError(t, store.Fence(ctx, "doc", 7))
		err := fencedlock.Update(ctx, store, "doc", 6, func([]byte, bool) ([]byte, error) {
			t.Error("Update called fn after a stale fence")
			return nil, nil
		})
		require.ErrorIs(t, err, fencedlock.ErrStaleToken)
		var fnRan time.Time
		require.NoError(t, fencedlock.Update(ctx, store, "doc", 8, func([]byte, bool) ([]byte, error) {
			fnRan = time.Now()
			return []byte("eight"), nil
		}))
		caller.End()

		fences := o.ended(fencedotel.SpanStoreFence)
		require.Len(t, fences, 3, "a Fence and two Updates")
		for i, want := range []struct {
			token   int64
			outcome string
			status  codes.Code
		}{{7, "accepted", codes.Unset}, {6, "stale", codes.Error}, {8, "accepted", codes.Unset}} {
			f := fences[i]
			assert.Equal(t, caller.SpanContext().SpanID(), f.Parent().SpanID(), "fence %d: a child of the caller's span", i)
			otAssertAttr(t, f, fencedotel.AttrResource, attribute.StringValue("doc"))
			otAssertAttr(t, f, fencedotel.AttrToken, attribute.Int64Value(want.token))
			otAssertAttr(t, f, fencedotel.AttrOutcome, attribute.StringValue(want.outcome))
			assert.Equal(t, want.status, f.Status().Code, "fence %d", i)
			assert.Positive(t, hook.sent(f.SpanContext().SpanID()), "fence %d: no Redis command carried its span", i)
		}
		otAssertErrorEvent(t, fences[1], err)

		put := otOne(t, o, fencedotel.SpanStorePut)
		assert.Equal(t, caller.SpanContext().SpanID(), put.Parent().SpanID(), "Update's put is a sibling of its fence")
		otAssertAttr(t, put, fencedotel.AttrToken, attribute.Int64Value(8))
		assert.False(t, fences[2].EndTime().After(fnRan), "Update's fence span ended after fn ran")
		assert.False(t, put.StartTime().Before(fnRan), "Update's put span started before fn ran")
	})
}

// A token above math.MaxInt64 is a string attribute, in decimal; one at
// or below, an int64. None shows as a negative number.
func TestSpansLargeToken(t *testing.T) {
	ctx := otCtx(t)
	o := otNew(t)
	store := fencedlock.ObserveStore(fencedlock.NewMemoryStore(), o.obs)
	require.NoError(t, store.Put(ctx, "max", fencedlock.Token(math.MaxInt64), []byte("v")))
	require.NoError(t, store.Put(ctx, "max", fencedlock.Token(math.MaxInt64)+1, []byte("v")))
	require.NoError(t, store.Put(ctx, "max", fencedlock.Token(math.MaxUint64), []byte("v")))
	puts := o.ended(fencedotel.SpanStorePut)
	require.Len(t, puts, 3)
	otAssertAttr(t, puts[0], fencedotel.AttrToken, attribute.Int64Value(math.MaxInt64))
	otAssertAttr(t, puts[1], fencedotel.AttrToken, attribute.StringValue("9223372036854775808"))
	otAssertAttr(t, puts[2], fencedotel.AttrToken, attribute.StringValue("18446744073709551615"))
}

// A release that hands the lock to a waiter adds a hand-over event, with
// the waiter's token, to the release's span.
func TestSpansHandOver(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := otCtx(t)
		o := otNew(t)
		l := o.locker(b)
		holder, err := l.TryAcquire(ctx, "handover", 10*time.Second)
		require.NoError(t, err)
		other := fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix))
		type result struct {
			lock *fencedlock.Lock
			err  error
		}
		done := make(chan result, 1)
		go func() {
			lock, err := other.Acquire(ctx, "handover", 10*time.Second)
			done <- result{lock, err}
		}()
		otEventually(t, func() bool {
			info, err := l.Inspect(ctx, "handover")
			return err == nil && info.Waiters == 1
		}, "the waiter to queue")
		require.NoError(t, holder.Release(ctx))
		r := <-done
		require.NoError(t, r.err)
		defer r.lock.Release(ctx)

		rel := otOne(t, o, fencedotel.SpanRelease)
		var found bool
		for _, ev := range rel.Events() {
			if ev.Name != fencedotel.EventHandOver {
				continue
			}
			found = true
			assert.Equal(t, []attribute.KeyValue{fencedotel.AttrToken.Int64(int64(r.lock.Token()))}, ev.Attributes)
		}
		assert.True(t, found, "no hand-over event on the release span: %v", rel.Events())
	})
}

// An end event ends only a span that this Observer started for that
// operation: not the caller's span, nor another Observer's.
func TestSpansNeverEndOthers(t *testing.T) {
	o := otNew(t)
	ctx, caller := o.tp.Tracer("test").Start(otCtx(t), "caller")
	for _, kind := range []observe.Kind{observe.AcquireEnd, observe.ReleaseEnd, observe.StoreWriteEnd, observe.StoreFenceEnd} {
		got := o.obs.Observe(ctx, observe.Event{Kind: kind, Resource: "r", Token: 1, Outcome: observe.Acquired})
		assert.Equal(t, ctx, got, "%v returns ctx", kind)
	}
	assert.True(t, caller.IsRecording(), "an end event ended the caller's span")
	assert.Empty(t, o.spans.Ended())

	// Another Observer's operation, ended by this one: untouched.
	other := otNew(t)
	for _, c := range []struct{ start, end observe.Kind }{
		{observe.AcquireStart, observe.AcquireEnd},
		{observe.ReleaseStart, observe.ReleaseEnd},
		{observe.StoreWriteStart, observe.StoreWriteEnd},
		{observe.StoreFenceStart, observe.StoreFenceEnd},
	} {
		octx := other.obs.Observe(ctx, observe.Event{Kind: c.start, Resource: "r", Token: 1})
		theirs := trace.SpanFromContext(octx)
		require.NotEqual(t, caller.SpanContext().SpanID(), theirs.SpanContext().SpanID(), "%v started a span", c.start)
		o.obs.Observe(octx, observe.Event{Kind: c.end, Resource: "r", Token: 1})
		assert.True(t, theirs.IsRecording(), "%v of one Observer ended another's span", c.end)
		other.obs.Observe(octx, observe.Event{Kind: c.end, Resource: "r", Token: 1})
		assert.False(t, theirs.IsRecording(), "%v of its own Observer did not end the span", c.end)
	}
	assert.Empty(t, o.spans.Ended())
	assert.Len(t, other.spans.Ended(), 4)

	// The span of an operation nested in another of the same kind: each
	// end ends its own.
	outer := o.obs.Observe(ctx, observe.Event{Kind: observe.StoreWriteStart, Resource: "outer", Token: 1})
	inner := o.obs.Observe(outer, observe.Event{Kind: observe.StoreWriteStart, Resource: "inner", Token: 1})
	o.obs.Observe(inner, observe.Event{Kind: observe.StoreWriteEnd, Resource: "inner", Token: 1})
	assert.True(t, trace.SpanFromContext(outer).IsRecording(), "the inner end ended the outer span")
	o.obs.Observe(outer, observe.Event{Kind: observe.StoreWriteEnd, Resource: "outer", Token: 1})
	puts := o.ended(fencedotel.SpanStorePut)
	require.Len(t, puts, 2)
	otAssertAttr(t, puts[0], fencedotel.AttrResource, attribute.StringValue("inner"))
	otAssertAttr(t, puts[1], fencedotel.AttrResource, attribute.StringValue("outer"))
	assert.True(t, caller.IsRecording())
	caller.End()
}
