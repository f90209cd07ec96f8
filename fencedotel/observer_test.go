package fencedotel_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/fencedotel"
	"github.com/fencedlock/fencedlock/internal/redistest"
	"github.com/fencedlock/fencedlock/observe"
)

// The Observer satisfies the interface the Locker takes.
var _ observe.Observer = (*fencedotel.Observer)(nil)

// A nil Observer, and one not made by NewObserver, observe nothing and
// return ctx; a Locker works with either.
func TestObserverNilAndZero(t *testing.T) {
	b := redistest.Mini(t)
	ctx := otCtx(t)
	for name, obs := range map[string]*fencedotel.Observer{"nil": nil, "zero": {}} {
		for kind := observe.AcquireStart; kind <= observe.WaitEnd; kind++ {
			assert.Equal(t, ctx, obs.Observe(ctx, observe.Event{Kind: kind, Resource: "r", Token: 1}), "%s Observer, %v", name, kind)
		}
		l := fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix+name), fencedlock.WithObserver(obs))
		lock, err := l.TryAcquire(ctx, "r", time.Second)
		require.NoError(t, err, "%s Observer", name)
		require.NoError(t, lock.Release(ctx))
	}
}

// A Store's caller may pass a nil ctx: the span still starts and ends,
// with the SDK's tracer and with a no-op one.
func TestObserverNilCtx(t *testing.T) {
	o := otNew(t)
	//lint:ignore SA1012 a nil ctx is what this test is about
	ctx := o.obs.Observe(nil, observe.Event{Kind: observe.StoreWriteStart, Resource: "r", Token: 1})
	require.NotNil(t, ctx)
	o.obs.Observe(ctx, observe.Event{Kind: observe.StoreWriteEnd, Resource: "r", Token: 1, Outcome: observe.Accepted})
	assert.Len(t, o.ended(fencedotel.SpanStorePut), 1)

	noop, err := fencedotel.NewObserver(fencedotel.WithMeterProvider(metricnoop.NewMeterProvider()), fencedotel.WithTracerProvider(tracenoop.NewTracerProvider()))
	require.NoError(t, err)
	for kind := observe.AcquireStart; kind <= observe.WaitEnd; kind++ {
		//lint:ignore SA1012 a nil ctx is what this test is about
		got := noop.Observe(nil, observe.Event{Kind: kind, Resource: "r", Token: 1})
		assert.NotNil(t, got, "%v", kind)
	}
}

// Kinds it does not know record nothing and return ctx: the metrics
// stay as they were made (all zero).
func TestObserverIgnoresOtherKinds(t *testing.T) {
	o := otNew(t)
	ctx := otCtx(t)
	before := o.metrics(t)
	for _, kind := range []observe.Kind{0, 200} {
		got := o.obs.Observe(ctx, observe.Event{Kind: kind, Resource: "r", Token: 1, Outcome: observe.Lost, Err: errors.New("x")})
		assert.Equal(t, ctx, got, "%v", kind)
	}
	after := o.metrics(t)
	assert.Equal(t, len(before), len(after), "metrics recorded")
	for name, m := range after {
		for _, set := range otAttrSets(t, m) {
			v, _ := otSum(t, m, set.ToSlice()...)
			assert.Zero(t, v, "%s %v", name, set.ToSlice())
		}
	}
	assert.Empty(t, o.spans.Started(), "spans started")
}

// otGlobal sets the global providers to fresh SDK ones for the test, and
// restores the former ones at its end.
func otGlobal(t *testing.T) (*sdkmetric.ManualReader, *tracetest.SpanRecorder) {
	t.Helper()
	mp0, tp0 := otel.GetMeterProvider(), otel.GetTracerProvider()
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)))
	t.Cleanup(func() {
		otel.SetMeterProvider(mp0)
		otel.SetTracerProvider(tp0)
	})
	return reader, spans
}

// otCount returns how many acquires reader saw.
func otCount(t *testing.T, reader *sdkmetric.ManualReader) uint64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == fencedotel.MetricAcquireDuration {
				n, _ := otHist(t, m, otTry, otAcquired)
				return n
			}
		}
	}
	return 0
}

// Without options, or with nil providers, the Observer uses the global
// providers as they are when NewObserver is called.
func TestObserverDefaultsToGlobalProviders(t *testing.T) {
	b := redistest.Mini(t)
	ctx := otCtx(t)
	firstReader, firstSpans := otGlobal(t)
	byDefault, err := fencedotel.NewObserver()
	require.NoError(t, err)
	byNil, err := fencedotel.NewObserver(fencedotel.WithMeterProvider(nil), fencedotel.WithTracerProvider(nil), nil)
	require.NoError(t, err)
	laterReader, laterSpans := otGlobal(t)

	for i, obs := range []*fencedotel.Observer{byDefault, byNil} {
		l := fencedlock.New(b.Client, fencedlock.WithPrefix(fmt.Sprint(b.Prefix, i)), fencedlock.WithObserver(obs))
		lock, err := l.TryAcquire(ctx, "global", time.Second)
		require.NoError(t, err)
		require.NoError(t, lock.Release(ctx))
	}
	assert.Equal(t, uint64(2), otCount(t, firstReader), "acquires recorded by the providers global at NewObserver")
	assert.Len(t, firstSpans.Ended(), 4)
	assert.Zero(t, otCount(t, laterReader), "providers set later are not used")
	assert.Empty(t, laterSpans.Ended())
}

// Providers that fail: NewObserver returns an error that says what
// failed, and no Observer.
func TestNewObserverErrors(t *testing.T) {
	refused := errors.New("refused by the test")
	cases := []struct {
		name string
		opt  fencedotel.Option
		want string
	}{
		{"nil meter", fencedotel.WithMeterProvider(otNilMeterProvider{}), "nil Meter"},
		{"instrument refused", fencedotel.WithMeterProvider(otRefusingMeterProvider{err: refused}), "creating the instrument " + fencedotel.MetricWaiters},
		{"nil tracer", fencedotel.WithTracerProvider(otNilTracerProvider{}), "nil Tracer"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			obs, err := fencedotel.NewObserver(c.opt)
			require.Error(t, err)
			assert.Nil(t, obs)
			assert.Contains(t, err.Error(), c.want)
			assert.Contains(t, err.Error(), "fencedotel: ")
			if c.name == "instrument refused" {
				assert.ErrorIs(t, err, refused, "the meter's error is wrapped")
			}
		})
	}
}

type otNilMeterProvider struct{ metricnoop.MeterProvider }

func (otNilMeterProvider) Meter(string, ...metric.MeterOption) metric.Meter { return nil }

type otNilTracerProvider struct{ tracenoop.TracerProvider }

func (otNilTracerProvider) Tracer(string, ...trace.TracerOption) trace.Tracer { return nil }

// otRefusingMeterProvider's meter refuses to create an up-down counter.
type otRefusingMeterProvider struct {
	metricnoop.MeterProvider
	err error
}

func (p otRefusingMeterProvider) Meter(string, ...metric.MeterOption) metric.Meter {
	return otRefusingMeter{err: p.err}
}

type otRefusingMeter struct {
	metricnoop.Meter
	err error
}

func (m otRefusingMeter) Int64UpDownCounter(string, ...metric.Int64UpDownCounterOption) (metric.Int64UpDownCounter, error) {
	return metricnoop.Int64UpDownCounter{}, m.err
}

// One Observer serves goroutines that contend for a lock and write with
// its token at the same time (run with -race): every acquire, hold and
// write is counted once, every span ended, and no lock is left held.
func TestObserverConcurrentUse(t *testing.T) {
	b := redistest.Mini(t)
	ctx := otCtx(t)
	o := otNew(t)
	store := fencedlock.ObserveStore(fencedlock.NewMemoryStore(), o.obs)
	const workers, rounds = 6, 15
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		l := o.locker(b) // a Locker per worker, as processes would have
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				err := l.Do(ctx, "shared", 5*time.Second, func(ctx context.Context, lock *fencedlock.Lock) error {
					return fencedlock.Update(ctx, store, "shared", lock.Token(), func(v []byte, _ bool) ([]byte, error) {
						return append(v, 'v'), nil
					})
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	ms := o.metrics(t)
	n, _ := otHist(t, ms[fencedotel.MetricAcquireDuration], otDo, otAcquired)
	assert.Equal(t, uint64(workers*rounds), n, "acquires")
	waiting, _ := otSum(t, ms[fencedotel.MetricWaiters], otDo)
	assert.Zero(t, waiting, "waiters left")
	n, _ = otHist(t, ms[fencedotel.MetricLockHoldTime])
	assert.Equal(t, uint64(workers*rounds), n, "holds")
	held, _ := otSum(t, ms[fencedotel.MetricLockHeld])
	assert.Zero(t, held, "locks left held")
	writes, _ := otSum(t, ms[fencedotel.MetricStoreWrites], otAccepted)
	assert.Equal(t, int64(workers*rounds), writes)
	fences, _ := otSum(t, ms[fencedotel.MetricStoreFences], otAccepted)
	assert.Equal(t, int64(workers*rounds), fences)
	v, _, err := store.Get(ctx, "shared")
	require.NoError(t, err)
	assert.Len(t, v, workers*rounds, "every Update's byte is there: none was lost")
	assert.Len(t, o.ended(fencedotel.SpanAcquire), workers*rounds)
	assert.Len(t, o.ended(fencedotel.SpanRelease), workers*rounds)
	assert.Len(t, o.ended(fencedotel.SpanStorePut), workers*rounds)
	assert.Len(t, o.ended(fencedotel.SpanStoreFence), workers*rounds)
	assert.Equal(t, len(o.spans.Started()), len(o.spans.Ended()), "spans started and never ended")
}

// Recording a metric without the resource attribute allocates nothing,
// and a span that does not record (a no-op tracer's, or one not sampled)
// costs what starting it costs: no attributes, no mark in ctx.
func TestObserverAllocations(t *testing.T) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(context.Background())
	unsampled := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	defer unsampled.Shutdown(context.Background())
	ctx := context.Background()
	for name, tp := range map[string]trace.TracerProvider{"noop": tracenoop.NewTracerProvider(), "unsampled": unsampled} {
		obs, err := fencedotel.NewObserver(fencedotel.WithMeterProvider(mp), fencedotel.WithTracerProvider(tp))
		require.NoError(t, err)
		ends := testing.AllocsPerRun(100, func() {
			obs.Observe(ctx, observe.Event{Kind: observe.AcquireEnd, Resource: "r", Token: 5, Outcome: observe.Acquired, Duration: time.Millisecond})
			obs.Observe(ctx, observe.Event{Kind: observe.LockEnd, Resource: "r", Token: 5, Outcome: observe.Lost, Duration: time.Millisecond})
			obs.Observe(ctx, observe.Event{Kind: observe.StoreWriteEnd, Resource: "r", Token: 5, Outcome: observe.Stale, Duration: time.Millisecond})
			obs.Observe(ctx, observe.Event{Kind: observe.StoreFenceEnd, Resource: "r", Token: 5, Outcome: observe.Accepted, Duration: time.Millisecond})
			obs.Observe(ctx, observe.Event{Kind: observe.ReleaseEnd, Resource: "r", Token: 5})
		})
		assert.Zero(t, ends, "%s: allocations of five end events", name)
		tracer := tp.Tracer("bare")
		bare := testing.AllocsPerRun(100, func() { tracer.Start(ctx, "bare") })
		start := testing.AllocsPerRun(100, func() {
			obs.Observe(ctx, observe.Event{Kind: observe.AcquireStart, Resource: "r", TTL: time.Second})
		})
		assert.Equal(t, bare, start, "%s: allocations of a start event, against a bare tracer.Start", name)
	}
}
