package fencedotel_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/election"
	"github.com/fencedlock/fencedlock/fencedotel"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// panickingPut is a Store whose Put panics (a driver bug, a nil map in a
// user's own Store), recovered as net/http's server would.
type panickingPut struct{ fencedlock.Store }

func (panickingPut) Put(context.Context, string, fencedlock.Token, []byte) error {
	panic("driver bug")
}

// A Put of an observed store that panics ends its span all the same.
func TestStorePutThatPanicsEndsItsSpan(t *testing.T) {
	o := otNew(t)
	s := fencedlock.ObserveStore(panickingPut{fencedlock.NewMemoryStore()}, o.obs)
	func() {
		defer func() { _ = recover() }()
		_ = s.Put(context.Background(), "r", 1, []byte("v"))
	}()
	started := len(o.spans.Started())
	ended := len(o.ended(fencedotel.SpanStorePut))
	if ended != started {
		t.Fatalf("%d spans started, %d %s spans ended after the Put returned (by panic)", started, ended, fencedotel.SpanStorePut)
	}
}

// dropAcquireSpans samples every span but fencedlock.acquire (a sampler
// that cuts a noisy span by its name).
type dropAcquireSpans struct{}

func (dropAcquireSpans) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if p.Name == fencedotel.SpanAcquire {
		return sdktrace.SamplingResult{Decision: sdktrace.Drop}
	}
	return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample}
}
func (dropAcquireSpans) Description() string { return "dropAcquireSpans" }

// A failed heartbeat refresh adds fencedlock.refresh_failed to the span
// the lock was acquired under, while that span records (doc.go): also
// when a sampler dropped the acquire span itself.
func TestRefreshFailedEventWhenTheAcquireSpanIsNotSampled(t *testing.T) {
	b := redistest.Real(t)
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans), sdktrace.WithSampler(dropAcquireSpans{}))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer tp.Shutdown(context.Background())
	defer mp.Shutdown(context.Background())
	obs, err := fencedotel.NewObserver(fencedotel.WithTracerProvider(tp), fencedotel.WithMeterProvider(mp))
	require.NoError(t, err)
	p := redistest.NewProxy(t, b.Client.Options().Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ReadTimeout: 100 * time.Millisecond})
	defer c.Close()
	l := fencedlock.New(c, fencedlock.WithPrefix(b.Prefix), fencedlock.WithObserver(obs))
	ctx, caller := tp.Tracer("test").Start(otCtx(t), "caller")
	require.True(t, caller.IsRecording())
	lock, err := l.Acquire(ctx, "refresh", 3*time.Second, fencedlock.WithHeartbeat(100*time.Millisecond))
	require.NoError(t, err)
	p.DropReplies(1)
	o := &otTelemetry{obs: obs, reader: reader}
	otEventually(t, func() bool { return otValue(t, o.metrics(t), fencedotel.MetricRefreshFailures) > 0 }, "a refresh failure counted")
	require.NoError(t, lock.Release(ctx))
	caller.End()
	var got []string
	for _, s := range spans.Ended() {
		if s.Name() == "caller" {
			for _, ev := range s.Events() {
				got = append(got, ev.Name)
			}
		}
	}
	for _, n := range got {
		if n == fencedotel.EventRefreshFailed {
			return
		}
	}
	t.Fatalf("no %s event on the recording caller span; its events: %v", fencedotel.EventRefreshFailed, got)
}

// WithResourceAttribute adds fencedlock.resource to every metric, the
// election's leader gauge too.
func TestResourceAttributeOnEveryMetricWithAnElection(t *testing.T) {
	b := redistest.Mini(t)
	ctx := otCtx(t)
	o := otNew(t, fencedotel.WithResourceAttribute(true))
	l := o.locker(b)
	term, err := election.New(l, "scheduler", election.WithTTL(2*time.Second)).Campaign(ctx, "me")
	require.NoError(t, err)
	defer term.Resign(ctx)
	for name, m := range o.metrics(t) {
		for _, set := range otAttrSets(t, m) {
			if !set.HasValue(fencedotel.AttrResource) {
				t.Errorf("%s: a data point without %s: %v", name, fencedotel.AttrResource, set.ToSlice())
			}
		}
	}
}

// panickingFence is a Store whose Fence panics.
type panickingFence struct{ fencedlock.Store }

func (panickingFence) Fence(context.Context, string, fencedlock.Token) error { panic("driver bug") }

// A Fence of an observed store that panics ends its span all the same.
func TestStoreFenceThatPanicsEndsItsSpan(t *testing.T) {
	o := otNew(t)
	s := fencedlock.ObserveStore(panickingFence{fencedlock.NewMemoryStore()}, o.obs)
	func() {
		defer func() { _ = recover() }()
		_ = s.Fence(context.Background(), "r", 1)
	}()
	if started, ended := len(o.spans.Started()), len(o.spans.Ended()); started != ended {
		t.Fatalf("%d spans started, %d ended after the Fence returned (by panic)", started, ended)
	}
}
