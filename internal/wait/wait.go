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
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencedlock/fencedlock/internal/call"
	"github.com/redis/go-redis/v9"
)

// minPlaceLife is the shortest life of a waiter's place in the Redis
// queue, so that a waiter with a tiny TTL does not renew it in a tight
// loop.
const minPlaceLife = 100 * time.Millisecond

// Answer is what Redis answered one acquire attempt: a grant, or a
// refusal.
type Answer struct {
	Granted bool
	Token   uint64 // granted: the grant's token
	// Wait is, for a refusal, how long until the lock may be free: the
	// holder's PTTL, or the remaining life of the waiter ahead; negative
	// for a lock key without expiry.
	Wait time.Duration
	// Floor is, for a refusal, the token counter before the attempt ran:
	// every grant made before has a token at or below it; 0 when unknown.
	Floor uint64
}

// Contender is what a Room needs of the lock a waiter waits for: its
// attempts in Redis, what their errors mean, and how its wait ends.
type Contender interface {
	// Attempt runs one acquire attempt, whose place in the Redis queue
	// lasts life if refused.
	Attempt(ctx context.Context, life time.Duration) (Answer, error)
	// NotNow reports whether err, an attempt's error, means "not now":
	// the wait goes on.
	NotNow(err error) bool
	// Stopped returns the error of a wait whose ctx ended before its
	// attempt was answered; heard says that Redis refused an attempt of
	// the queue (the lock is held).
	Stopped(ctx context.Context, heard bool) error
	// GiveUp ends the wait's attempts in Redis: when place > 0 (the life
	// of its place in the Redis queue) it leaves the queue, passing on a
	// lock handed to it meanwhile; when lost says that an attempt went
	// unanswered, it releases what that attempt may have been granted,
	// and refuses a copy of it still on its way; lastLost says that the
	// last attempt was one. It returns err, the error the wait ends with,
	// telling how that went.
	GiveUp(ctx context.Context, place time.Duration, lost, lastLost bool, err error) error
	// Refused is told that the wait waits: of its first refused attempt,
	// of its queueing behind another waiter of the Room, and of being
	// held back while a Lock of its Locker holds the lock (so it may be
	// told more than once).
	Refused(ctx context.Context)
}

// Delays are the bounds of a waiter's fallback timer: see Wait.
type Delays struct {
	Min, Max time.Duration
}

// Place returns how long a waiter's place in the Redis queue lasts
// without another attempt, and how often the waiter renews it (its
// fallback timer), for a lock of ttl: it renews at a third of the TTL,
// at least a third of minPlaceLife, kept between the bounds of d, and the
// place lasts three renewals, at least minPlaceLife. So a slow retry
// delay never lets the place lapse, and a waiter whose process died
// keeps its place for three renewals.
func (d Delays) Place(ttl time.Duration) (life, renew time.Duration) {
	renew = min(max(max(ttl, minPlaceLife)/3, d.Min), d.Max)
	return max(3*renew, minPlaceLife), renew
}

// Request is one Wait: the lock's resource, the channel its releases
// publish on, its owner nonce (with its ':'), the TTL it asks for, and
// the bounds of its fallback timer.
type Request struct {
	Resource, Channel, Owner string
	TTL                      time.Duration
	Delays                   Delays
	// Slot, when not nil, is where the wait keeps its waiter, so that it
	// allocates none (its wake channel it still makes): the caller's, for
	// this one Wait alone. Nil: the wait allocates its own.
	Slot *Slot
}

// Slot holds the state of one Wait (see Request.Slot), for a caller
// that embeds it in what it allocates anyway. The zero Slot is ready
// for use; it must not be used for a second Wait.
type Slot struct{ w waiter }

// Wait waits for the lock of req, first come first served behind the
// Room's other waiters for the resource, until c's attempt is granted, a
// release hands it over, or ctx ends. Only the first waiter of the
// resource contends in Redis; the others wait for their turn. It returns
// the token of the grant and the local time the grant is measured from:
// before the attempt was sent, or, for a hand-over, before the refused
// attempt that it followed.
//
// An error that means "not now" (c.NotNow) does not end the wait: it
// tries again after a pause that doubles from the delays' minimum to
// their maximum, and as soon as its subscription comes back with Redis.
// Any other error ends it, as does ctx; c.GiveUp then cleans up.
func (r *Room) Wait(ctx context.Context, req Request, c Contender) (uint64, time.Time, error) {
	life, _ := req.Delays.Place(req.TTL)
	var w *waiter
	if req.Slot != nil {
		w = &req.Slot.w
	} else {
		w = new(waiter)
	}
	*w = waiter{owner: req.Owner, ttl: req.TTL, life: life, wake: make(chan struct{}, 1)}
	q, first := r.join(req.Resource, req.Channel, w)
	if !first {
		c.Refused(ctx)
		select {
		case <-ctx.Done():
			// It may have become the first meanwhile, and a release of
			// this Locker given it the lock or its place in the Redis
			// queue: quit passes those on, as it does for the first.
			var st state
			return 0, time.Time{}, r.quit(ctx, q, w, life, &st, c)
		case <-w.wake:
		}
	}
	token, base, err := r.contend(ctx, q, w, req, c)
	r.leave(q, w, err == nil)
	return token, base, err
}

// state is what the attempts of one waiter have learnt.
type state struct {
	refused    time.Time // when the last refused attempt was sent; zero before one
	lastErr    error     // the last attempt's error, while the wait rides it out
	unanswered bool      // the last attempt got no answer: it may have been granted
	lost       bool      // some attempt got no answer: a copy may still reach Redis
}

// answered reports whether an attempt of the wait got an answer: a
// refusal, or an error that the wait rode out.
func (st *state) answered() bool { return !st.refused.IsZero() || st.lastErr != nil }

// note records the outcome of an attempt: err, or nil when Redis
// answered it; resends is the Room's (see call.Resends).
func (st *state) note(err error, resends bool) {
	st.lastErr = err
	st.unanswered = err != nil && call.Unanswered(err, resends)
	st.lost = st.lost || st.unanswered
}

// contend is Wait for the first waiter of q: it asks Redis until granted,
// woken by grants, confirmations and its fallback timer.
func (r *Room) contend(ctx context.Context, q *queue, w *waiter, req Request, c Contender) (uint64, time.Time, error) {
	life, renew := req.Delays.Place(req.TTL)
	var (
		st    state
		timer *time.Timer
		pause time.Duration // the pause after an error that means "not now"
		fired bool          // the timer ended the last pause
		// heard is the token of a grant heard of in a message that this
		// waiter could not yet vouch for: it came before the reply of the
		// release of this Locker that queued it was known.
		heard uint64
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if call.Ended(ctx) != nil {
			return 0, time.Time{}, r.quit(ctx, q, w, life, &st, c)
		}
		// A grant in the reply of this Locker's own release is measured
		// from before that release was sent. One handed over by another's
		// release came after the refused attempt ran (its token is above
		// the floor that attempt saw), so it lasts at least until
		// refused+ttl. One that came too late to be sure the lock is still
		// there is checked by the attempt below: its script returns the
		// grant, renewed, if it is still this waiter's.
		t, at := r.takeTurn(w)
		if hook := testHookTook.Load(); hook != nil {
			(*hook)(w)
		}
		if t != 0 && !at.IsZero() {
			return t, at, nil
		} else if t != 0 && time.Since(st.refused) < certainFor(req.TTL) {
			return t, st.refused, nil
		} else if t != 0 {
			heard = t
		}
		wait := renew
		var (
			a    Answer
			err  error
			sent = time.Now()
		)
		at, floor, do := r.next(q, w, &st, fired)
		switch do {
		case queued:
			// Queued by this Locker's release, as a refused attempt sent
			// at at would have queued it. A grant heard of before this
			// was known came after that release if its token is above
			// the one that release granted: it lasts until at+TTL at
			// least. Any other is checked by an attempt, at once.
			sent, a = at, Answer{Wait: -1, Floor: floor}
			if heard > floor && time.Since(at) < certainFor(req.TTL) {
				return heard, at, nil
			}
			if heard != 0 {
				wait = 0
			}
			heard = 0
		case hold:
			if !at.IsZero() {
				wait = min(wait, time.Until(at)+time.Millisecond)
			}
		case attempt:
			a, err = c.Attempt(ctx, life)
			r.attempted(w, err == nil && a.Granted)
			heard = 0 // the attempt found out whether it was still this waiter's
		}
		switch {
		case do == hold:
			if st.refused.IsZero() {
				c.Refused(ctx) // held back: the wait waits, as if refused
			}
		case err != nil && call.Ended(ctx) != nil && st.answered():
			// Cut short by ctx: what Redis last answered stands, and
			// the attempt may yet run.
			st.lost = st.lost || call.Unanswered(err, r.resends)
			return 0, time.Time{}, r.quit(ctx, q, w, life, &st, c)
		case err != nil && (call.Ended(ctx) != nil || !c.NotNow(err)):
			st.note(err, r.resends)
			return 0, time.Time{}, giveUp(ctx, life, &st, err, c)
		case err != nil:
			// Not now: try again after a pause, listening for the
			// subscription that comes back with Redis.
			st.note(err, r.resends)
			pause = min(max(2*pause, req.Delays.Min), req.Delays.Max)
			wait = pause
		case a.Granted:
			return a.Token, sent, nil
		default:
			if st.refused.IsZero() {
				c.Refused(ctx)
			}
			st.note(nil, r.resends)
			st.refused, pause = sent, 0
			r.refused(q, w, a.Floor)
			if a.Wait >= 0 {
				// PTTL counts whole milliseconds left, rounded down: 0 is
				// the last one. A negative PTTL is a key without expiry.
				wait = min(wait, a.Wait+time.Millisecond)
			}
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		// Until the subscription is confirmed, a release could go unheard:
		// look again once it is.
		var ready <-chan struct{}
		if !st.refused.IsZero() {
			ready = r.subscribe(ctx, q)
		}
		fired = false
		select {
		case <-ctx.Done():
		case <-w.wake:
		case <-ready:
		case <-timer.C:
			fired = true
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// testHookTook, when set, runs in each turn of a contending waiter's loop
// right after it took its grant, if any, for tests.
var testHookTook atomic.Pointer[func(*waiter)]

// certainFor is how long a grant for ttl, measured from before it was
// sent, is certain to hold the lock: all but a twentieth of ttl (the
// Lock's rule, see the root package's lease).
func certainFor(ttl time.Duration) time.Duration { return ttl - ttl/20 }

// quit ends the wait of w, which gave up when its ctx ended: out of the
// local queue, and out of the Redis queue if it was queued there, passing
// on a lock handed to it meanwhile, and releasing what an unanswered
// attempt may have been granted. Its error says what Redis last said:
// the lock is held, it was failing (with its error), or nothing yet.
func (r *Room) quit(ctx context.Context, q *queue, w *waiter, life time.Duration, st *state, c Contender) error {
	err := st.lastErr
	if err == nil {
		err = c.Stopped(ctx, r.heard(q))
	}
	r.leave(q, w, false)
	// What a release of this Locker told w before it left is for w to
	// undo: the release undoes what it tells w after.
	t, at := r.takeGrant(w)
	queuedAt, unsure := r.takeLeft(w)
	st.lost = st.lost || unsure
	for _, at := range [...]time.Time{at, queuedAt} {
		if st.refused.IsZero() && !at.IsZero() {
			st.refused = at
		}
	}
	if st.refused.IsZero() && !st.lost && t == 0 {
		return withCtx(ctx, err)
	}
	return withCtx(ctx, c.GiveUp(ctx, place(life, st), st.lost, st.unanswered, err))
}

// giveUp ends the wait after an attempt that failed for good (or whose
// ctx ended meanwhile), with that attempt's error err.
func giveUp(ctx context.Context, life time.Duration, st *state, err error, c Contender) error {
	if !st.refused.IsZero() || st.lost {
		err = c.GiveUp(ctx, place(life, st), st.lost, st.unanswered, err)
	}
	return withCtx(ctx, err)
}

// place returns the life of the waiter's place in the Redis queue when
// it may be queued there (by a refusal, or by an attempt whose answer
// never came), else 0.
func place(life time.Duration, st *state) time.Duration {
	if !st.refused.IsZero() || st.lost {
		return life
	}
	return 0
}

// withCtx is the error of a wait that failed: when ctx ended, it wraps
// ctx's error (and its cause) too.
func withCtx(ctx context.Context, err error) error {
	cerr := call.Err(ctx)
	if cerr == nil || errors.Is(err, call.Ended(ctx)) && errors.Is(err, context.Cause(ctx)) {
		return err
	}
	return fmt.Errorf("%w: %w", err, cerr)
}

// Room holds the waiters of one Locker. Make it with New. It is safe for
// concurrent use.
type Room struct {
	client redis.UniversalClient
	heeds  bool // client ends round trips at ctx deadlines: see call.Heeds
	// resends is that the client may send a command again after its
	// connection failed: see call.Resends
	resends bool
	// replicas is that client may subscribe on a replica (see
	// call.ReadsReplicas), where a primary's SPUBLISH does not count
	// the subscribers it reaches
	replicas bool
	log      Log
	warned   atomic.Bool  // the Warn that Redis refused pub/sub was logged
	learnt   atomic.Int32 // pubsub, for reading without mu

	mu          sync.Mutex             // guards the fields below, and those of the queues and subscribers
	queues      map[string]*queue      // waiters by resource
	holding     map[string]*holding    // what Locks of this Locker hold (see Room.Hold)
	sweepAt     int                    // the size of holding at which Hold next drops the resources no Lock holds
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
	return &Room{client: client, heeds: call.Heeds(client), resends: call.Resends(client), replicas: call.ReadsReplicas(client), log: log}
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

// FirstHeldBack reports whether the first waiter for resource waits,
// without an attempt in Redis, for the release of a Lock of this Locker,
// for tests.
func (r *Room) FirstHeldBack(resource string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.first(resource)
	return w != nil && !w.attempt && w.floor == 0 && !r.heldUntil(resource).IsZero() && r.queues[resource].heard
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
// resource, when owner is the first waiter of its queue. at is zero for a
// grant heard of in a message, which may be late (see waiter.late); for
// one in the reply of this Locker's own release, the time before that
// release was sent: the grant is certain, and measured from then.
func (r *Room) Deliver(resource, owner string, token uint64, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.first(resource)
	if w == nil || w.owner != owner || w.granted != 0 {
		return
	}
	if at.IsZero() && w.promised && w.floor == 0 {
		// Only the release this waiter is promised to can have queued
		// it: the grant is for that place, made by a release that came
		// after it. Queued decides once the floor is known.
		w.early = token
		return
	}
	if !at.IsZero() || !w.late(token) {
		w.granted, w.grantedAt = token, at
	}
	// A late grant still wakes the waiter: its next attempt finds out
	// whether the grant is still its own.
	w.nudge()
}

// Candidate is the first waiter of a Locker for a resource, promised to
// a release of that Locker's Lock on the resource, which may hand it the
// lock or queue it in Redis. A promised waiter makes no attempt of its
// own until the release tells it the outcome, with exactly one of
// Granted, Queued, Unused or Unsure. Its Owner is "" when there is none.
type Candidate struct {
	Owner string        // its owner nonce, with its ':'
	TTL   time.Duration // the TTL it asks for
	Life  time.Duration // the life of its place in the Redis queue, should it be queued
	w     *waiter
}

// Candidate promises the first waiter for resource to a release, unless
// it has none, or its first waiter is sending an attempt or has a grant
// or a place it has not taken up yet.
func (r *Room) Candidate(resource string) Candidate {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.first(resource)
	if w == nil || w.promised || w.attempt || w.granted != 0 || !w.queuedAt.IsZero() {
		return Candidate{}
	}
	w.promised = true
	r.queues[resource].heard = true // the lock is held: by the releasing Lock
	return Candidate{Owner: w.owner, TTL: w.ttl, Life: w.life, w: w}
}

// Granted tells c that the release, sent at at, granted it the lock with
// token. It reports whether c still waits: when not, the caller releases
// that lock.
func (r *Room) Granted(c Candidate, token uint64, at time.Time) bool {
	return r.resolve(c, func(w *waiter) { w.granted, w.grantedAt = token, at })
}

// Queued tells c that the release, sent at at, put it at the back of the
// Redis queue, as a refused attempt sent then would have, after granting
// the lock to another with token floor. It reports whether c still waits:
// when not, the caller takes its place out of the queue.
func (r *Room) Queued(c Candidate, floor uint64, at time.Time) bool {
	return r.resolve(c, func(w *waiter) {
		w.queuedAt, w.floor = at, floor
		if w.early > floor && w.granted == 0 {
			// Heard of before this outcome: a grant for the place this
			// release gave it, which came after at.
			w.granted, w.grantedAt = w.early, at
		}
	})
}

// Unsure tells c that the release may or may not have granted it the
// lock or queued it (its reply was lost). It reports whether c still
// waits: when not, the caller releases what c may have been granted and
// takes its place out of the queue.
func (r *Room) Unsure(c Candidate) bool {
	return r.resolve(c, func(w *waiter) { w.unsure = true })
}

// Unused tells c that the release neither granted it the lock nor queued
// it.
func (r *Room) Unused(c Candidate) {
	r.resolve(c, func(*waiter) {})
}

// resolve applies the outcome of a release to its candidate c, unless it
// left meanwhile, and reports whether it still waits.
func (r *Room) resolve(c Candidate, apply func(*waiter)) bool {
	if c.w == nil {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	w := c.w
	w.promised = false
	defer func() { w.early = 0 }()
	if w.gone {
		return w.won
	}
	apply(w)
	w.nudge()
	return true
}

// Hold records that a Lock of this Locker, whose owner nonce is owner,
// holds resource, until at most until by the local clock; Hold again sets
// that end anew (a refresh, for a longer or a shorter TTL): each Lock
// calls it in order, with its latest lease. While one holds it, the first
// waiter for resource makes no attempt in Redis, where it would be
// refused, and the Lock's release hands it the lock, or queues it. Unhold
// records that the Lock no longer holds it for sure; a Lock that never
// ends (nobody released it) is forgotten once its own until passes,
// whatever other Locks of the resource do.
func (r *Room) Hold(resource, owner string, until time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.holding == nil {
		r.holding = make(map[string]*holding)
	}
	now := time.Now()
	if len(r.holding) >= r.sweepAt {
		for res, h := range r.holding {
			if h.prune(now).IsZero() {
				delete(r.holding, res)
			}
		}
		r.sweepAt = max(minSweep, 2*len(r.holding))
	}
	h := r.holding[resource]
	if h == nil {
		h = &holding{}
		h.locks = h.one[:0]
		r.holding[resource] = h
	}
	h.prune(now)
	if i := h.find(owner); i >= 0 {
		sooner := until.Before(h.locks[i].until)
		h.locks[i].until = until
		if w := r.first(resource); sooner && w != nil && w.heldBack {
			w.nudge() // it looks again at the nearer end
		}
		return
	}
	h.locks = append(h.locks, heldBy{owner: owner, until: until})
}

// minSweep is the fewest resources Room.holding holds before Hold drops
// those no Lock holds any longer: released, or never released and run
// out.
const minSweep = 64

// holding is what a Room knows of the Locks of its Locker that hold a
// resource.
type holding struct {
	locks []heldBy  // each until it runs out, unless refreshed
	one   [1]heldBy // the backing of locks while it holds one
}

// heldBy is one Lock that holds a resource: its owner nonce, and when it
// runs out unless refreshed.
type heldBy struct {
	owner string
	until time.Time
}

// prune drops the Locks of h that have run out by now, and returns when
// the last of the others runs out; zero when none is left.
func (h *holding) prune(now time.Time) time.Time {
	var last time.Time
	kept := h.locks[:0]
	for _, l := range h.locks {
		if now.Before(l.until) {
			kept = append(kept, l)
			if l.until.After(last) {
				last = l.until
			}
		}
	}
	clear(h.locks[len(kept):])
	h.locks = kept
	return last
}

// find returns the index of owner's Lock in h, or -1.
func (h *holding) find(owner string) int {
	for i, l := range h.locks {
		if l.owner == owner {
			return i
		}
	}
	return -1
}

// Unhold records that owner's Lock no longer holds resource for sure (it
// ended, or a call's outcome is unknown); nothing, if Hold did not count
// it. When none holds the resource any longer, the first waiter, if it
// was held back, asks Redis again.
func (r *Room) Unhold(resource, owner string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, ok := r.holding[resource]
	if !ok {
		return
	}
	if i := h.find(owner); i >= 0 {
		last := len(h.locks) - 1
		h.locks[i], h.locks[last] = h.locks[last], heldBy{}
		h.locks = h.locks[:last]
	}
	if !h.prune(time.Now()).IsZero() {
		return
	}
	// h stays, empty, for the resource's next Lock, until Hold sweeps.
	// Only a waiter held back asks Redis again: one that has a place
	// there already (the release queued it) would only poll.
	if w := r.first(resource); w != nil && w.heldBack {
		w.nudge()
	}
}

// heldUntil returns when the Locks of this Locker that hold resource run
// out, unless refreshed; zero when none holds it. The Room's mu is held.
func (r *Room) heldUntil(resource string) time.Time {
	h, ok := r.holding[resource]
	if !ok {
		return time.Time{}
	}
	return h.prune(time.Now())
}

// first returns the first waiter for resource, or nil. The Room's mu is
// held.
func (r *Room) first(resource string) *waiter {
	q := r.queues[resource]
	if q == nil || len(q.waiters) == 0 {
		return nil
	}
	return q.waiters[0]
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

// waiter is a goroutine waiting in Wait. Its fields past wake are guarded
// by the Room's mu.
type waiter struct {
	owner string        // the owner nonce of its lock, with its ':'
	ttl   time.Duration // the TTL it asks for
	life  time.Duration // the life of its place in the Redis queue
	wake  chan struct{} // a nudge: first in the queue now, or look again
	// Guarded by the Room's mu:
	granted   uint64    // nonzero once a release handed it the lock with this token
	grantedAt time.Time // for a grant in this Locker's own release's reply: before that release was sent
	floor     uint64    // every grant made before its last refused attempt has a token at or below it
	queuedAt  time.Time // nonzero once this Locker's release queued it: before that release was sent
	unsure    bool      // this Locker's release may have granted or queued it: its reply was lost
	promised  bool      // a release of this Locker was given it as its candidate (see Room.Candidate)
	early     uint64    // a grant heard of while promised, before the release's outcome was known
	heldBack  bool      // its last step was to wait while a Lock of its Locker holds the lock
	attempt   bool      // it is sending an attempt
	gone      bool      // it left its queue
	won       bool      // it left with the lock
}

// queue holds a Room's waiters for one resource, first come first
// served. Only the first contends in Redis. Its fields are guarded by the
// Room's mu.
type queue struct {
	resource string
	channel  string // where releases that hand the lock on publish
	waiters  []*waiter
	one      [1]*waiter    // waiters' first backing array: most queues never hold two
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
		q.waiters = q.one[:0]
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
// was first; won says that w leaves with the lock. A queue left empty is
// dropped, after Linger if it is subscribed.
func (r *Room) leave(q *queue, w *waiter, won bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !w.gone {
		w.gone, w.won = true, won
	}
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

// What a waiter does next (see Room.next).
type step int

const (
	attempt step = iota // send an attempt
	queued              // take up the place in the Redis queue a release of this Locker gave it
	hold                // wait: its Locker holds the lock, or a release of it is deciding its fate
)

// next decides what w, the first waiter of q, does next, given what its
// attempts learnt (st) and whether its timer ended its last pause
// (fired). queued comes with the time and the floor of the release that
// queued it; hold with when to look again at the latest (zero: at its
// usual renewal).
func (r *Room) next(q *queue, w *waiter, st *state, fired bool) (time.Time, uint64, step) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w.unsure {
		// A release of this Locker may have granted it the lock: as
		// after an attempt whose answer was lost, its next attempt
		// finds out, and should it give up, it releases what it may
		// hold.
		w.unsure, st.lost = false, true
	}
	w.heldBack = false
	if !w.queuedAt.IsZero() {
		at := w.queuedAt
		w.queuedAt = time.Time{}
		return at, w.floor, queued
	}
	if w.promised {
		return time.Time{}, 0, hold
	}
	if st.refused.IsZero() && !st.lost && !fired {
		// While a Lock of this Locker holds the resource, a waiter not
		// queued in Redis sends no attempt, which Redis would refuse:
		// that Lock's release hands it the lock, or queues it. Its timer
		// tries all the same (once the lock has run out, unless
		// refreshed, at the latest), should that Lock never be released,
		// or be gone from Redis unknown to it.
		if until := r.heldUntil(q.resource); !until.IsZero() {
			q.heard, w.heldBack = true, true
			return until, 0, hold
		}
	}
	w.attempt = true
	return time.Time{}, 0, attempt
}

// attempted records the end of w's attempt; granted says that it was
// granted, and w leaves with the lock.
func (r *Room) attempted(w *waiter, granted bool) {
	if granted {
		return // w stays out of Room.Candidate's reach until it leaves
	}
	r.mu.Lock()
	w.attempt = false
	r.mu.Unlock()
}

// takeGrant returns the token of the grant a release handed w, or 0, and
// forgets it; at is the time a grant in this Locker's own release's reply
// is measured from (zero for one heard of in a message). A late grant
// (see waiter.late) is not returned: its message came after the grant had
// ended.
func (r *Room) takeGrant(w *waiter) (token uint64, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.takeGrantLocked(w)
}

// takeTurn starts a turn of the loop of w, the contending waiter: it
// drains w's wake and takes its grant (see takeGrant) in one step, under
// the Room's mu, as every nudge is sent. So a nudge pending after it is
// news this turn has not seen, and wakes the next; and none is lost, as
// one drained after the grant was taken would be (its grant would wait
// for the waiter's renewal).
func (r *Room) takeTurn(w *waiter) (token uint64, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-w.wake:
	default:
	}
	return r.takeGrantLocked(w)
}

// takeGrantLocked is takeGrant with the Room's mu held.
func (r *Room) takeGrantLocked(w *waiter) (token uint64, at time.Time) {
	t, at := w.granted, w.grantedAt
	w.granted, w.grantedAt = 0, time.Time{}
	if at.IsZero() && w.late(t) {
		return 0, time.Time{}
	}
	return t, at
}

// takeLeft returns what a release of this Locker told w, which left its
// queue, and it had not taken up: when it queued it (zero if it did not),
// and whether it may have granted or queued it.
func (r *Room) takeLeft(w *waiter) (queuedAt time.Time, unsure bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	queuedAt, unsure = w.queuedAt, w.unsure
	w.queuedAt, w.unsure = time.Time{}, false
	return queuedAt, unsure
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
