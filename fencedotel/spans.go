package fencedotel

import (
	"context"
	"math"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencedlock/fencedlock/observe"
)

// The spans' names: see the package documentation.
const (
	SpanAcquire    = "fencedlock.acquire"
	SpanRelease    = "fencedlock.release"
	SpanStorePut   = "fencedlock.store.put"
	SpanStoreFence = "fencedlock.store.fence"
)

// EventHandOver is the name of the span event added for a hand-over.
const EventHandOver = "fencedlock.hand_over"

// EventRefreshFailed is the name of the span event added, to the span a
// lock was acquired under, for a failed heartbeat refresh of the lock.
const EventRefreshFailed = "fencedlock.refresh_failed"

// attrErrMessage is the attribute of EventRefreshFailed that carries the
// error's text, under the OpenTelemetry semantic conventions' key.
const attrErrMessage = attribute.Key("exception.message")

// spanKind names the four operations that have a span.
type spanKind uint8

const (
	spanAcquire spanKind = iota
	spanRelease
	spanStorePut
	spanStoreFence
)

var spanNames = [...]string{spanAcquire: SpanAcquire, spanRelease: SpanRelease, spanStorePut: SpanStorePut, spanStoreFence: SpanStoreFence}

// spanKey is a context key under which Observe keeps the span it started
// for an operation. Each Observer has one key per kind of operation (see
// newSpanKeys): a span found under one of them was started by that
// Observer for that kind of operation, and only such a span is ever
// ended, never a span of the caller's or of another Observer's.
type spanKey struct{ kind spanKind }

// spanKeys are an Observer's keys, by kind of operation.
// The last one, keys[len(spanNames)], keeps the span an acquire was
// called under, when that span records.
type spanKeys [len(spanNames) + 1]*spanKey

// underAcquire is the index of the key of the span an acquire was
// called under.
const underAcquire = len(spanNames)

func newSpanKeys() spanKeys {
	var k spanKeys
	for i := range k {
		k[i] = &spanKey{kind: spanKind(i)}
	}
	return k
}

// startSpan starts the span of the operation e begins, a child of the
// span in ctx if any, and returns ctx with the span. A span that records
// gets its attributes, and is kept in ctx under the Observer's key for
// kind too, to be ended by the end event; one that does not (a no-op
// tracer, or not sampled) needs neither, which spares their cost.
func (o *Observer) startSpan(ctx context.Context, kind spanKind, e observe.Event) context.Context {
	under := trace.SpanFromContext(ctx)
	ctx, span := o.tracer.Start(ctx, spanNames[kind])
	if kind == spanAcquire && under.IsRecording() {
		// Kept even when the acquire span does not record (a sampler
		// may drop it alone): the Lock's later events go to under.
		ctx = context.WithValue(ctx, o.keys[underAcquire], under)
	}
	if span == nil || !span.IsRecording() {
		return ctx
	}
	var attrs [3]attribute.KeyValue
	attrs[0] = AttrResource.String(e.Resource)
	n := 1
	if e.TTL > 0 {
		attrs[n] = AttrTTL.Int64(e.TTL.Milliseconds())
		n++
	}
	if e.Token != 0 {
		attrs[n] = tokenAttr(e.Token)
		n++
	}
	span.SetAttributes(attrs[:n]...)
	return context.WithValue(ctx, o.keys[kind], span)
}

// ownSpan returns the span that o started for the operation of kind
// that ctx belongs to, if any.
func (o *Observer) ownSpan(ctx context.Context, kind spanKind) (trace.Span, bool) {
	span, ok := ctx.Value(o.keys[kind]).(trace.Span)
	return span, ok && span != nil
}

// endAcquireSpan ends the acquire span with the outcome, the wait and,
// when granted, the token; a failure sets the error status. For a
// granted lock, it returns ctx with the span the acquire was called
// under, if it records, as its span: the ctx of the Lock's later events.
func (o *Observer) endAcquireSpan(ctx context.Context, e observe.Event) context.Context {
	if under, ok := ctx.Value(o.keys[underAcquire]).(trace.Span); ok && e.Outcome == observe.Acquired {
		ctx = trace.ContextWithSpan(ctx, under)
	}
	span, ok := o.ownSpan(ctx, spanAcquire)
	if !ok {
		return ctx
	}
	defer span.End()
	span.SetAttributes(
		AttrOutcome.String(e.Outcome.String()),
		AttrWait.Float64(float64(e.Duration)/float64(time.Millisecond)),
	)
	if e.Token != 0 {
		span.SetAttributes(tokenAttr(e.Token))
	}
	setErr(span, e.Err)
	return ctx
}

// endReleaseSpan ends the release span, with the error status when the
// release failed.
func (o *Observer) endReleaseSpan(ctx context.Context, e observe.Event) {
	span, ok := o.ownSpan(ctx, spanRelease)
	if !ok {
		return
	}
	setErr(span, e.Err)
	span.End()
}

// endStoreSpan ends the span of a store write (kind spanStorePut) or
// fence (spanStoreFence) with its outcome, and the error status when the
// token was refused or the call failed.
func (o *Observer) endStoreSpan(ctx context.Context, kind spanKind, e observe.Event) {
	span, ok := o.ownSpan(ctx, kind)
	if !ok {
		return
	}
	span.SetAttributes(AttrOutcome.String(e.Outcome.String()))
	setErr(span, e.Err)
	span.End()
}

// handOverEvent adds a span event for a hand-over to the span in ctx,
// whoever started it: the release's span when Release handed the lock
// on, the acquire's when a waiter leaving the queue did, and the span of
// election.Run's ctx, if any, when Run deleted the key of a term whose
// lease ran out.
func handOverEvent(ctx context.Context, e observe.Event) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.AddEvent(EventHandOver, trace.WithAttributes(tokenAttr(e.Token)))
}

// refreshFailedEvent adds a span event for a failed heartbeat refresh to
// the span in ctx: the span the lock was acquired under (see
// endAcquireSpan), if it records.
func refreshFailedEvent(ctx context.Context, e observe.Event) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := []attribute.KeyValue{tokenAttr(e.Token), AttrTTL.Int64(e.TTL.Milliseconds())}
	if e.Err != nil {
		attrs = append(attrs, attrErrMessage.String(e.Err.Error()))
	}
	span.AddEvent(EventRefreshFailed, trace.WithAttributes(attrs...))
}

// setErr records err on span and sets its status to Error; a nil err
// leaves the status unset.
func setErr(span trace.Span, err error) {
	if err == nil {
		return
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}

// tokenAttr is the fencedlock.token attribute of t: an int64 when it
// fits, its decimal string when it does not, so no token ever shows as a
// negative number.
func tokenAttr(t uint64) attribute.KeyValue {
	if t <= math.MaxInt64 {
		return AttrToken.Int64(int64(t))
	}
	return AttrToken.String(strconv.FormatUint(t, 10))
}
