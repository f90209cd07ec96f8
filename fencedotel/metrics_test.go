package fencedotel_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/fencedotel"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

var (
	otAcquired    = fencedotel.AttrOutcome.String("acquired")
	otNotAcquired = fencedotel.AttrOutcome.String("not_acquired")
	otUnavailable = fencedotel.AttrOutcome.String("unavailable")
	otError       = fencedotel.AttrOutcome.String("error")
	otAccepted    = fencedotel.AttrOutcome.String("accepted")
	otStale       = fencedotel.AttrOutcome.String("stale")
	otTimeout     = fencedotel.AttrOutcome.String("timeout")
	otCanceled    = fencedotel.AttrOutcome.String("canceled")
	otResigned    = fencedotel.AttrOutcome.String("resigned")
	otLost        = fencedotel.AttrOutcome.String("lost")
	otTry         = fencedotel.AttrCall.String("try")
	otAcquire     = fencedotel.AttrCall.String("acquire")
	otDo          = fencedotel.AttrCall.String("do")
	otCampaign    = fencedotel.AttrCall.String("campaign")
)

// otAssertInstrument checks the kind, unit and temporality of metric name.
func otAssertInstrument(t *testing.T, ms map[string]metricdata.Metrics, name, unit string, want any) metricdata.Metrics {
	t.Helper()
	m, ok := ms[name]
	require.True(t, ok, "no metric %s among %v", name, ms)
	assert.Equal(t, unit, m.Unit, "unit of %s", name)
	assert.NotEmpty(t, m.Description, "description of %s", name)
	switch w := want.(type) {
	case metricdata.Histogram[float64]:
		_, ok := m.Data.(metricdata.Histogram[float64])
		assert.True(t, ok, "%s is a %T, not a float64 histogram", name, m.Data)
	case metricdata.Sum[int64]:
		got, ok := m.Data.(metricdata.Sum[int64])
		if assert.True(t, ok, "%s is a %T, not an int64 sum", name, m.Data) {
			assert.Equal(t, w.IsMonotonic, got.IsMonotonic, "%s: monotonic (a counter) or not (an up-down counter)", name)
		}
	}
	return m
}

var (
	otHistogram     = metricdata.Histogram[float64]{}
	otCounter       = metricdata.Sum[int64]{IsMonotonic: true}
	otUpDownCounter = metricdata.Sum[int64]{IsMonotonic: false}
)

// otNoResourceOrToken fails t if any data point of any metric has an
// attribute other than fencedlock.outcome and fencedlock.call, and
// fencedlock.election on the leaders.
func otNoResourceOrToken(t *testing.T, ms map[string]metricdata.Metrics) {
	t.Helper()
	for name, m := range ms {
		for _, set := range otAttrSets(t, m) {
			for _, kv := range set.ToSlice() {
				ok := kv.Key == fencedotel.AttrOutcome || kv.Key == fencedotel.AttrCall ||
					kv.Key == fencedotel.AttrElection && name == fencedotel.MetricElectionLeader
				assert.True(t, ok, "%s has the attribute %s=%s", name, kv.Key, kv.Value.String())
			}
		}
	}
}

// An acquire records its duration by outcome and raises the held gauge; a
// release lowers it and records how long the lock was held. No attribute
// names the resource or the token.
func TestMetricsAcquireAndRelease(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := otCtx(t)
		o := otNew(t)
		l := o.locker(b)
		lock, err := l.TryAcquire(ctx, "metrics", 10*time.Second)
		require.NoError(t, err)

		ms := o.metrics(t)
		acq := otAssertInstrument(t, ms, fencedotel.MetricAcquireDuration, "s", otHistogram)
		n, sum := otHist(t, acq, otTry, otAcquired)
		assert.Equal(t, uint64(1), n, "one acquire, acquired")
		assert.Positive(t, sum)
		assert.Less(t, sum, 5.0, "seconds, not milliseconds or nanoseconds")
		held := otAssertInstrument(t, ms, fencedotel.MetricLockHeld, "{lock}", otUpDownCounter)
		v, _ := otSum(t, held)
		assert.Equal(t, int64(1), v, "one lock held")

		time.Sleep(20 * time.Millisecond)
		require.NoError(t, lock.Release(ctx))
		ms = o.metrics(t)
		v, _ = otSum(t, ms[fencedotel.MetricLockHeld])
		assert.Equal(t, int64(0), v, "no lock held after the release")
		hold := otAssertInstrument(t, ms, fencedotel.MetricLockHoldTime, "s", otHistogram)
		n, sum = otHist(t, hold)
		assert.Equal(t, uint64(1), n, "one lock ended")
		assert.GreaterOrEqual(t, sum, 0.020, "held at least the sleep, in seconds")
		assert.Less(t, sum, 5.0, "seconds")
		lost, ok := otSum(t, ms[fencedotel.MetricLockLost])
		assert.True(t, ok, "no data point of the lost locks: they count from zero")
		assert.Zero(t, lost, "a released lock is not lost")
		otNoResourceOrToken(t, ms)
	})
}

// Every outcome of an acquire, by call, has its own data point: acquired,
// not_acquired (held), timeout and canceled (ctx ended while waiting, or
// before the call), error (bad argument), unavailable (no Redis).
func TestMetricsAcquireOutcomes(t *testing.T) {
	b := redistest.Mini(t)
	ctx := otCtx(t)
	o := otNew(t)
	l := o.locker(b)
	holder, err := l.TryAcquire(ctx, "outcomes", 10*time.Second)
	require.NoError(t, err)
	_, err = l.TryAcquire(ctx, "outcomes", time.Second)
	require.ErrorIs(t, err, fencedlock.ErrNotAcquired)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	_, err = l.Acquire(wctx, "outcomes", time.Second)
	cancel()
	require.ErrorIs(t, err, fencedlock.ErrNotAcquired)
	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(30*time.Millisecond, cancel)
	err = l.Do(cctx, "outcomes", time.Second, func(context.Context, *fencedlock.Lock) error { return nil })
	require.ErrorIs(t, err, context.Canceled)
	_, err = l.TryAcquire(cctx, "outcomes", time.Second)
	require.ErrorIs(t, err, context.Canceled)
	_, err = l.TryAcquire(ctx, "", time.Second)
	require.ErrorIs(t, err, fencedlock.ErrInvalidArgument)
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer down.Close()
	_, err = fencedlock.New(down, fencedlock.WithObserver(o.obs)).TryAcquire(ctx, "outcomes", time.Second)
	require.ErrorIs(t, err, fencedlock.ErrUnavailable)

	ms := o.metrics(t)
	acq := ms[fencedotel.MetricAcquireDuration]
	for _, c := range []struct {
		call, outcome attribute.KeyValue
	}{
		{otTry, otAcquired}, {otTry, otNotAcquired}, {otAcquire, otTimeout}, {otDo, otCanceled},
		{otTry, otCanceled}, {otTry, otError}, {otTry, otUnavailable},
	} {
		n, _ := otHist(t, acq, c.call, c.outcome)
		assert.Equal(t, uint64(1), n, "acquires with %s, %s", c.call.Value.String(), c.outcome.Value.String())
	}
	assert.Len(t, otAttrSets(t, acq), 7, "one data point per call and outcome")
	_, waited := otHist(t, acq, otAcquire, otTimeout)
	assert.GreaterOrEqual(t, waited, 0.030, "the Acquire that waited 30ms counts its wait")
	assert.Less(t, waited, 5.0, "in seconds")
	v, _ := otSum(t, ms[fencedotel.MetricLockHeld])
	assert.Equal(t, int64(1), v, "only the holder holds a lock")
	otNoResourceOrToken(t, ms)
	require.NoError(t, holder.Release(ctx))
}

// A lock whose key is deleted under its heartbeat ends lost: the lost
// counter goes up, the held gauge down, and its hold time is recorded.
func TestMetricsLostLock(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := otCtx(t)
		o := otNew(t)
		l := o.locker(b)
		lock, err := l.Acquire(ctx, "lost", 2*time.Second, fencedlock.WithHeartbeat(20*time.Millisecond))
		require.NoError(t, err)
		v, _ := otSum(t, o.metrics(t)[fencedotel.MetricLockHeld])
		require.Equal(t, int64(1), v)

		require.NoError(t, b.Client.Del(ctx, mustKey(l.Key("lost", "lock"))).Err())
		select {
		case <-lock.Done():
		case <-ctx.Done():
			t.Fatal("the heartbeat did not find the lock lost")
		}
		require.ErrorIs(t, lock.Err(), fencedlock.ErrLockLost)
		otEventually(t, func() bool {
			m, ok := o.metrics(t)[fencedotel.MetricLockLost]
			if !ok {
				return false
			}
			v, _ := otSum(t, m)
			return v == 1
		}, "the lost counter to count the lock")
		ms := o.metrics(t)
		otAssertInstrument(t, ms, fencedotel.MetricLockLost, "{lock}", otCounter)
		v, _ = otSum(t, ms[fencedotel.MetricLockHeld])
		assert.Equal(t, int64(0), v, "the lost lock is no longer held")
		n, _ := otHist(t, ms[fencedotel.MetricLockHoldTime])
		assert.Equal(t, uint64(1), n)
		otNoResourceOrToken(t, ms)
	})
}

// A write through ObserveStore is counted by outcome: the new holder's
// write is accepted, the old holder's, made with its lower token after it
// lost the lock, is stale, and a token of zero is an error.
func TestMetricsStoreWrites(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := otCtx(t)
		o := otNew(t)
		l := o.locker(b)
		store := fencedlock.ObserveStore(fencedlock.NewRedisStore(b.Client, fencedlock.WithStorePrefix(b.Prefix)), o.obs)

		old, err := l.TryAcquire(ctx, "queue", 10*time.Second)
		require.NoError(t, err)
		require.NoError(t, old.Release(ctx))
		current, err := l.TryAcquire(ctx, "queue", 10*time.Second)
		require.NoError(t, err)
		require.NoError(t, store.Put(ctx, "queue", current.Token(), []byte("new")))
		require.ErrorIs(t, store.Put(ctx, "queue", old.Token(), []byte("old")), fencedlock.ErrStaleToken)
		require.ErrorIs(t, store.Put(ctx, "queue", 0, []byte("none")), fencedlock.ErrInvalidToken)
		require.NoError(t, current.Release(ctx))

		ms := o.metrics(t)
		writes := otAssertInstrument(t, ms, fencedotel.MetricStoreWrites, "{write}", otCounter)
		for _, outcome := range []attribute.KeyValue{otAccepted, otStale, otError} {
			v, ok := otSum(t, writes, outcome)
			assert.True(t, ok, "no data point for %s", outcome.Value.String())
			assert.Equal(t, int64(1), v, "writes with %s", outcome.Value.String())
		}
		assert.Len(t, otAttrSets(t, writes), 3)
		otNoResourceOrToken(t, ms)
	})
}

// A Fence through ObserveStore, and the fenced read of Update, are
// counted as fences by outcome, apart from the writes: the current
// holder's Fence and Update are accepted (the Update also counts one
// accepted write); the old holder's Fence and Update, after the current
// holder fenced, are stale (the stale Update writes nothing); a zero
// token is an error.
func TestMetricsStoreFences(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := otCtx(t)
		o := otNew(t)
		l := o.locker(b)
		store := fencedlock.ObserveStore(fencedlock.NewRedisStore(b.Client, fencedlock.WithStorePrefix(b.Prefix)), o.obs)

		old, err := l.TryAcquire(ctx, "queue", 10*time.Second)
		require.NoError(t, err)
		require.NoError(t, old.Release(ctx))
		current, err := l.TryAcquire(ctx, "queue", 10*time.Second)
		require.NoError(t, err)
		add := func(v []byte, _ bool) ([]byte, error) { return append(v, '+'), nil }
		require.NoError(t, store.Fence(ctx, "queue", current.Token()))
		require.NoError(t, fencedlock.Update(ctx, store, "queue", current.Token(), add))
		require.ErrorIs(t, store.Fence(ctx, "queue", old.Token()), fencedlock.ErrStaleToken)
		require.ErrorIs(t, fencedlock.Update(ctx, store, "queue", old.Token(), add), fencedlock.ErrStaleToken)
		require.ErrorIs(t, store.Fence(ctx, "queue", 0), fencedlock.ErrInvalidToken)
		require.NoError(t, current.Release(ctx))

		ms := o.metrics(t)
		fences := otAssertInstrument(t, ms, fencedotel.MetricStoreFences, "{fence}", otCounter)
		for _, c := range []struct {
			outcome attribute.KeyValue
			want    int64
		}{{otAccepted, 2}, {otStale, 2}, {otError, 1}} {
			v, ok := otSum(t, fences, c.outcome)
			assert.True(t, ok, "no data point for %s", c.outcome.Value.String())
			assert.Equal(t, c.want, v, "fences with %s", c.outcome.Value.String())
		}
		assert.Len(t, otAttrSets(t, fences), 3)
		writes := ms[fencedotel.MetricStoreWrites]
		v, _ := otSum(t, writes, otAccepted)
		assert.Equal(t, int64(1), v, "the accepted Update's write")
		for _, outcome := range []attribute.KeyValue{otStale, otError} {
			v, _ := otSum(t, writes, outcome)
			assert.Zero(t, v, "no write but the accepted Update's: %s", outcome.Value.String())
		}
		otNoResourceOrToken(t, ms)
	})
}

// WithResourceAttribute(true) adds the resource to every metric, so the
// held gauge counts per resource.
func TestMetricsResourceAttribute(t *testing.T) {
	b := redistest.Mini(t)
	ctx := otCtx(t)
	o := otNew(t, fencedotel.WithResourceAttribute(true))
	l := o.locker(b)
	store := fencedlock.ObserveStore(fencedlock.NewMemoryStore(), o.obs)
	a, err := l.TryAcquire(ctx, "alpha", 10*time.Second)
	require.NoError(t, err)
	bb, err := l.TryAcquire(ctx, "beta", 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, store.Put(ctx, "alpha", a.Token(), []byte("a")))
	require.NoError(t, store.Fence(ctx, "beta", bb.Token()))
	require.NoError(t, a.Release(ctx))

	alpha, beta := fencedotel.AttrResource.String("alpha"), fencedotel.AttrResource.String("beta")
	ms := o.metrics(t)
	held := ms[fencedotel.MetricLockHeld]
	v, _ := otSum(t, held, alpha)
	assert.Equal(t, int64(0), v, "alpha released")
	v, _ = otSum(t, held, beta)
	assert.Equal(t, int64(1), v, "beta held")
	n, _ := otHist(t, ms[fencedotel.MetricAcquireDuration], otTry, otAcquired, beta)
	assert.Equal(t, uint64(1), n)
	n, _ = otHist(t, ms[fencedotel.MetricLockHoldTime], alpha)
	assert.Equal(t, uint64(1), n)
	w, _ := otSum(t, ms[fencedotel.MetricStoreWrites], otAccepted, alpha)
	assert.Equal(t, int64(1), w)
	f, _ := otSum(t, ms[fencedotel.MetricStoreFences], otAccepted, beta)
	assert.Equal(t, int64(1), f)
	for name, m := range ms {
		for _, set := range otAttrSets(t, m) {
			assert.True(t, set.HasValue(fencedotel.AttrResource), "%s: a data point without the resource: %v", name, set.ToSlice())
			assert.False(t, set.HasValue(fencedotel.AttrToken), "%s: a token is never a metric attribute", name)
		}
	}
	require.NoError(t, bb.Release(ctx))
}
