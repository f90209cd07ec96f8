package fencedlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencedlock/fencedlock/internal/call"
	"github.com/fencedlock/fencedlock/observe"
)

// WithHeartbeat makes Acquire keep the lock it returns: every interval, a
// background goroutine refreshes the lock for its TTL, until Release or
// until the lock is lost. An interval of 0 means a third of the TTL;
// another must be at least 1ms and at most half the TTL, or Acquire
// returns an error wrapping ErrInvalidArgument.
//
// The Lock is lost (Done is closed and Err wraps ErrLockLost) as soon as a
// refresh finds the key gone or held by another owner, and also when
// refreshes keep failing for another reason (Redis unreachable, slow,
// failing over) until the lease is within a twentieth of running out by
// the local monotonic clock. So the holder hears of the loss before Redis
// lets the key expire, even when Redis does not answer at all. Once lost,
// nothing more is sent to Redis for the Lock but one Release (see Lock).
//
// The heartbeat keeps the lock alive; it does not make writes safe. A
// paused process does not run its heartbeat either, and only the store's
// token check stops its late writes. Call Release when done: the
// heartbeat of a Lock that is never released keeps the lock for ever.
func WithHeartbeat(interval time.Duration) AcquireOption {
	return func(c *acquireConfig) { c.heartbeat, c.beat = interval, true }
}

// lossMargin: the heartbeat gives up a lock when less than 1/lossMargin of
// its TTL is left, so that the holder hears of the loss before the key
// expires, whatever the timer and scheduling delays.
const lossMargin = 20

// certainFor is how long a grant or refresh for ttl, measured from before
// it was sent, is certain to hold the lock: all but 1/lossMargin of ttl.
func certainFor(ttl time.Duration) time.Duration { return ttl - ttl/lossMargin }

// heartbeatInterval checks the interval of WithHeartbeat against ttl.
func heartbeatInterval(interval, ttl time.Duration) (time.Duration, error) {
	switch {
	case interval < 0:
		return 0, invalidArg("heartbeat interval %v is negative", interval)
	case interval == 0:
		return ttl / 3, nil
	case interval < time.Millisecond:
		return 0, invalidArg("heartbeat interval %v is below 1ms: each refresh is a round trip to Redis (a duration in seconds wants time.Second)", interval)
	case interval > ttl/2:
		return 0, invalidArg("heartbeat interval %v is above half the ttl %v: one late refresh would lose the lock", interval, ttl)
	}
	return interval, nil
}

// startHeartbeat starts refreshing the held Lock every interval.
func (k *Lock) startHeartbeat(interval time.Duration) {
	ctx, stop := context.WithCancel(context.Background())
	kick, ok := k.attachHeartbeat(stop)
	if !ok {
		stop()
		return
	}
	go k.heartbeat(ctx, interval, kick)
}

// heartbeat is the goroutine of startHeartbeat; ctx ends when the Lock
// does, and kick says that a Refresh changed the TTL.
//
// Each round it refreshes at base+interval, base being when the last
// successful refresh (or the grant) was sent; a failed refresh is tried
// again every quarter interval. No round is later than the deadline, when
// less than 1/lossMargin of the TTL is left: a Lock not refreshed by then
// is lost. A TTL below twice the interval, set by Refresh, shortens the
// interval to a third of it.
func (k *Lock) heartbeat(ctx context.Context, interval time.Duration, kick <-chan struct{}) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var retry time.Time // when to try again after a failed refresh
	for {
		base, ttl, deadline := k.lease()
		every := interval
		if every > ttl/2 {
			every = ttl / 3
		}
		next := base.Add(every)
		if retry.After(base) {
			next = retry
		}
		if next.After(deadline) {
			next = deadline
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(time.Until(next))
		select {
		case <-ctx.Done():
			return
		case <-kick:
			continue
		case <-timer.C:
		}
		sent := time.Now()
		if !sent.Before(deadline) {
			if k.ranOutIfDue(ranOutWhy(ttl, nil)) {
				return
			}
			continue // a Refresh of the caller's moved the lease on
		}
		rctx, cancel := context.WithDeadline(ctx, deadline)
		err := k.refresh(rctx, ttl)
		cancel()
		if ctx.Err() != nil {
			return // released or ended meanwhile: the result does not matter
		}
		switch {
		case err == nil:
			k.hold(sent, ttl)
		case errors.Is(err, errNotHeld):
			k.lost("refresh found the lock gone or taken")
			return
		default:
			returned := time.Now()
			k.unknown(sent, returned, ttl)
			k.refreshFailed(ttl, err)
			// The lease's end read above may be past, and yet a Refresh
			// of the caller's have moved it on meanwhile: the Lock ends
			// only by its lease as it is now.
			if !returned.Before(deadline) && k.ranOutIfDue(ranOutWhy(ttl, err)) {
				return
			}
			retry = returned.Add(max(every/4, time.Millisecond))
		}
	}
}

// stopHeartbeat stops the Lock's heartbeat, if one runs: the Lock stays
// held until a Release, or until its lease runs out by the local clock
// (it then ends as lost, and so does the lock in Redis with its TTL).
func (k *Lock) stopHeartbeat() {
	k.mu.Lock()
	stop := k.stop
	k.stop = nil
	if stop != nil && !k.state.ended() {
		k.armExpiryLocked() // the heartbeat no longer ends it at its lease
	}
	k.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// refreshFailed reports a failed refresh of the heartbeat, for ttl, that
// did not find the lock gone (see observe.RefreshFailed).
func (k *Lock) refreshFailed(ttl time.Duration, err error) {
	if l := k.locker; l.watched() {
		l.emit(k.eventCtx(), observe.Event{Kind: observe.RefreshFailed, Resource: k.resource, Token: uint64(k.token), TTL: ttl, Err: err})
	}
}

// Do runs fn while holding the lock on resource. It acquires the lock
// like Acquire, keeps it with a heartbeat at a third of ttl (see
// WithHeartbeat), runs fn, and releases the lock when fn returns or
// panics: within ctx, or, once ctx is done, in the background within a
// second.
//
// fn's context is cancelled when ctx is done and the moment the lock is
// found lost, then with a cause wrapping ErrLockLost (read it with
// context.Cause). fn must stop when it is: a fenced store refuses its
// later writes, but work outside the store is not protected. Pass
// lock.Token with every write.
//
// Do returns fn's error, or the error of acquiring the lock (fn does not
// run then). When the lock was lost while fn ran and fn returns an error,
// Do's error matches both ErrLockLost and fn's error. An error of the
// final Release is not returned: the work is done, and a lock that could
// not be released ends when its TTL runs out.
func (l *Locker) Do(ctx context.Context, resource string, ttl time.Duration, fn func(ctx context.Context, lock *Lock) error) error {
	if fn == nil {
		return invalidArg("nil fn")
	}
	lock, err := l.Acquire(ctx, resource, ttl, WithHeartbeat(0), asDo)
	if err != nil {
		return err
	}
	fnCtx, cancel := context.WithCancelCause(ctx)
	lock.onEnded(cancel)
	defer func() {
		cancel(context.Canceled)
		// Within ctx, and within a second in the background once ctx
		// has ended; a failure then is logged (see WithLogger).
		err := l.cleanups.Run(ctx, resource, "release after Do", call.Timeout, lock.Release)
		if errors.Is(err, call.ErrNotStarted) {
			// Too many cleanups run: release here while ctx lasts (which
			// stops the heartbeat, whatever its outcome); once it has
			// ended, stop the heartbeat, and the lock ends with its TTL.
			if call.Ended(ctx) == nil {
				_ = lock.Release(ctx)
			}
			lock.stopHeartbeat()
		}
	}()
	err = fn(fnCtx, lock)
	if err != nil {
		if lost := lock.Err(); errors.Is(lost, ErrLockLost) && !errors.Is(err, ErrLockLost) {
			err = fmt.Errorf("%w; %w", lost, err)
		}
	}
	return err
}
