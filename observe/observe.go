// Package observe is what a fencedlock.Locker, and a Store wrapped by
// fencedlock.ObserveStore, tell an Observer: acquires, the waits in them,
// releases, hand-overs, the end of each Lock, failed heartbeat refreshes,
// and store writes and fences. It is the hook for metrics and tracing: the fencedotel module
// turns the events into OpenTelemetry metrics and spans.
//
//	locker := fencedlock.New(client, fencedlock.WithObserver(observe.Func(
//		func(ctx context.Context, e observe.Event) context.Context {
//			if e.Kind == observe.AcquireEnd {
//				log.Printf("%s %s after %v", e.Resource, e.Outcome, e.Duration)
//			}
//			return ctx
//		})))
//
// Events are made only when a Locker has an Observer (or a logger): one
// without costs nothing.
package observe

import (
	"context"
	"strconv"
	"time"
)

// Observer receives the events of a Locker or an observed Store.
//
// Observe is called synchronously, on the goroutine that does the work,
// so it must be quick and must not block; it must not call the Locker or
// the Lock that the event is about. For an event that starts an
// operation (AcquireStart, ReleaseStart, StoreWriteStart,
// StoreFenceStart) the ctx it returns is the one the operation goes on
// with, and the one its end event gets: a tracer returns ctx with its
// span, so that the Redis commands the operation sends are children of
// that span. For any other event it should return ctx; the result is
// ignored.
//
// New kinds of events and new fields of Event may be added: an Observer
// should ignore kinds it does not know.
type Observer interface {
	Observe(ctx context.Context, e Event) context.Context
}

// Func adapts a function to the Observer interface.
type Func func(ctx context.Context, e Event) context.Context

// Observe calls f(ctx, e).
func (f Func) Observe(ctx context.Context, e Event) context.Context { return f(ctx, e) }

// Event is one thing a Locker or an observed Store did. Which fields are
// set depends on Kind: see the Kind constants.
type Event struct {
	Kind     Kind
	Call     Call // the call that acquires, or acquired, the lock; zero for other events
	Resource string
	Token    uint64 // a fencedlock.Token; 0: none
	TTL      time.Duration
	Outcome  Outcome
	Duration time.Duration
	Err      error
}

// Kind says what an Event reports.
type Kind uint8

// The kinds of events. The fields each one sets are listed; the others
// are zero.
const (
	// AcquireStart: TryAcquire or Acquire was called (Do and package
	// election's Campaign call Acquire). Call, Resource, TTL.
	AcquireStart Kind = iota + 1
	// AcquireEnd: TryAcquire or Acquire returns. Call, Resource, TTL,
	// Outcome (Acquired, NotAcquired, Timeout, Canceled, Unavailable or
	// Failed), Duration (from the call to its return: the wait), Token
	// when acquired, Err when not.
	AcquireEnd
	// LockEnd: a Lock that was acquired is no longer held. Call (the
	// call that acquired it), Resource, Token, Outcome (Released or
	// Lost), Duration (from the grant to the end), Err
	// (fencedlock.ErrReleased, or why it was lost).
	LockEnd
	// RefreshFailed: a heartbeat's Refresh failed without Redis answering
	// that the lock is gone: it is tried again while the lock is
	// certainly held, and the Lock ends lost (LockEnd) when its lease runs
	// out first. Resource, Token, TTL, Err. (A Refresh that finds the
	// lock gone ends it: LockEnd.)
	RefreshFailed
	// ReleaseStart: Release was called. Resource, Token.
	ReleaseStart
	// ReleaseEnd: Release returns. Resource, Token, Duration, Err (nil
	// when it released the lock).
	ReleaseEnd
	// HandOver: a release by this Locker (Release, a waiter leaving the
	// queue, or package election's Run deleting the key of a term whose
	// lease ran out, which reports no Release) handed the lock to the
	// first waiter in the queue, of this process or another. Resource,
	// Token (the new holder's).
	HandOver
	// StoreWriteStart: a write to a Store that fencedlock.ObserveStore
	// wraps begins. Resource, Token.
	StoreWriteStart
	// StoreWriteEnd: the write returns. Resource, Token, Outcome
	// (Accepted, Stale or Failed), Duration, Err.
	StoreWriteEnd
	// StoreFenceStart: a Fence of a Store that fencedlock.ObserveStore
	// wraps begins, or the fenced read of fencedlock.Update. Resource,
	// Token.
	StoreFenceStart
	// StoreFenceEnd: the Fence returns. Resource, Token, Outcome
	// (Accepted when the fence is at the token, Stale or Failed),
	// Duration, Err.
	StoreFenceEnd
	// WaitStart: an Acquire begins to wait: its first attempt was
	// refused, or it queued behind another goroutine of the Locker
	// waiting for the same resource. Call, Resource, TTL. Each WaitStart
	// is followed by one WaitEnd, before the Acquire's AcquireEnd.
	WaitStart
	// WaitEnd: the wait of WaitStart is over, granted or not. Call,
	// Resource, TTL, Duration (from WaitStart).
	WaitEnd
)

var kindNames = [...]string{
	AcquireStart:    "acquire_start",
	AcquireEnd:      "acquire_end",
	LockEnd:         "lock_end",
	RefreshFailed:   "refresh_failed",
	ReleaseStart:    "release_start",
	ReleaseEnd:      "release_end",
	HandOver:        "hand_over",
	StoreWriteStart: "store_write_start",
	StoreWriteEnd:   "store_write_end",
	StoreFenceStart: "store_fence_start",
	StoreFenceEnd:   "store_fence_end",
	WaitStart:       "wait_start",
	WaitEnd:         "wait_end",
}

// String returns the kind's name in snake case, e.g. "acquire_end".
func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Outcome is how an acquire, a lock, or a store write or fence ended.
type Outcome uint8

// The outcomes. Their String values are the values of the
// fencedlock.outcome attribute of fencedotel's metrics.
const (
	None Outcome = iota // the event has no outcome
	// Acquired: the lock was granted.
	Acquired
	// NotAcquired: Redis answered that the lock is held
	// (fencedlock.ErrNotAcquired).
	NotAcquired
	// Unavailable: Redis could not be reached or did not answer
	// (fencedlock.ErrUnavailable).
	Unavailable
	// Failed: any other error (a bad argument, corrupt state,
	// unconfirmed replication); its String is "error".
	Failed
	// Released: the Lock ended by Release.
	Released
	// Lost: the Lock ended lost (fencedlock.ErrLockLost).
	Lost
	// Accepted: the store took the write, or raised its fence.
	Accepted
	// Stale: the store refused the token (fencedlock.ErrStaleToken).
	Stale
	// Timeout: the ctx of the acquire reached its deadline before the
	// lock was granted, while Redis said it was held or before the call
	// (fencedlock.ErrNotAcquired and context.DeadlineExceeded).
	Timeout
	// Canceled: the ctx of the acquire was canceled before the lock was
	// granted (context.Canceled, and fencedlock.ErrNotAcquired when
	// Redis had said the lock was held).
	Canceled
)

var outcomeNames = [...]string{
	None:        "none",
	Acquired:    "acquired",
	NotAcquired: "not_acquired",
	Unavailable: "unavailable",
	Failed:      "error",
	Released:    "released",
	Lost:        "lost",
	Accepted:    "accepted",
	Stale:       "stale",
	Timeout:     "timeout",
	Canceled:    "canceled",
}

// String returns the outcome's name in snake case, e.g. "not_acquired".
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Call is the call that acquires a lock: the value of the
// fencedlock.call attribute of fencedotel's acquire metric.
type Call uint8

// The calls that acquire a lock.
const (
	CallNone     Call = iota // the event is not about an acquire
	CallTry                  // Locker.TryAcquire
	CallAcquire              // Locker.Acquire
	CallDo                   // Locker.Do
	CallCampaign             // election.Campaign, and so election.Run
)

var callNames = [...]string{CallNone: "none", CallTry: "try", CallAcquire: "acquire", CallDo: "do", CallCampaign: "campaign"}

// String returns the call's name: "try", "acquire", "do", "campaign".
func (c Call) String() string {
	if int(c) < len(callNames) {
		return callNames[c]
	}
	return "Call(" + strconv.Itoa(int(c)) + ")"
}
