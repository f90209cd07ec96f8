package fencedotel

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/fencedlock/fencedlock/observe"
)

// The metrics' names: see the package documentation.
const (
	MetricAcquireDuration = "fencedlock.acquire.duration"
	MetricLockHeld        = "fencedlock.lock.held"
	MetricLockHoldTime    = "fencedlock.lock.hold.duration"
	MetricLockLost        = "fencedlock.lock.lost"
	MetricStoreWrites     = "fencedlock.store.writes"
	MetricStoreFences     = "fencedlock.store.fences"
)

// The attribute keys of metrics and spans.
const (
	// AttrOutcome is the outcome of an acquire, a store write or a store
	// fence, the String of its observe.Outcome: "acquired", "stale", ...
	AttrOutcome = attribute.Key("fencedlock.outcome")
	// AttrResource is the resource's name: on spans always, on metrics
	// only with WithResourceAttribute(true).
	AttrResource = attribute.Key("fencedlock.resource")
	// AttrToken is the fencing token, on spans only: an int64 when the
	// token is at most math.MaxInt64, its decimal string above.
	AttrToken = attribute.Key("fencedlock.token")
	// AttrTTL is the TTL asked for, in milliseconds, on acquire spans.
	AttrTTL = attribute.Key("fencedlock.ttl_ms")
	// AttrWait is how long an acquire took from the call to its return,
	// in milliseconds (a float64), on acquire spans.
	AttrWait = attribute.Key("fencedlock.wait_ms")
)

// Bucket boundaries, in seconds, advised to the SDK for the duration
// histograms (a View can replace them). An acquire takes a round trip
// when the lock is free, and up to the caller's deadline when it waits;
// a lock is held from milliseconds to hours.
var (
	acquireBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	holdBuckets    = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600}
)

// instruments are the Observer's metric instruments, and the attribute
// sets of the outcomes made once, so that recording allocates nothing
// when the resource attribute is off. They are safe for concurrent use.
type instruments struct {
	acquireDuration metric.Float64Histogram
	held            metric.Int64UpDownCounter
	holdDuration    metric.Float64Histogram
	lost            metric.Int64Counter
	writes          metric.Int64Counter
	fences          metric.Int64Counter

	// byOutcome[o] records with fencedlock.outcome = o.String(), for the
	// outcomes fencedlock defines; noAttrs, with no attribute.
	byOutcome [outcomeCount]measureOpts
	noAttrs   measureOpts
}

// measureOpts are the options of one attribute set, as slices ready for
// Record and Add: passing a slice made once spares an allocation per
// measurement.
type measureOpts struct {
	record []metric.RecordOption
	add    []metric.AddOption
}

func newMeasureOpts(set attribute.Set) measureOpts {
	opt := metric.WithAttributeSet(set)
	return measureOpts{record: []metric.RecordOption{opt}, add: []metric.AddOption{opt}}
}

// outcomeCount bounds the Outcome values whose attribute sets are made
// ahead: those fencedlock defines, and a few more.
const outcomeCount = 16

func newInstruments(m metric.Meter) (instruments, error) {
	var in instruments
	if m == nil {
		return in, errNoMeter
	}
	var err error
	wrap := func(name string, e error) error {
		return fmt.Errorf("fencedotel: creating the instrument %s: %w", name, e)
	}
	if in.acquireDuration, err = m.Float64Histogram(MetricAcquireDuration,
		metric.WithUnit("s"),
		metric.WithDescription("Time from a call to TryAcquire or Acquire (for Do, its acquire) to its return, by outcome."),
		metric.WithExplicitBucketBoundaries(acquireBuckets...)); err != nil {
		return in, wrap(MetricAcquireDuration, err)
	}
	if in.held, err = m.Int64UpDownCounter(MetricLockHeld,
		metric.WithUnit("{lock}"),
		metric.WithDescription("Locks acquired and not yet released or lost.")); err != nil {
		return in, wrap(MetricLockHeld, err)
	}
	if in.holdDuration, err = m.Float64Histogram(MetricLockHoldTime,
		metric.WithUnit("s"),
		metric.WithDescription("Time from a lock's grant to its release or loss."),
		metric.WithExplicitBucketBoundaries(holdBuckets...)); err != nil {
		return in, wrap(MetricLockHoldTime, err)
	}
	if in.lost, err = m.Int64Counter(MetricLockLost,
		metric.WithUnit("{lock}"),
		metric.WithDescription("Locks that ended lost: expired, taken, or found gone by a refresh or a release.")); err != nil {
		return in, wrap(MetricLockLost, err)
	}
	if in.writes, err = m.Int64Counter(MetricStoreWrites,
		metric.WithUnit("{write}"),
		metric.WithDescription("Writes to observed stores, by outcome: accepted, stale (refused token) or error.")); err != nil {
		return in, wrap(MetricStoreWrites, err)
	}
	if in.fences, err = m.Int64Counter(MetricStoreFences,
		metric.WithUnit("{fence}"),
		metric.WithDescription("Fences of observed stores (Fence, and the fenced read of Update), by outcome: accepted, stale (refused token) or error.")); err != nil {
		return in, wrap(MetricStoreFences, err)
	}
	for o := range in.byOutcome {
		in.byOutcome[o] = newMeasureOpts(attribute.NewSet(AttrOutcome.String(observe.Outcome(o).String())))
	}
	in.noAttrs = newMeasureOpts(*attribute.EmptySet())
	return in, nil
}

// outcomeOpts returns the measurement options of outcome o, and of
// resource when withResource is on.
func (in *instruments) outcomeOpts(o observe.Outcome, resource string, withResource bool) measureOpts {
	if withResource {
		return newMeasureOpts(attribute.NewSet(AttrOutcome.String(o.String()), AttrResource.String(resource)))
	}
	if int(o) < len(in.byOutcome) {
		return in.byOutcome[o]
	}
	return newMeasureOpts(attribute.NewSet(AttrOutcome.String(o.String())))
}

// plainOpts returns the measurement options of a metric with no
// attribute but the resource, when withResource is on.
func (in *instruments) plainOpts(resource string, withResource bool) measureOpts {
	if withResource {
		return newMeasureOpts(attribute.NewSet(AttrResource.String(resource)))
	}
	return in.noAttrs
}

// acquireEnd records an observe.AcquireEnd: its duration, and one more
// lock held when it was granted.
func (in *instruments) acquireEnd(ctx context.Context, e observe.Event, withResource bool) {
	in.acquireDuration.Record(ctx, e.Duration.Seconds(), in.outcomeOpts(e.Outcome, e.Resource, withResource).record...)
	if e.Outcome == observe.Acquired {
		in.held.Add(ctx, 1, in.plainOpts(e.Resource, withResource).add...)
	}
}

// lockEnd records an EventLockEnd: one lock less held, how long it was
// held, and whether it was lost.
func (in *instruments) lockEnd(ctx context.Context, e observe.Event, withResource bool) {
	opts := in.plainOpts(e.Resource, withResource)
	in.held.Add(ctx, -1, opts.add...)
	in.holdDuration.Record(ctx, e.Duration.Seconds(), opts.record...)
	if e.Outcome == observe.Lost {
		in.lost.Add(ctx, 1, opts.add...)
	}
}

// storeWriteEnd counts an EventStoreWriteEnd by its outcome.
func (in *instruments) storeWriteEnd(ctx context.Context, e observe.Event, withResource bool) {
	in.writes.Add(ctx, 1, in.outcomeOpts(e.Outcome, e.Resource, withResource).add...)
}

// storeFenceEnd counts an EventStoreFenceEnd by its outcome.
func (in *instruments) storeFenceEnd(ctx context.Context, e observe.Event, withResource bool) {
	in.fences.Add(ctx, 1, in.outcomeOpts(e.Outcome, e.Resource, withResource).add...)
}
