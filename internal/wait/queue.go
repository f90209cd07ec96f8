package wait

import "time"

// waiter is a goroutine waiting in Wait. Its fields past wake are guarded
// by the Room's mu.
type waiter struct {
	owner   string        // the owner nonce of its lock, with its ':'
	wake    chan struct{} // a nudge: first in the queue now, or look again
	granted uint64        // nonzero once a release handed it the lock with this token
	floor   uint64        // every grant made before its last refused attempt has a token at or below it
}

// queue holds a Room's waiters for one resource, first come first
// served. Only the first contends in Redis. Its fields are guarded by the
// Room's mu.
type queue struct {
	resource string
	channel  string // where releases that hand the lock on publish
	waiters  []*waiter
	sub      *subscriber   // nil until the first waiter is refused
	ready    chan struct{} // closed when the subscription to channel is confirmed
	idle     *time.Timer   // unsubscribes after the queue stays empty
	idleGen  uint64        // tells the idle timer of now from earlier ones
	heard    bool          // Redis has refused an attempt of this queue's waiters
}

// nudge wakes w unless a nudge is pending already.
func (w *waiter) nudge() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// late reports whether a grant with token t may have been made before w's
// last refused attempt ran (t is at or below its floor), so may have
// ended since. Without a floor (no refusal yet, or a counter the refusal
// could not read) every grant may be late: the waiter's next attempt
// tells, as its script returns a grant still held by it. The Room's mu
// is held.
func (w *waiter) late(t uint64) bool { return w.floor == 0 || t <= w.floor }

// join queues w for resource; it reports whether w is first.
func (r *Room) join(resource, channel string, w *waiter) (*queue, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.queues == nil {
		r.queues = make(map[string]*queue)
	}
	q := r.queues[resource]
	if q == nil {
		q = &queue{resource: resource, channel: channel}
		r.queues[resource] = q
	}
	if q.idle != nil {
		q.idle.Stop()
		q.idle = nil
	}
	q.waiters = append(q.waiters, w)
	return q, len(q.waiters) == 1
}

// leave takes w out of q, if it is there, and wakes the next waiter when w
// was first. A queue left empty is dropped, after Linger if it is
// subscribed.
func (r *Room) leave(q *queue, w *waiter) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, x := range q.waiters {
		if x != w {
			continue
		}
		copy(q.waiters[i:], q.waiters[i+1:])
		q.waiters[len(q.waiters)-1] = nil
		q.waiters = q.waiters[:len(q.waiters)-1]
		if i == 0 && len(q.waiters) > 0 {
			q.waiters[0].nudge()
		}
		break
	}
	if len(q.waiters) > 0 || q.idle != nil || r.queues[q.resource] != q {
		return
	}
	if q.sub == nil {
		delete(r.queues, q.resource)
		return
	}
	q.idleGen++
	gen := q.idleGen
	q.idle = time.AfterFunc(Linger, func() { r.unsubscribe(q, gen) })
}

// takeGrant returns the token of the grant a release handed w, or 0, and
// forgets it. A late grant (see waiter.late) is not returned: its message
// came after the grant had ended.
func (r *Room) takeGrant(w *waiter) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := w.granted
	w.granted = 0
	if w.late(t) {
		return 0
	}
	return t
}

// refused records what w's last refused attempt learned.
func (r *Room) refused(q *queue, w *waiter, floor uint64) {
	r.mu.Lock()
	w.floor = floor
	q.heard = true
	r.mu.Unlock()
}

// heard reports whether Redis has refused an attempt of q's waiters.
func (r *Room) heard(q *queue) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return q.heard
}
