package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencedlock/fencedlock"
)

// lossMargin: the keeper gives the lock up as lost when less than
// 1/lossMargin of its TTL is left by the local clock, as the library's
// heartbeat does (see fencedlock.WithHeartbeat), so that CMD hears of the
// loss before Redis lets the key expire.
const lossMargin = 20

// keeper keeps a Lock that TryAcquire took, which has no heartbeat of its
// own: it refreshes it for its TTL every third of the TTL, tries again
// every quarter of that after a refresh whose outcome is unknown, and
// finds the lock lost when Redis answers that it is gone or taken, or
// when no refresh succeeded before the lease was nearly out.
//
// A keeper is safe for concurrent use. Its goroutine is the only writer
// of err, and closes lost after writing it.
type keeper struct {
	lock    *fencedlock.Lock
	ttl     time.Duration
	stop    context.CancelFunc
	stopped chan struct{} // closed when the goroutine has returned
	lost    chan struct{} // closed when the lock was found lost

	mu  sync.Mutex // protects err
	err error      // why the lock was lost: nil while held
}

// keepLock starts keeping lock, granted for ttl by a call sent at sent,
// and returns it as a holding.
func keepLock(lock *fencedlock.Lock, ttl time.Duration, sent time.Time) *holding {
	ctx, stop := context.WithCancel(context.Background())
	k := &keeper{lock: lock, ttl: ttl, stop: stop, stopped: make(chan struct{}), lost: make(chan struct{})}
	go k.run(ctx, sent)
	return &holding{token: lock.Token(), done: k.lost, err: k.Err, end: k.release}
}

// run refreshes the lock until ctx ends or the lock is lost. base is when
// the last successful grant or refresh was sent.
func (k *keeper) run(ctx context.Context, base time.Time) {
	defer close(k.stopped)
	interval := k.ttl / 3
	retry := max(interval/4, time.Millisecond)
	deadline := base.Add(k.ttl - k.ttl/lossMargin)
	next := base.Add(interval)
	timer := time.NewTimer(time.Until(next))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		sent := time.Now()
		if !sent.Before(deadline) {
			// The process was stopped or starved past the lease.
			k.lose(fmt.Errorf("%w: %q (token %d): no refresh was sent within the TTL of %v", fencedlock.ErrLockLost, k.lock.Resource(), k.lock.Token(), k.ttl))
			return
		}
		rctx, cancel := context.WithDeadline(ctx, deadline)
		err := k.lock.Refresh(rctx, k.ttl)
		cancel()
		if ctx.Err() != nil {
			return // released meanwhile: the outcome does not matter
		}
		switch {
		case err == nil:
			deadline = sent.Add(k.ttl - k.ttl/lossMargin)
			next = sent.Add(interval)
		case errors.Is(err, fencedlock.ErrLockLost):
			k.lose(err)
			return
		case !time.Now().Before(deadline):
			k.lose(fmt.Errorf("%w: %q (token %d): no refresh succeeded within the TTL of %v: %w", fencedlock.ErrLockLost, k.lock.Resource(), k.lock.Token(), k.ttl, err))
			return
		default:
			next = time.Now().Add(retry)
		}
		if next.After(deadline) {
			next = deadline
		}
		timer.Reset(time.Until(next))
	}
}

// lose records why the lock was lost and closes lost.
func (k *keeper) lose(err error) {
	k.mu.Lock()
	k.err = err
	k.mu.Unlock()
	close(k.lost)
}

// Err returns why the lock was lost, or nil while it is held.
func (k *keeper) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.err
}

// release stops the refreshes, then releases the lock within ctx. After a
// loss it returns the loss; its Release then deletes the key only if it
// is still this Lock's (a refresh that got no answer may have kept it:
// see Lock.Release).
func (k *keeper) release(ctx context.Context) error {
	k.stop()
	<-k.stopped
	err := k.lock.Release(ctx)
	if lost := k.Err(); lost != nil {
		return lost
	}
	return err
}
