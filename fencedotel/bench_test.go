package fencedotel_test

import (
	"context"
	"testing"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/fencedotel"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// BenchmarkAcquireRelease is the root module's BenchmarkAcquireRelease
// (TryAcquire, then Release, of a free lock on a real Redis) with this
// package's Observer: on the SDK's providers (every span sampled and
// recorded, then dropped: no exporter), on the SDK's metrics with a
// no-op tracer, and on no-op providers. Compare with the root's
// BenchmarkAcquireReleaseObserved.
func BenchmarkAcquireRelease(b *testing.B) {
	sdk := func(b *testing.B) []fencedotel.Option {
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
		b.Cleanup(func() {
			_ = mp.Shutdown(context.Background())
			_ = tp.Shutdown(context.Background())
		})
		return []fencedotel.Option{fencedotel.WithMeterProvider(mp), fencedotel.WithTracerProvider(tp)}
	}
	b.Run("sdk", func(b *testing.B) { benchCycle(b, sdk(b)...) })
	b.Run("sdk-metrics-only", func(b *testing.B) {
		opts := append(sdk(b), fencedotel.WithTracerProvider(tracenoop.NewTracerProvider()))
		benchCycle(b, opts...)
	})
	b.Run("noop", func(b *testing.B) {
		benchCycle(b, fencedotel.WithMeterProvider(metricnoop.NewMeterProvider()), fencedotel.WithTracerProvider(tracenoop.NewTracerProvider()))
	})
}

// benchCycle measures TryAcquire, then Release, on a free lock of a real
// Redis, with an Observer made with opts.
func benchCycle(b *testing.B, opts ...fencedotel.Option) {
	be := redistest.Real(b)
	obs, err := fencedotel.NewObserver(opts...)
	if err != nil {
		b.Fatal(err)
	}
	locker := fencedlock.New(be.Client, fencedlock.WithPrefix(be.Prefix), fencedlock.WithObserver(obs))
	ctx := context.Background()
	cycle := func() {
		lock, err := locker.TryAcquire(ctx, "bench", 10*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		if err := lock.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	cycle() // loads the scripts
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cycle()
	}
}
