// Package fencedotel provides an OpenTelemetry [observe.Observer]:
// metrics and spans for the locks of a [fencedlock.Locker] and the writes
// to, and fences of, the stores that [fencedlock.ObserveStore] wraps.
//
// It is a module of its own, so that the fencedlock module does not
// require OpenTelemetry. Create one [Observer] and give it to every
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
//	name                            instrument                unit     attributes
//	fencedlock.acquire.duration     float64 histogram         s        fencedlock.outcome
//	fencedlock.lock.held            int64 up-down counter     {lock}
//	fencedlock.lock.hold.duration   float64 histogram         s
//	fencedlock.lock.lost            int64 counter             {lock}
//	fencedlock.store.writes         int64 counter             {write}  fencedlock.outcome
//	fencedlock.store.fences         int64 counter             {fence}  fencedlock.outcome
//
// What each measures:
//
//   - fencedlock.acquire.duration is the time from a call to TryAcquire
//     or Acquire to its return, waiting included; for Do, the time of the
//     Acquire that Do makes before it calls fn, not fn's. Its
//     fencedlock.outcome is acquired, not_acquired (the lock was held, or
//     ctx ended while waiting), unavailable (Redis could not be reached
//     or did not answer) or error.
//   - fencedlock.lock.held goes up by one when a lock is granted and down
//     by one when it ends, released or lost: the locks held now.
//   - fencedlock.lock.hold.duration is the time from a grant to the
//     lock's end.
//   - fencedlock.lock.lost counts the locks that ended lost (a heartbeat
//     or a release found them expired or taken, or the lease ran out).
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
//
// A histogram's buckets are advised for seconds, from half a millisecond
// to a minute for acquires and to an hour for holds; a View can change
// them. By default no metric attribute carries a resource's name or a
// token, so the number of time series stays bounded whatever the
// resources are called. [WithResourceAttribute] adds fencedlock.resource
// to every metric, for a process with a few resources of fixed names.
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
// ended yet. See
// https://github.com/fencedlock/fencedlock/blob/main/docs/waiting.md for
// hand-overs.
//
// Heartbeat refreshes, and the end of a lock, released or lost, happen
// outside any operation's ctx: they make no span and no span event. A
// failed refresh that will be tried again is not recorded at all; the
// end of a lock shows in fencedlock.lock.held,
// fencedlock.lock.hold.duration and fencedlock.lock.lost, and a Release
// that finds the lock lost fails its fencedlock.release span.
package fencedotel
