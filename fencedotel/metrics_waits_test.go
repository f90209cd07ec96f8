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

// otValue returns the value of the data point of the Sum name with attrs
// in ms, failing t when there is none.
func otValue(t *testing.T, ms map[string]metricdata.Metrics, name string, attrs ...attribute.KeyValue) int64 {
	t.Helper()
	m, ok := ms[name]
	require.True(t, ok, "no metric %s", name)
	v, ok := otSum(t, m, attrs...)
	require.True(t, ok, "no data point of %s with %v", name, attrs)
	return v
}

// Without the resource attribute, every counter reports zero for each of
// its outcomes from the start, and the gauges read zero, so that the first
// loss, stale write or failed refresh shows as an increase. With it, the
// resources are not known ahead: nothing is reported before the first
// event.
func TestMetricsZeroFromTheStart(t *testing.T) {
	o := otNew(t)
	ms := o.metrics(t)
	otAssertInstrument(t, ms, fencedotel.MetricWaiters, "{waiter}", otUpDownCounter)
	otAssertInstrument(t, ms, fencedotel.MetricRefreshFailures, "{refresh}", otCounter)
	otAssertInstrument(t, ms, fencedotel.MetricElectionTerms, "{term}", otCounter)
	for _, c := range []struct {
		name  string
		attrs []attribute.KeyValue
	}{
		{fencedotel.MetricLockLost, nil},
		{fencedotel.MetricRefreshFailures, nil},
		{fencedotel.MetricLockHeld, nil},
		{fencedotel.MetricWaiters, []attribute.KeyValue{otAcquire}},
		{fencedotel.MetricWaiters, []attribute.KeyValue{otDo}},
		{fencedotel.MetricWaiters, []attribute.KeyValue{otCampaign}},
		{fencedotel.MetricStoreWrites, []attribute.KeyValue{otAccepted}},
		{fencedotel.MetricStoreWrites, []attribute.KeyValue{otStale}},
		{fencedotel.MetricStoreWrites, []attribute.KeyValue{otError}},
		{fencedotel.MetricStoreFences, []attribute.KeyValue{otAccepted}},
		{fencedotel.MetricStoreFences, []attribute.KeyValue{otStale}},
		{fencedotel.MetricStoreFences, []attribute.KeyValue{otError}},
		{fencedotel.MetricElectionTerms, []attribute.KeyValue{otResigned}},
		{fencedotel.MetricElectionTerms, []attribute.KeyValue{otLost}},
	} {
		assert.Zero(t, otValue(t, ms, c.name, c.attrs...), "%s %v", c.name, c.attrs)
	}
	otNoResourceOrToken(t, ms)

	ms = otNew(t, fencedotel.WithResourceAttribute(true)).metrics(t)
	assert.Empty(t, ms, "data points before any event, with the resource attribute")
}

// The waiters gauge counts the goroutines waiting in Acquire, by call:
// one refused, one queued behind it in the same Locker, one Do; it falls
// back to zero when they are served, or give up.
func TestMetricsWaiters(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := otCtx(t)
		o := otNew(t)
		l := o.locker(b)
		holder, err := l.TryAcquire(ctx, "waiters", 10*time.Second)
		require.NoError(t, err)
		waiters := func(call attribute.KeyValue) int64 {
			return otValue(t, o.metrics(t), fencedotel.MetricWaiters, call)
		}
		done := make(chan error, 3)
		for i := 0; i < 2; i++ {
			go func() {
				lock, err := l.Acquire(ctx, "waiters", 10*time.Second)
				if err == nil {
					err = lock.Release(ctx)
				}
				done <- err
			}()
		}
		go func() {
			done <- l.Do(ctx, "waiters", 10*time.Second, func(context.Context, *fencedlock.Lock) error { return nil })
		}()
		otEventually(t, func() bool { return waiters(otAcquire) == 2 && waiters(otDo) == 1 }, "two Acquires and one Do waiting")
		tctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		defer cancel()
		_, err = l.Acquire(tctx, "waiters", time.Second)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, int64(2), waiters(otAcquire), "the Acquire that timed out still counted")

		require.NoError(t, holder.Release(ctx))
		for i := 0; i < 3; i++ {
			require.NoError(t, <-done)
		}
		ms := o.metrics(t)
		for _, call := range []attribute.KeyValue{otAcquire, otDo, otCampaign} {
			assert.Zero(t, otValue(t, ms, fencedotel.MetricWaiters, call), "waiters %s", call.Value.String())
		}
		assert.Zero(t, otValue(t, ms, fencedotel.MetricLockHeld))
		otNoResourceOrToken(t, ms)
	})
}

// A lock without a heartbeat whose lease runs out by the local clock is
// counted lost, and no longer held, without any call on it.
func TestMetricsLeaseRanOut(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := otCtx(t)
		o := otNew(t)
		lock, err := o.locker(b).TryAcquire(ctx, "ranout", 100*time.Millisecond)
		require.NoError(t, err)
		assert.Equal(t, int64(1), otValue(t, o.metrics(t), fencedotel.MetricLockHeld))
		otEventually(t, func() bool { return otValue(t, o.metrics(t), fencedotel.MetricLockLost) == 1 }, "the lease's end counted lost")
		assert.Zero(t, otValue(t, o.metrics(t), fencedotel.MetricLockHeld))
		require.ErrorIs(t, lock.Err(), fencedlock.ErrLockLost)
	})
}

// A failed heartbeat refresh is counted, and added as a span event to the
// span the lock was acquired under, with the lock's token and TTL and the
// error; not to the acquire's own span, which has ended.
func TestMetricsRefreshFailures(t *testing.T) {
	b := redistest.Real(t)
	o := otNew(t)
	p := redistest.NewProxy(t, b.Client.Options().Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ReadTimeout: 100 * time.Millisecond})
	defer c.Close()
	l := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix), fencedlock.WithObserver(o.obs))
	ctx, caller := o.tp.Tracer("test").Start(otCtx(t), "caller")
	lock, err := l.Acquire(ctx, "refresh", 3*time.Second, fencedlock.WithHeartbeat(100*time.Millisecond))
	require.NoError(t, err)
	p.DropReplies(1) // the next refresh's reply: it fails at the read timeout
	otEventually(t, func() bool { return otValue(t, o.metrics(t), fencedotel.MetricRefreshFailures) > 0 }, "a refresh failure counted")
	require.NoError(t, lock.Release(ctx))
	caller.End()

	span := otOne(t, o, "caller")
	var found bool
	for _, ev := range span.Events() {
		if ev.Name != fencedotel.EventRefreshFailed {
			continue
		}
		found = true
		attrs := attribute.NewSet(ev.Attributes...)
		token, _ := attrs.Value(fencedotel.AttrToken)
		assert.Equal(t, int64(lock.Token()), token.AsInt64())
		ttl, _ := attrs.Value(fencedotel.AttrTTL)
		assert.Equal(t, int64(3000), ttl.AsInt64())
		msg, _ := attrs.Value("exception.message")
		assert.Contains(t, msg.AsString(), "unavailable")
	}
	assert.True(t, found, "no %s event on the caller's span: %v", fencedotel.EventRefreshFailed, span.Events())
	for _, ev := range otOne(t, o, fencedotel.SpanAcquire).Events() {
		assert.NotEqual(t, fencedotel.EventRefreshFailed, ev.Name, "an event on the ended acquire span")
	}
}
