// Package wait is the waiting room of a Locker: the goroutines waiting
// for locks, queued per resource in the process, the one of each queue
// that contends in Redis, its fallback timer, and the pub/sub connection
// that delivers the grants releases hand over. How it works, for users,
// is in https://github.com/fencedlock/fencedlock/blob/main/docs/waiting.md.
//
// Three words name three things here: an attempt Redis refused
// (refused: the lock is held, or promised to a waiter ahead); a waiter
// that gave up (its ctx ended, or an error ended its wait); and an
// attempt whose answer was lost (unanswered: it may have run in Redis).
package wait

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Room holds the waiters of one Locker. Make it with New. It is safe for
// concurrent use.
type Room struct {
	client redis.UniversalClient
	log    Log
	warned atomic.Bool // the Warn that Redis refused pub/sub was logged

	mu          sync.Mutex             // guards the fields below, and those of the queues and subscribers
	queues      map[string]*queue      // waiters by resource
	subs        map[uint16]*subscriber // subscriptions by group (see Room.subscribe)
	pubsub      kind                   // learnt by probe
	pubsubAsked time.Time              // when pubsub was learnt
}

// Log is where a Room reports what no caller hears of. Either func may be
// nil.
type Log struct {
	// Warn logs once per Room that Redis refused pub/sub.
	Warn func(msg string, attrs ...any)
	// Debug logs a subscription connection replaced.
	Debug func(msg string, attrs ...any)
}

// New returns the empty Room of a Locker on client.
func New(client redis.UniversalClient, log Log) *Room {
	return &Room{client: client, log: log}
}

// Linger is how long a resource's channel stays subscribed after its last
// waiter left, so that waiting for it again soon costs no new
// subscription. Tests shorten it before they start Lockers.
var Linger = time.Second

// FirstRefused reports whether the first waiter for resource has heard
// the answer to a refused attempt, for tests.
func (r *Room) FirstRefused(resource string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.queues[resource]
	return q != nil && len(q.waiters) > 0 && q.waiters[0].floor != 0
}

// FirstSubscribed returns the owner of the first waiter for resource,
// and whether its queue is subscribed, for tests.
func (r *Room) FirstSubscribed(resource string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.queues[resource]
	if q == nil || len(q.waiters) == 0 {
		return "", false
	}
	return q.waiters[0].owner, q.sub != nil
}

// PubSubRefused logs, once per Room, that Redis refused what (a publish,
// the probe or a subscription) to the Locker's user, with err when there
// is one: waiters then learn of hand-overs by their timers, late by up to
// their retry delay.
func (r *Room) PubSubRefused(what string, err error, aclDocs string) {
	if r.log.Warn == nil || !r.warned.CompareAndSwap(false, true) {
		return
	}
	attrs := []any{"refused", what, "acl", aclDocs}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	r.log.Warn("fencedlock: Redis refused pub/sub to this user: waiters fall back to their timers (see the ACL section)", attrs...)
}

func (r *Room) debug(msg string, attrs ...any) {
	if r.log.Debug != nil {
		r.log.Debug(msg, attrs...)
	}
}

// Deliver delivers a grant that a release handed to owner with token on
// resource, when owner is the first waiter of its queue: the release's
// reply (when this Locker released) or its published message carried it.
func (r *Room) Deliver(resource, owner string, token uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.queues[resource]
	if q == nil || len(q.waiters) == 0 {
		return
	}
	w := q.waiters[0]
	if w.granted != 0 || w.owner != owner {
		return
	}
	if !w.late(token) {
		w.granted = token
	}
	// A late grant still wakes the waiter: its next attempt finds out
	// whether the grant is still its own.
	w.nudge()
}

// pending returns ready if it is still open, else nil.
func pending(ready chan struct{}) <-chan struct{} {
	select {
	case <-ready:
		return nil
	default:
		return ready
	}
}
