package wait

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencedlock/fencedlock/internal/call"
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
	// Refused is told of the wait's first refused attempt.
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
}

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
	w := &waiter{owner: req.Owner, wake: make(chan struct{}, 1)}
	q, first := r.join(req.Resource, req.Channel, w)
	if !first {
		select {
		case <-ctx.Done():
			err := c.Stopped(ctx, r.heard(q))
			r.leave(q, w)
			return 0, time.Time{}, err
		case <-w.wake:
		}
	}
	token, base, err := r.contend(ctx, q, w, req, c)
	r.leave(q, w)
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
// answered it.
func (st *state) note(err error) {
	st.lastErr = err
	st.unanswered = err != nil && call.Unanswered(err)
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
		// A grant handed over by a release came after the refused attempt
		// ran (its token is above the floor that attempt saw), so it lasts
		// at least until refused+ttl. One that came too late to be sure
		// the lock is still there is checked by the attempt below: its
		// script returns the grant, renewed, if it is still this waiter's.
		if t := r.takeGrant(w); t != 0 && time.Since(st.refused) < certainFor(req.TTL) {
			return t, st.refused, nil
		}
		select {
		case <-w.wake:
		default:
		}
		sent := time.Now()
		a, err := c.Attempt(ctx, life)
		wait := renew
		switch {
		case err != nil && call.Ended(ctx) != nil && st.answered():
			// Cut short by ctx: what Redis last answered stands, and
			// the attempt may yet run.
			st.lost = st.lost || call.Unanswered(err)
			return 0, time.Time{}, r.quit(ctx, q, w, life, &st, c)
		case err != nil && (call.Ended(ctx) != nil || !c.NotNow(err)):
			st.note(err)
			return 0, time.Time{}, giveUp(ctx, life, &st, err, c)
		case err != nil:
			// Not now: try again after a pause, listening for the
			// subscription that comes back with Redis.
			st.note(err)
			pause = min(max(2*pause, req.Delays.Min), req.Delays.Max)
			wait = pause
		case a.Granted:
			return a.Token, sent, nil
		default:
			if st.refused.IsZero() {
				c.Refused(ctx)
			}
			st.note(nil)
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
		select {
		case <-ctx.Done():
		case <-w.wake:
		case <-ready:
		case <-timer.C:
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

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
	r.leave(q, w)
	if t := r.takeGrant(w); st.refused.IsZero() && !st.lost && t == 0 {
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
