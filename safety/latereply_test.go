package safety

import (
	"context"
	"sync"
	"time"

	"github.com/fencedlock/fencedlock/internal/redistest"
)

// The late-reply fault needs the clients' help: a Release or a Refresh
// whose reply is delayed past its ctx, on a Locker that has a waiter of
// its own, then the same call again. The nemesis arms it on one
// in-process Locker (lockerState.arm), one of that Locker's goroutines
// runs it as its next cycle (worker.lateReplyCycle), and reports what
// happened. The cycle is the sequence of the bug it is for (a Locker
// handing the lock to its own waiter on a local belief, before Redis
// answered):
//
//  1. L acquires R with a TTL long enough for its lease to stay certain by
//     the local clock through the whole cycle (lateReplyTTL).
//  2. A waiter of the other Locker (its helper) waits in Acquire(R), queued
//     in Redis: "another process's waiter".
//  3. L's replies are delayed (DelayReplies) by 150-300ms, and L calls
//     Release (or Refresh) with a 50ms ctx: Redis runs it (and hands R to
//     the other Locker's waiter), L gets a timeout, the Lock does not end.
//  4. A waiter of L's own (L's helper) waits in Acquire(R): refused, it is
//     queued behind, first in the Redis queue once the other waiter holds
//     R, with a token reserved.
//  5. L calls Release (or Refresh, then the normal flow: write, Release)
//     again while replies are still delayed.
//
// A library that hands the lock to its own waiter before the Release's
// reply returns a Lock to L's helper while the other waiter holds R in
// Redis: checker D finds a lower token in the key.

// lateReplyResource is the resource of half the late-reply cycles: no
// other client uses it, so that the other Locker's waiter is the one
// the short Release hands the lock to, and L's own waiter is first in the
// Redis queue after it, as in the bug's sequence. The other half take a
// resource of the workload, among the other clients' waiters.
const lateReplyResource = "r-late"

// Bounds of the late-reply fault.
const (
	lateReplyTTL      = 1500 * time.Millisecond // the cycle's locks: certain by the local clock for the whole cycle
	lateReplyDelayMin = 150 * time.Millisecond  // the reply delay: well above shortCallFor
	lateReplyDelayMax = 300 * time.Millisecond
	shortCallFor      = 50 * time.Millisecond  // the ctx of the call whose reply is late
	peerQueueFor      = 50 * time.Millisecond  // for the other Locker's waiter to queue in Redis (its network is not slowed)
	helperQueueFor    = 100 * time.Millisecond // after the delay: for L's waiter's refusal to come back
	peerHold          = 800 * time.Millisecond // the other Locker's waiter holds R this long before writing
	lateReplyWait     = 8 * time.Second        // the nemesis waits this long for the cycle
)

// The late-reply fault's two forms.
const (
	lateRelease = "release"
	lateRefresh = "refresh"
)

// helperIDBase + the Locker's index is the client id of its helper.
const helperIDBase = 100

// A lateReplyOrder is one late-reply fault, armed by the nemesis.
type lateReplyOrder struct {
	call     string        // lateRelease or lateRefresh
	resource string        // lateReplyResource, or "": one of the workload's at random
	delay    time.Duration // of the replies
	peer     bool          // the other Locker's waiter queues first
	done     chan lateReplyResult
}

// lateReplyResult is what the cycle did.
type lateReplyResult struct {
	Start, End int64 // wall clock, as op.Call
	Dedicated  bool  // on lateReplyResource
	// Late: the short call timed out and the Lock did not end; Again:
	// the call was made again. The fault did its job when both hold.
	Late, Again bool
	// Local: L's own waiter was waiting in Acquire when the call was made
	// again; Peer: the other Locker's waiter was queued.
	Local, Peer bool
}

// A lockerState is what the goroutines of one in-process Locker share for
// the late-reply fault: its network, the resources its goroutines wait
// for, the armed order, and a helper goroutine that waits for a resource
// on demand. Its methods are safe for concurrent use, and do nothing on a
// nil lockerState (child processes).
type lockerState struct {
	proxy  *redistest.Proxy // this Locker's network to Redis
	helper *worker          // runs one helperCycle at a time
	peer   *lockerState     // the other Locker
	wg     *sync.WaitGroup  // the scenario's clients
	ids    []int            // the client ids of its goroutines and helper

	mu         sync.Mutex
	waiting    map[string]int  // guarded by mu: goroutines in Acquire, by resource
	order      *lateReplyOrder // guarded by mu: armed, not taken yet
	helperBusy bool            // guarded by mu
}

func (ls *lockerState) enter(res string) {
	if ls == nil {
		return
	}
	ls.mu.Lock()
	ls.waiting[res]++
	ls.mu.Unlock()
}

func (ls *lockerState) leave(res string) {
	if ls == nil {
		return
	}
	ls.mu.Lock()
	ls.waiting[res]--
	ls.mu.Unlock()
}

// waitingFor returns how many goroutines of the Locker wait in Acquire
// for res.
func (ls *lockerState) waitingFor(res string) int {
	if ls == nil {
		return 0
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.waiting[res]
}

func (ls *lockerState) clients() []int { return append([]int(nil), ls.ids...) }

// arm sets the order for the next cycle of one of the Locker's goroutines.
func (ls *lockerState) arm(o *lateReplyOrder) {
	ls.mu.Lock()
	ls.order = o
	ls.mu.Unlock()
}

// disarm withdraws the order; it reports false if a goroutine took it.
func (ls *lockerState) disarm(o *lateReplyOrder) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.order != o {
		return false
	}
	ls.order = nil
	return true
}

// take returns the armed order, if any, and unarms it.
func (ls *lockerState) take() *lateReplyOrder {
	if ls == nil {
		return nil
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	o := ls.order
	ls.order = nil
	return o
}

// startHelper makes the helper run one cycle on res with ttl, holding the
// lock for hold before writing, unless it is busy; it reports whether it
// started.
func (ls *lockerState) startHelper(ctx context.Context, res string, ttl, hold time.Duration) bool {
	ls.mu.Lock()
	if ls.helperBusy {
		ls.mu.Unlock()
		return false
	}
	ls.helperBusy = true
	ls.mu.Unlock()
	ls.wg.Add(1) // the caller, a client, is counted: Wait has not returned
	go func() {
		defer ls.wg.Done()
		ls.helper.helperCycle(ctx, res, ttl, hold)
		ls.mu.Lock()
		ls.helperBusy = false
		ls.mu.Unlock()
	}()
	return true
}

// helperCycle waits in Acquire for res, and with the lock reads, holds it
// for hold, writes and releases.
func (w *worker) helperCycle(ctx context.Context, res string, ttl, hold time.Duration) {
	lock := w.acquireWait(ctx, res, ttl, false)
	if lock == nil {
		return
	}
	w.get(ctx, res)
	w.sleep(ctx, time.Millisecond+hold)
	w.put(ctx, res, lock.Token(), false)
	w.release(ctx, lock, releaseFor, false)
}

// lateReplyCycle runs the late-reply fault's sequence (see above) and
// reports what it did on order.done.
func (w *worker) lateReplyCycle(ctx context.Context, order *lateReplyOrder) {
	ls := w.local
	res := lateReplyResult{Start: now(), Dedicated: order.resource != ""}
	defer func() {
		ls.proxy.DelayReplies(0)
		res.End = now()
		order.done <- res
	}()
	resource := order.resource
	if resource == "" {
		resource = w.spec.Resources[w.rng.Intn(len(w.spec.Resources))]
	}
	lock := w.acquire(ctx, resource, lateReplyTTL, false)
	if lock == nil {
		return
	}
	if order.peer && ls.peer.startHelper(ctx, resource, lateReplyTTL, peerHold) {
		res.Peer = true
		w.sleep(ctx, peerQueueFor)
	}
	w.get(ctx, resource)
	w.put(ctx, resource, lock.Token(), false)

	ls.proxy.DelayReplies(order.delay)
	var err error
	if order.call == lateRelease {
		err = w.release(ctx, lock, shortCallFor, true)
	} else {
		err = w.refresh(ctx, lock, lateReplyTTL, shortCallFor, true)
	}
	if err == nil || lock.Err() != nil {
		// The reply came in time, or the Lock ended: not this fault.
		ls.proxy.DelayReplies(0)
		if lock.Err() == nil {
			w.release(ctx, lock, releaseFor, false)
		}
		return
	}
	res.Late = true
	if ls.startHelper(ctx, resource, lateReplyTTL, 0) {
		// Its first attempt runs at once; its refusal comes back after
		// the delay.
		w.sleep(ctx, order.delay+helperQueueFor)
	}
	res.Local = ls.waitingFor(resource) > 0
	res.Again = true
	if order.call == lateRelease {
		w.release(ctx, lock, releaseFor, false)
		return
	}
	err = w.refresh(ctx, lock, lateReplyTTL, releaseFor, false)
	ls.proxy.DelayReplies(0)
	if err == nil {
		w.put(ctx, resource, lock.Token(), false)
	}
	w.release(ctx, lock, releaseFor, false)
}
