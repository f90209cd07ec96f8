// Package fencedotel provides an OpenTelemetry [observe.Observer]:
// metrics and spans for the locks of a [fencedlock.Locker] and the writes
// to, and fences of, the stores that [fencedlock.ObserveStore] wraps.
//
// It is a module of its own, so that the fencedlock module does not
// require OpenTelemetry; it needs Go 1.26 or later, as OpenTelemetry Go
// v1.47 does. Create one [Observer] and give it to every
// Locker and store of the process:
//
//	obs, err := fencedotel.NewObserver() // the global providers
//	if err != nil { ... }
//	locker := fencedlock.New(client, fencedlock.WithObserver(obs))
//	store := fencedlock.ObserveStore(fencedlock.NewRedisStore(client), obs)
//
// [NewObserver] fails only when a provider gives no Meter or Tracer, or
// refuses an instrument; [WithMeterProvider] and [WithTracerProvider] name
// providers other than the global ones. Recording does no I/O on the
// caller's goroutine unless a span processor exports there (see
// [Observer]).
//
// # Metrics
//
// Their names, units and attributes are stable:
//
//	name                              instrument              unit       attributes
//	fencedlock.acquire.duration       float64 histogram       s          fencedlock.call, fencedlock.outcome
//	fencedlock.waiters                int64 up-down counter   {waiter}   fencedlock.call
//	fencedlock.lock.held              int64 up-down counter   {lock}
//	fencedlock.lock.hold.duration     float64 histogram       s
//	fencedlock.lock.lost              int64 counter           {lock}
//	fencedlock.lock.refresh.failures  int64 counter           {refresh}
//	fencedlock.store.writes           int64 counter           {write}    fencedlock.outcome
//	fencedlock.store.fences           int64 counter           {fence}    fencedlock.outcome
//	fencedlock.election.leader        int64 up-down counter   {leader}   fencedlock.election
//	fencedlock.election.terms         int64 counter           {term}     fencedlock.outcome
//
// What each measures:
//
//   - fencedlock.acquire.duration is the time from a call to TryAcquire
//     or Acquire to its return, waiting included; for Do, the time of the
//     Acquire that Do makes before it calls fn, not fn's. Its
//     fencedlock.call is try (TryAcquire), acquire (Acquire), do (Do) or
//     campaign (package election's Campaign, and so Run: a standby
//     candidate waits as long as the leader leads, so leave campaign out
//     of acquire latencies). Its fencedlock.outcome is acquired,
//     not_acquired (Redis said the lock is held: normal for try),
//     timeout or canceled (ctx reached its deadline, or was canceled,
//     while waiting or before the call), unavailable (Redis could not be
//     reached or did not answer) or error.
//   - fencedlock.waiters is the number of goroutines of the process
//     waiting in Acquire, Do or Campaign, by call: from the first refused
//     attempt, or from queueing behind another goroutine of the same
//     Locker waiting for the same resource, until the call returns. Each
//     Locker counts its own, in the process, with no call to Redis.
//   - fencedlock.lock.held goes up by one when a lock is granted and down
//     by one when it ends, released or lost: the locks held now.
//   - fencedlock.lock.hold.duration is the time from a grant to the
//     lock's end.
//   - fencedlock.lock.lost counts the locks that ended lost: a heartbeat,
//     a Refresh or a Release found them expired or taken, or their lease
//     ran out by the local clock (no Refresh succeeded within the TTL,
//     with or without a heartbeat; an Observer makes the Lock watch its
//     lease, so this is counted when it happens).
//   - fencedlock.lock.refresh.failures counts the heartbeat refreshes that
//     failed without Redis answering that the lock is gone (Redis
//     unreachable, slow, failing over): the earliest sign of trouble,
//     before any lock is lost.
//   - fencedlock.store.writes counts the Puts to observed stores: accepted,
//     stale (a newer token had written or fenced: the writer had lost its
//     lock) or error.
//   - fencedlock.store.fences counts the fences of observed stores: each
//     Fence, and each fenced read of fencedlock.Update (an Update counts
//     one fence, then one write if it gets that far): accepted (the fence
//     is at the token), stale (a newer token had fenced or written: the
//     reader had lost its lock) or error. Fences have a counter of their
//     own so that fencedlock.store.writes keeps counting writes only, and
//     a stale fence, a holder caught before it wrote, is told apart from
//     a stale write.
//   - fencedlock.election.leader is 1 while this process leads the
//     election named by fencedlock.election, 0 once its term ended (an
//     election's name is fixed by the program, so bounded).
//   - fencedlock.election.terms counts the terms of this process's
//     leaders that ended: resigned (Resign, or Run's end) or lost.
//
// Without [WithResourceAttribute], every counter reports zero for each of
// its outcomes, and the up-down counters zero, from the moment the
// Observer is made, so that a query of increase() sees the first loss or
// stale write. The leader gauge of an election appears at its first term.
//
// A histogram's buckets are advised for seconds, from half a millisecond
// to a minute for acquires and to an hour for holds; a View can change
// them. By default no metric attribute carries a resource's name or a
// token, so the number of time series stays bounded whatever the
// resources are called. [WithResourceAttribute] adds fencedlock.resource
// to every metric, for a process with a few resources of fixed names.
//
// # Dashboard
//
// fencedotel/dashboards/fencedlock.json is a Grafana dashboard of these
// metrics as the OpenTelemetry Prometheus exporter names them (dots
// become underscores, a unit "s" adds _seconds, a counter _total). Its
// panels and their PromQL queries:
//
//	acquire latency p50, p99 by call (ordinary locks: campaigns left out):
//	  histogram_quantile(0.5, sum by (le, fencedlock_call) (rate(fencedlock_acquire_duration_seconds_bucket{fencedlock_call!="campaign"}[5m])))
//	  histogram_quantile(0.99, sum by (le, fencedlock_call) (rate(fencedlock_acquire_duration_seconds_bucket{fencedlock_call!="campaign"}[5m])))
//	waiters, by call:
//	  sum by (fencedlock_call) (fencedlock_waiters)
//	contention share: the Acquires and Dos that had to wait, and the TryAcquires refused:
//	  sum(rate(fencedlock_acquire_duration_seconds_count{fencedlock_call!="campaign",fencedlock_outcome=~"not_acquired|timeout|canceled"}[5m])) / sum(rate(fencedlock_acquire_duration_seconds_count{fencedlock_call!="campaign"}[5m]))
//	acquires that gave up, by outcome:
//	  sum by (fencedlock_outcome) (increase(fencedlock_acquire_duration_seconds_count{fencedlock_outcome=~"timeout|canceled|unavailable|error"}[5m]))
//	locks lost:
//	  sum(increase(fencedlock_lock_lost_total[5m]))
//	stale writes and fences refused:
//	  sum(increase(fencedlock_store_writes_total{fencedlock_outcome="stale"}[5m]))
//	  sum(increase(fencedlock_store_fences_total{fencedlock_outcome="stale"}[5m]))
//	heartbeat refresh failures:
//	  sum(increase(fencedlock_lock_refresh_failures_total[5m]))
//	leaders, by election:
//	  sum by (fencedlock_election) (fencedlock_election_leader)
//	terms ended, by outcome:
//	  sum by (fencedlock_outcome) (increase(fencedlock_election_terms_total[1h]))
//
// The contention share counts as contended an Acquire whose ctx ended
// while it waited too; an Acquire that waited and got the lock counts
// only in fencedlock.waiters and the latency. A test checks that every
// metric and label of these queries is in a scrape of examples/metrics.
//
// # Spans
//
//   - fencedlock.acquire covers TryAcquire or Acquire (Do's acquire
//     included), the wait too. Attributes: fencedlock.resource,
//     fencedlock.ttl_ms, fencedlock.outcome, fencedlock.wait_ms (the
//     wait, a float64 in milliseconds), and fencedlock.token once granted.
//   - fencedlock.release covers Release. Attributes: fencedlock.resource,
//     fencedlock.token.
//   - fencedlock.store.put covers a Put to an observed store. Attributes:
//     fencedlock.resource, fencedlock.token, fencedlock.outcome.
//   - fencedlock.store.fence covers a Fence of an observed store, or the
//     fenced read of fencedlock.Update (the read included). Attributes:
//     fencedlock.resource, fencedlock.token, fencedlock.outcome.
//
// An Update makes a fencedlock.store.fence span, then a
// fencedlock.store.put span, side by side under the caller's span.
//
// A span whose operation failed (not acquired, unavailable, lost, stale,
// any error) has the status Error and the error recorded as an event.
// Each span is a child of the span in the caller's ctx, and the Redis
// commands its operation sends get the span in their ctx, so a go-redis
// tracing hook makes them its children. fencedlock.token is an int64
// when the token is at most math.MaxInt64, and its decimal string above
// (no token shows as a negative number). Attributes are set only on a
// span that records, so a span that is not sampled costs no more than
// starting it, and a sampler does not see them. An Observer ends only
// the spans it started itself, never one of the caller's.
//
// A release that hands the lock to a waiter adds the span event
// fencedlock.hand_over ([EventHandOver]), with the new holder's
// fencedlock.token, to the release's span; when a waiter that gives up
// hands on a lock granted to it meanwhile, to its acquire span, if not
// ended yet; when election's Run hands on the key of a term whose lease
// ran out, to the span of Run's ctx, if it has one. See
// https://github.com/fencedlock/fencedlock/blob/main/docs/waiting.md for
// hand-overs.
//
// A failed heartbeat refresh adds the span event
// fencedlock.refresh_failed ([EventRefreshFailed]), with the lock's
// fencedlock.token, fencedlock.ttl_ms and the error's text
// (exception.message), to the span the lock was acquired under (the span
// in the ctx of TryAcquire, Acquire or Do: the parent of the
// fencedlock.acquire span, which has ended by then), while that span
// records. Heartbeat refreshes themselves, and the end of a lock,
// released or lost, make no span; the end of a lock shows in
// fencedlock.lock.held, fencedlock.lock.hold.duration and
// fencedlock.lock.lost, and a Release that finds the lock lost fails its
// fencedlock.release span.
package fencedotel
