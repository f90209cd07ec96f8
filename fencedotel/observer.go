package fencedotel

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencedlock/fencedlock/observe"
)

// ScopeName is the instrumentation scope of the Observer's meter and
// tracer: the import path of this package.
const ScopeName = "github.com/fencedlock/fencedlock/fencedotel"

// Observer turns the events of a [fencedlock.Locker], and of the stores
// that [fencedlock.ObserveStore] wraps, into OpenTelemetry metrics and
// spans (see the package documentation for their names). It implements
// [observe.Observer].
//
// An Observer is safe for concurrent use, and one may serve any number
// of Lockers and stores: it is not changed after NewObserver. It takes
// no lock of its own and does no I/O; it records into instruments and
// starts and ends spans, which the OpenTelemetry SDK does without
// waiting, unless a span processor that exports on the caller's
// goroutine (the SDK's SimpleSpanProcessor) is configured: use a batch
// processor. A nil *Observer, or one not made by NewObserver, observes
// nothing.
type Observer struct {
	tracer trace.Tracer
	keys   spanKeys // the context keys of the spans it started
	m      instruments
	// resourceAttr adds fencedlock.resource to every measurement.
	resourceAttr bool
}

// Option configures NewObserver.
type Option func(*config)

type config struct {
	meterProvider  metric.MeterProvider
	tracerProvider trace.TracerProvider
	resourceAttr   bool
}

// WithMeterProvider makes the Observer record its metrics with p. The
// default, and what a nil p means, is the global provider
// (otel.GetMeterProvider) as it is when NewObserver is called.
func WithMeterProvider(p metric.MeterProvider) Option {
	return func(c *config) { c.meterProvider = p }
}

// WithTracerProvider makes the Observer start its spans with p. The
// default, and what a nil p means, is the global provider
// (otel.GetTracerProvider) as it is when NewObserver is called.
func WithTracerProvider(p trace.TracerProvider) Option {
	return func(c *config) { c.tracerProvider = p }
}

// WithResourceAttribute, when on, adds the attribute fencedlock.resource
// (the resource's name) to every metric measurement. Off by default:
// each resource then makes time series of its own, so turn it on only
// when a process uses a few resources with fixed names, never when the
// names are built from user input or IDs. Spans carry the resource
// either way.
func WithResourceAttribute(on bool) Option {
	return func(c *config) { c.resourceAttr = on }
}

// NewObserver returns an Observer that records with the providers the
// options name, or the global ones. It fails only when a provider
// returns a nil Meter or Tracer, or the meter refuses to create an
// instrument (the error names it); then it returns no Observer.
func NewObserver(opts ...Option) (*Observer, error) {
	var c config
	for _, opt := range opts {
		if opt != nil {
			opt(&c)
		}
	}
	if c.meterProvider == nil {
		c.meterProvider = otel.GetMeterProvider()
	}
	if c.tracerProvider == nil {
		c.tracerProvider = otel.GetTracerProvider()
	}
	m, err := newInstruments(c.meterProvider.Meter(ScopeName))
	if err != nil {
		return nil, err
	}
	if !c.resourceAttr {
		m.zero()
	}
	tracer := c.tracerProvider.Tracer(ScopeName)
	if tracer == nil {
		return nil, errNoTracer
	}
	return &Observer{
		tracer:       tracer,
		keys:         newSpanKeys(),
		m:            m,
		resourceAttr: c.resourceAttr,
	}, nil
}

// Observe implements [observe.Observer]: it records e in the metrics,
// and starts or ends a span. For observe.AcquireStart, ReleaseStart,
// StoreWriteStart and StoreFenceStart it returns ctx with the
// span it started; for the AcquireEnd of a granted lock, ctx with the
// span the lock was acquired under as its span, if that span records (the
// Lock's later events get it: see [EventRefreshFailed]); for every other
// event, ctx. Kinds of events it does not know are ignored.
func (o *Observer) Observe(ctx context.Context, e observe.Event) context.Context {
	if o == nil || o.tracer == nil {
		return ctx // nil, or not made by NewObserver
	}
	if ctx == nil {
		// Only a Store's caller can pass a nil ctx; a span needs a parent.
		ctx = context.Background()
	}
	switch e.Kind {
	case observe.AcquireStart:
		return o.startSpan(ctx, spanAcquire, e)
	case observe.AcquireEnd:
		o.m.acquireEnd(ctx, e, o.resourceAttr)
		return o.endAcquireSpan(ctx, e)
	case observe.WaitStart:
		o.m.wait(ctx, e, 1, o.resourceAttr)
	case observe.WaitEnd:
		o.m.wait(ctx, e, -1, o.resourceAttr)
	case observe.LockEnd:
		o.m.lockEnd(ctx, e, o.resourceAttr)
	case observe.RefreshFailed:
		o.m.refreshFailed(ctx, e, o.resourceAttr)
		refreshFailedEvent(ctx, e)
	case observe.ReleaseStart:
		return o.startSpan(ctx, spanRelease, e)
	case observe.ReleaseEnd:
		o.endReleaseSpan(ctx, e)
	case observe.HandOver:
		handOverEvent(ctx, e)
	case observe.StoreWriteStart:
		return o.startSpan(ctx, spanStorePut, e)
	case observe.StoreWriteEnd:
		o.m.storeWriteEnd(ctx, e, o.resourceAttr)
		o.endStoreSpan(ctx, spanStorePut, e)
	case observe.StoreFenceStart:
		return o.startSpan(ctx, spanStoreFence, e)
	case observe.StoreFenceEnd:
		o.m.storeFenceEnd(ctx, e, o.resourceAttr)
		o.endStoreSpan(ctx, spanStoreFence, e)
	}
	return ctx
}

// The errors of providers that return nil.
var (
	errNoMeter  = errors.New("fencedotel: the meter provider returned a nil Meter")
	errNoTracer = errors.New("fencedotel: the tracer provider returned a nil Tracer")
)
