package fencedotel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/fencedotel"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// otTelemetry is an Observer on SDK providers whose metrics a
// ManualReader collects and whose spans a SpanRecorder keeps.
type otTelemetry struct {
	obs    *fencedotel.Observer
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
}

// otNew returns an Observer on fresh SDK providers, with opts after the
// providers' options.
func otNew(t *testing.T, opts ...fencedotel.Option) *otTelemetry {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() {
		ctx := context.Background()
		_ = mp.Shutdown(ctx)
		_ = tp.Shutdown(ctx)
	})
	obs, err := fencedotel.NewObserver(append([]fencedotel.Option{
		fencedotel.WithMeterProvider(mp), fencedotel.WithTracerProvider(tp),
	}, opts...)...)
	require.NoError(t, err)
	return &otTelemetry{obs: obs, reader: reader, spans: spans, tp: tp}
}

// locker returns a Locker of b that reports to the Observer.
func (o *otTelemetry) locker(b *redistest.Backend, opts ...fencedlock.Option) *fencedlock.Locker {
	return fencedlock.New(b.Client, append([]fencedlock.Option{fencedlock.WithPrefix(b.Prefix), fencedlock.WithObserver(o.obs)}, opts...)...)
}

// metrics collects the metrics now, by name. Every one is in the scope
// fencedotel.ScopeName.
func (o *otTelemetry) metrics(t *testing.T) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, o.reader.Collect(context.Background(), &rm))
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, fencedotel.ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// ended returns the ended spans named name, in the order they ended.
func (o *otTelemetry) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range o.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// otSum returns the value of the data point of the Sum m whose attributes
// are exactly attrs, and whether there is one; it fails t when m is not
// an int64 Sum.
func otSum(t *testing.T, m metricdata.Metrics, attrs ...attribute.KeyValue) (int64, bool) {
	t.Helper()
	sum, ok := m.Data.(metricdata.Sum[int64])
	require.True(t, ok, "%s is a %T, not an int64 Sum", m.Name, m.Data)
	want := attribute.NewSet(attrs...)
	for _, dp := range sum.DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp.Value, true
		}
	}
	return 0, false
}

// otHist returns the count and sum of the data point of the histogram m
// whose attributes are exactly attrs (zeros when there is none); it
// fails t when m is not a float64 Histogram.
func otHist(t *testing.T, m metricdata.Metrics, attrs ...attribute.KeyValue) (uint64, float64) {
	t.Helper()
	h, ok := m.Data.(metricdata.Histogram[float64])
	require.True(t, ok, "%s is a %T, not a float64 Histogram", m.Name, m.Data)
	want := attribute.NewSet(attrs...)
	for _, dp := range h.DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp.Count, dp.Sum
		}
	}
	return 0, 0
}

// otAttrSets returns the attribute sets of every data point of m.
func otAttrSets(t *testing.T, m metricdata.Metrics) []attribute.Set {
	t.Helper()
	var out []attribute.Set
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, dp := range d.DataPoints {
			out = append(out, dp.Attributes)
		}
	case metricdata.Histogram[float64]:
		for _, dp := range d.DataPoints {
			out = append(out, dp.Attributes)
		}
	default:
		t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
	}
	return out
}

// otAttr returns the value of attribute key of span s.
func otAttr(s sdktrace.ReadOnlySpan, key attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// otCtx returns a context that ends with the test, or after 20 seconds.
func otCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// otEventually fails t unless cond holds within 5 seconds.
func otEventually(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// mustKey returns the key of a Locker.Key that cannot fail: a name the
// test chose.
func mustKey(key string, err error) string {
	if err != nil {
		panic(err)
	}
	return key
}
