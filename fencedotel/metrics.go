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
	MetricWaiters         = "fencedlock.waiters"
	MetricLockHeld        = "fencedlock.lock.held"
	MetricLockHoldTime    = "fencedlock.lock.hold.duration"
	MetricLockLost        = "fencedlock.lock.lost"
	MetricRefreshFailures = "fencedlock.lock.refresh.failures"
	MetricStoreWrites     = "fencedlock.store.writes"
	MetricStoreFences     = "fencedlock.store.fences"
	MetricElectionLeader  = "fencedlock.election.leader"
	MetricElectionTerms   = "fencedlock.election.terms"
)

// The attribute keys of metrics and spans.
const (
	// AttrOutcome is the outcome of an acquire, a store write or a store
	// fence, the String of its observe.Outcome: "acquired", "stale", ...;
	// of an election's term, "resigned" or "lost".
	AttrOutcome = attribute.Key("fencedlock.outcome")
	// AttrCall is the call that acquires, the String of its
	// observe.Call: "try", "acquire", "do" or "campaign".
	AttrCall = attribute.Key("fencedlock.call")
	// AttrElection is the name of an election, on
	// fencedlock.election.leader: one per election, so bounded.
	AttrElection = attribute.Key("fencedlock.election")
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
	waiters         metric.Int64UpDownCounter
	held            metric.Int64UpDownCounter
	holdDuration    metric.Float64Histogram
	lost            metric.Int64Counter
	refreshFailures metric.Int64Counter
	writes          metric.Int64Counter
	fences          metric.Int64Counter
	leader          metric.Int64UpDownCounter
	terms           metric.Int64Counter

	// byOutcome[o] records with fencedlock.outcome = o.String(), for the
	// outcomes fencedlock defines; byCall[c], with fencedlock.call =
	// c.String(); byCallOutcome[c][o], with both; byTerm, with the
	// outcome of a term that ended released (resigned) or lost; noAttrs,
	// with no attribute.
	byOutcome     [outcomeCount]measureOpts
	byCall        [callCount]measureOpts
	byCallOutcome [callCount][outcomeCount]measureOpts
	byTerm        [2]measureOpts
	noAttrs       measureOpts
}

// The values of fencedlock.outcome for the end of an election's term.
const (
	termResigned = "resigned"
	termLost     = "lost"
)

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

// outcomeCount and callCount bound the Outcome and Call values whose
// attribute sets are made ahead: those fencedlock defines, and a few
// more.
const (
	outcomeCount = 16
	callCount    = 8
)

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
	if in.waiters, err = m.Int64UpDownCounter(MetricWaiters,
		metric.WithUnit("{waiter}"),
		metric.WithDescription("Goroutines waiting in Acquire (refused, or queued behind another of their Locker), by call.")); err != nil {
		return in, wrap(MetricWaiters, err)
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
	if in.refreshFailures, err = m.Int64Counter(MetricRefreshFailures,
		metric.WithUnit("{refresh}"),
		metric.WithDescription("Heartbeat refreshes that failed without Redis answering that the lock is gone.")); err != nil {
		return in, wrap(MetricRefreshFailures, err)
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
	if in.leader, err = m.Int64UpDownCounter(MetricElectionLeader,
		metric.WithUnit("{leader}"),
		metric.WithDescription("1 while this process leads the election, by election.")); err != nil {
		return in, wrap(MetricElectionLeader, err)
	}
	if in.terms, err = m.Int64Counter(MetricElectionTerms,
		metric.WithUnit("{term}"),
		metric.WithDescription("Terms of this process's leaders that ended, by outcome: resigned or lost.")); err != nil {
		return in, wrap(MetricElectionTerms, err)
	}
	for o := range in.byOutcome {
		in.byOutcome[o] = newMeasureOpts(attribute.NewSet(AttrOutcome.String(observe.Outcome(o).String())))
	}
	for c := range in.byCall {
		call := AttrCall.String(observe.Call(c).String())
		in.byCall[c] = newMeasureOpts(attribute.NewSet(call))
		for o := range in.byCallOutcome[c] {
			in.byCallOutcome[c][o] = newMeasureOpts(attribute.NewSet(call, AttrOutcome.String(observe.Outcome(o).String())))
		}
	}
	in.byTerm[0] = newMeasureOpts(attribute.NewSet(AttrOutcome.String(termResigned)))
	in.byTerm[1] = newMeasureOpts(attribute.NewSet(AttrOutcome.String(termLost)))
	in.noAttrs = newMeasureOpts(*attribute.EmptySet())
	return in, nil
}

// zero records zero for every time series the Observer can have without
// the resource attribute (but the leaders, one per election, named only
// when elected): so that the first loss, stale write or failed refresh
// shows as an increase from zero, and the gauges read 0 until used.
func (in *instruments) zero() {
	ctx := context.Background()
	in.lost.Add(ctx, 0, in.noAttrs.add...)
	in.refreshFailures.Add(ctx, 0, in.noAttrs.add...)
	in.held.Add(ctx, 0, in.noAttrs.add...)
	for _, c := range []observe.Call{observe.CallAcquire, observe.CallDo, observe.CallCampaign} {
		in.waiters.Add(ctx, 0, in.byCall[c].add...)
	}
	for _, o := range []observe.Outcome{observe.Accepted, observe.Stale, observe.Failed} {
		in.writes.Add(ctx, 0, in.byOutcome[o].add...)
		in.fences.Add(ctx, 0, in.byOutcome[o].add...)
	}
	for _, t := range in.byTerm {
		in.terms.Add(ctx, 0, t.add...)
	}
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

// acquireOpts returns the measurement options of an acquire's end: its
// call and outcome, and its resource when withResource is on.
func (in *instruments) acquireOpts(e observe.Event, withResource bool) measureOpts {
	if withResource {
		return newMeasureOpts(attribute.NewSet(AttrCall.String(e.Call.String()), AttrOutcome.String(e.Outcome.String()), AttrResource.String(e.Resource)))
	}
	if int(e.Call) < callCount && int(e.Outcome) < outcomeCount {
		return in.byCallOutcome[e.Call][e.Outcome]
	}
	return newMeasureOpts(attribute.NewSet(AttrCall.String(e.Call.String()), AttrOutcome.String(e.Outcome.String())))
}

// callOpts returns the measurement options of call c, and of resource
// when withResource is on.
func (in *instruments) callOpts(c observe.Call, resource string, withResource bool) measureOpts {
	if withResource {
		return newMeasureOpts(attribute.NewSet(AttrCall.String(c.String()), AttrResource.String(resource)))
	}
	if int(c) < callCount {
		return in.byCall[c]
	}
	return newMeasureOpts(attribute.NewSet(AttrCall.String(c.String())))
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
// lock held when it was granted; for a campaign, a leader more.
func (in *instruments) acquireEnd(ctx context.Context, e observe.Event, withResource bool) {
	in.acquireDuration.Record(ctx, e.Duration.Seconds(), in.acquireOpts(e, withResource).record...)
	if e.Outcome == observe.Acquired {
		in.held.Add(ctx, 1, in.plainOpts(e.Resource, withResource).add...)
		if e.Call == observe.CallCampaign {
			in.leader.Add(ctx, 1, electionOpts(e.Resource, withResource).add...)
		}
	}
}

// wait records an observe.WaitStart (delta 1) or WaitEnd (delta -1).
func (in *instruments) wait(ctx context.Context, e observe.Event, delta int64, withResource bool) {
	in.waiters.Add(ctx, delta, in.callOpts(e.Call, e.Resource, withResource).add...)
}

// lockEnd records an observe.LockEnd: one lock less held, how long it was
// held, and whether it was lost; for a campaign's lock, the end of a
// term.
func (in *instruments) lockEnd(ctx context.Context, e observe.Event, withResource bool) {
	opts := in.plainOpts(e.Resource, withResource)
	in.held.Add(ctx, -1, opts.add...)
	in.holdDuration.Record(ctx, e.Duration.Seconds(), opts.record...)
	if e.Outcome == observe.Lost {
		in.lost.Add(ctx, 1, opts.add...)
	}
	if e.Call == observe.CallCampaign {
		in.leader.Add(ctx, -1, electionOpts(e.Resource, withResource).add...)
		term := in.byTerm[0]
		if e.Outcome != observe.Released {
			term = in.byTerm[1]
		}
		if withResource {
			outcome := termResigned
			if e.Outcome != observe.Released {
				outcome = termLost
			}
			term = newMeasureOpts(attribute.NewSet(AttrOutcome.String(outcome), AttrResource.String(e.Resource)))
		}
		in.terms.Add(ctx, 1, term.add...)
	}
}

// electionOpts returns the measurement options of the election named
// name: campaigns are few, so making them each time costs little.
func electionOpts(name string, withResource bool) measureOpts {
	if withResource {
		// The election's name is its lock's resource.
		return newMeasureOpts(attribute.NewSet(AttrElection.String(name), AttrResource.String(name)))
	}
	return newMeasureOpts(attribute.NewSet(AttrElection.String(name)))
}

// refreshFailed counts an observe.RefreshFailed.
func (in *instruments) refreshFailed(ctx context.Context, e observe.Event, withResource bool) {
	in.refreshFailures.Add(ctx, 1, in.plainOpts(e.Resource, withResource).add...)
}

// storeWriteEnd counts an EventStoreWriteEnd by its outcome.
func (in *instruments) storeWriteEnd(ctx context.Context, e observe.Event, withResource bool) {
	in.writes.Add(ctx, 1, in.outcomeOpts(e.Outcome, e.Resource, withResource).add...)
}

// storeFenceEnd counts an EventStoreFenceEnd by its outcome.
func (in *instruments) storeFenceEnd(ctx context.Context, e observe.Event, withResource bool) {
	in.fences.Add(ctx, 1, in.outcomeOpts(e.Outcome, e.Resource, withResource).add...)
}
