package fencedlock

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"
)

// Observer receives what a Locker does and what an observed Store
// accepts: the hook for metrics and tracing (see WithObserver,
// ObserveStore, and the fencedotel module for OpenTelemetry).
//
// Observe is called synchronously, on the goroutine that does the work,
// so it must be quick and must not block; it must not call the Locker or
// the Lock that the event is about. For an event that starts an
// operation (EventAcquireStart, EventReleaseStart, EventStoreWriteStart,
// EventStoreFenceStart)
// the ctx it returns is the one the operation goes on with, and the one
// its end event gets: a tracer returns ctx with its span, so that the
// Redis commands the operation sends are children of that span. For any
// other event it should return ctx; the result is ignored.
//
// New kinds of events and new fields of Event may be added: an Observer
// should ignore kinds it does not know.
type Observer interface {
	Observe(ctx context.Context, e Event) context.Context
}

// ObserverFunc adapts a function to the Observer interface.
type ObserverFunc func(ctx context.Context, e Event) context.Context

// Observe calls f(ctx, e).
func (f ObserverFunc) Observe(ctx context.Context, e Event) context.Context { return f(ctx, e) }

// WithObserver makes the Locker report its events to o (see Observer).
// nil, the default, reports nothing, and costs nothing.
func WithObserver(o Observer) Option {
	return func(l *Locker) { l.observer = o }
}

// EventKind says what an Event reports.
type EventKind uint8

// The kinds of events. The fields each one sets are listed; the others
// are zero.
const (
	// EventAcquireStart: TryAcquire or Acquire was called (Do calls
	// Acquire). Resource, TTL.
	EventAcquireStart EventKind = iota + 1
	// EventAcquireEnd: TryAcquire or Acquire returns. Resource, TTL,
	// Outcome (OutcomeAcquired, OutcomeNotAcquired, OutcomeUnavailable or
	// OutcomeError), Duration (from the call to its return: the wait),
	// Token when acquired, Err when not.
	EventAcquireEnd
	// EventLockEnd: a Lock that was acquired is no longer held. Resource,
	// Token, Outcome (OutcomeReleased or OutcomeLost), Duration (from the
	// grant to the end), Err (ErrReleased, or why it was lost).
	EventLockEnd
	// EventRefreshFailed: a heartbeat's Refresh failed and will be tried
	// again while the lock is certainly held. Resource, Token, TTL, Err.
	// (A Refresh that finds the lock lost ends it: EventLockEnd.)
	EventRefreshFailed
	// EventReleaseStart: Release was called. Resource, Token.
	EventReleaseStart
	// EventReleaseEnd: Release returns. Resource, Token, Duration, Err
	// (nil when it released the lock).
	EventReleaseEnd
	// EventHandOver: a release by this Locker (Release, or a waiter
	// leaving the queue) handed the lock to the first waiter in the
	// queue, of this process or another. Resource, Token (the new
	// holder's).
	EventHandOver
	// EventStoreWriteStart: a write to a Store that ObserveStore wraps
	// begins. Resource, Token.
	EventStoreWriteStart
	// EventStoreWriteEnd: the write returns. Resource, Token, Outcome
	// (OutcomeAccepted, OutcomeStale or OutcomeError), Duration, Err.
	EventStoreWriteEnd
	// EventStoreFenceStart: a Fence of a Store that ObserveStore wraps
	// begins, or the fenced read of Update. Resource, Token.
	EventStoreFenceStart
	// EventStoreFenceEnd: the Fence returns. Resource, Token, Outcome
	// (OutcomeAccepted when the fence is at the token, OutcomeStale or
	// OutcomeError), Duration, Err.
	EventStoreFenceEnd
)

var eventKindNames = [...]string{
	EventAcquireStart:    "acquire_start",
	EventAcquireEnd:      "acquire_end",
	EventLockEnd:         "lock_end",
	EventRefreshFailed:   "refresh_failed",
	EventReleaseStart:    "release_start",
	EventReleaseEnd:      "release_end",
	EventHandOver:        "hand_over",
	EventStoreWriteStart: "store_write_start",
	EventStoreWriteEnd:   "store_write_end",
	EventStoreFenceStart: "store_fence_start",
	EventStoreFenceEnd:   "store_fence_end",
}

// String returns the kind's name in snake case, e.g. "acquire_end".
func (k EventKind) String() string {
	if int(k) < len(eventKindNames) && eventKindNames[k] != "" {
		return eventKindNames[k]
	}
	return "EventKind(" + strconv.Itoa(int(k)) + ")"
}

// Outcome is how an acquire, a lock or a store write ended.
type Outcome uint8

// The outcomes. Their String values are the values of the
// fencedlock.outcome attribute of fencedotel's metrics.
const (
	OutcomeNone Outcome = iota // the event has no outcome
	// OutcomeAcquired: the lock was granted.
	OutcomeAcquired
	// OutcomeNotAcquired: Redis answered that the lock is held, or ctx
	// ended while waiting (ErrNotAcquired).
	OutcomeNotAcquired
	// OutcomeUnavailable: Redis could not be reached or did not answer
	// (ErrUnavailable).
	OutcomeUnavailable
	// OutcomeError: any other error (a bad argument, corrupt state,
	// unconfirmed replication).
	OutcomeError
	// OutcomeReleased: the Lock ended by Release.
	OutcomeReleased
	// OutcomeLost: the Lock ended lost (ErrLockLost).
	OutcomeLost
	// OutcomeAccepted: the store took the write.
	OutcomeAccepted
	// OutcomeStale: the store refused the write's token (ErrStaleToken).
	OutcomeStale
)

var outcomeNames = [...]string{
	OutcomeNone:        "none",
	OutcomeAcquired:    "acquired",
	OutcomeNotAcquired: "not_acquired",
	OutcomeUnavailable: "unavailable",
	OutcomeError:       "error",
	OutcomeReleased:    "released",
	OutcomeLost:        "lost",
	OutcomeAccepted:    "accepted",
	OutcomeStale:       "stale",
}

// String returns the outcome's name in snake case, e.g. "not_acquired".
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Event is one thing a Locker or an observed Store did. Which fields are
// set depends on Kind: see the EventKind constants.
type Event struct {
	Kind     EventKind
	Resource string
	Token    Token
	TTL      time.Duration
	Outcome  Outcome
	Duration time.Duration
	Err      error
}

// acquireOutcome classifies the result of TryAcquire or Acquire.
func acquireOutcome(err error) Outcome {
	switch {
	case err == nil:
		return OutcomeAcquired
	case errors.Is(err, ErrUnavailable):
		return OutcomeUnavailable
	case errors.Is(err, ErrNotAcquired):
		return OutcomeNotAcquired
	}
	return OutcomeError
}

// writeOutcome classifies the result of a store write.
func writeOutcome(err error) Outcome {
	switch {
	case err == nil:
		return OutcomeAccepted
	case errors.Is(err, ErrStaleToken):
		return OutcomeStale
	}
	return OutcomeError
}

// watched reports whether the Locker reports events to anyone: when it
// does not, no event is made.
func (l *Locker) watched() bool { return l.observer != nil || l.logger != nil }

// emit logs e (see WithLogger) and reports it to the observer; it returns
// the ctx the observer returned.
func (l *Locker) emit(ctx context.Context, e Event) context.Context {
	if l.logger != nil {
		l.log(ctx, e)
	}
	if l.observer == nil {
		return ctx
	}
	if octx := l.observer.Observe(ctx, e); octx != nil {
		return octx
	}
	return ctx
}

// log writes the log record of e, if any: losses and failed refreshes at
// Warn, grants, releases and hand-overs at Debug.
func (l *Locker) log(ctx context.Context, e Event) {
	level, msg := slog.LevelDebug, ""
	switch e.Kind {
	case EventAcquireEnd:
		msg = "fencedlock: lock granted"
		if e.Outcome != OutcomeAcquired {
			msg = "fencedlock: lock not acquired"
		}
	case EventLockEnd:
		msg = "fencedlock: lock released"
		if e.Outcome == OutcomeLost {
			level, msg = slog.LevelWarn, "fencedlock: lock lost"
		}
	case EventRefreshFailed:
		level, msg = slog.LevelWarn, "fencedlock: heartbeat refresh failed, will retry"
	case EventHandOver:
		msg = "fencedlock: lock handed over"
	default:
		return
	}
	if !l.logger.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 5)
	attrs = append(attrs, slog.String("resource", e.Resource))
	if e.Token != 0 {
		attrs = append(attrs, slog.String("token", e.Token.String()))
	}
	if e.TTL != 0 {
		attrs = append(attrs, slog.Duration("ttl", e.TTL))
	}
	if e.Kind == EventAcquireEnd {
		attrs = append(attrs, slog.Duration("wait", e.Duration))
	}
	if e.Err != nil && !errors.Is(e.Err, ErrReleased) {
		attrs = append(attrs, slog.String("err", e.Err.Error()))
	}
	l.logger.LogAttrs(ctx, level, msg, attrs...)
}

// logWaiting logs, at Debug, that an Acquire on resource waits: its
// first attempt was refused.
func (l *Locker) logWaiting(ctx context.Context, resource string, ttl time.Duration) {
	if l.logger == nil || !l.logger.Enabled(ctx, slog.LevelDebug) {
		return
	}
	l.logger.LogAttrs(ctx, slog.LevelDebug, "fencedlock: waiting for lock",
		slog.String("resource", resource), slog.Duration("ttl", ttl))
}

// acquireEnd reports the end of TryAcquire or Acquire, called at start.
// From then on the end of the Lock is reported too; if it ended already
// (its heartbeat found it lost), that is reported at once.
func (l *Locker) acquireEnd(ctx context.Context, start time.Time, resource string, ttl time.Duration, lock *Lock, err error) {
	e := Event{Kind: EventAcquireEnd, Resource: resource, TTL: ttl, Outcome: acquireOutcome(err), Duration: time.Since(start), Err: err}
	var ended error
	if lock != nil {
		e.Token = lock.token
		ended = lock.announce()
	}
	l.emit(ctx, e)
	if ended != nil {
		lock.reportEnd(ended)
	}
}

// reportEnd reports the end of k, an announced Lock, for the reason err.
func (k *Lock) reportEnd(err error) {
	outcome := OutcomeLost
	if errors.Is(err, ErrReleased) {
		outcome = OutcomeReleased
	}
	k.locker.emit(context.Background(), Event{Kind: EventLockEnd, Resource: k.resource, Token: k.token, Outcome: outcome, Duration: time.Since(k.grantedAt()), Err: err})
}

// ObserveStore returns a Store that passes every call to s and reports
// each Put to o (EventStoreWriteStart, then EventStoreWriteEnd with its
// outcome) and each Fence, Update's fenced read included
// (EventStoreFenceStart, then EventStoreFenceEnd). Values, tokens and
// errors pass through unchanged; o never sees a value. With a nil o it
// returns s.
//
// The Store returned has only the methods of the Store interface: call
// other methods of s on s itself.
func ObserveStore(s Store, o Observer) Store {
	if o == nil || s == nil {
		return s
	}
	return &observedStore{s: s, o: o}
}

type observedStore struct {
	s Store
	o Observer
}

// start reports the start of an operation and returns the ctx it goes on
// with.
func (s *observedStore) start(ctx context.Context, e Event) context.Context {
	if octx := s.o.Observe(ctx, e); octx != nil {
		return octx
	}
	return ctx
}

func (s *observedStore) Put(ctx context.Context, resource string, token Token, value []byte) error {
	ctx = s.start(ctx, Event{Kind: EventStoreWriteStart, Resource: resource, Token: token})
	start := time.Now()
	err := s.s.Put(ctx, resource, token, value)
	s.o.Observe(ctx, Event{Kind: EventStoreWriteEnd, Resource: resource, Token: token, Outcome: writeOutcome(err), Duration: time.Since(start), Err: err})
	return err
}

func (s *observedStore) Get(ctx context.Context, resource string) ([]byte, Token, error) {
	return s.s.Get(ctx, resource)
}

func (s *observedStore) Fence(ctx context.Context, resource string, token Token) error {
	_, _, err := s.fence(ctx, resource, token, false)
	return err
}

// fence reports a Fence, or the fenced read of Update, as one fence.
func (s *observedStore) fence(ctx context.Context, resource string, token Token, read bool) (value []byte, found bool, err error) {
	ctx = s.start(ctx, Event{Kind: EventStoreFenceStart, Resource: resource, Token: token})
	start := time.Now()
	if read {
		value, found, err = fencedRead(ctx, s.s, resource, token)
	} else {
		err = s.s.Fence(ctx, resource, token)
	}
	s.o.Observe(ctx, Event{Kind: EventStoreFenceEnd, Resource: resource, Token: token, Outcome: writeOutcome(err), Duration: time.Since(start), Err: err})
	return value, found, err
}
