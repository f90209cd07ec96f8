package fencedlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock/internal/names"
)

// AcquireOption configures one call of Acquire.
type AcquireOption func(*acquireConfig)

type acquireConfig struct {
	minDelay, maxDelay time.Duration
	heartbeat          time.Duration
	beat               bool
}

// Default bounds of the fallback wait of Acquire (see WithRetryDelay).
const (
	DefaultMinRetryDelay = 2 * time.Millisecond
	DefaultMaxRetryDelay = time.Second
)

// minQueueLife is the shortest life of a waiter's place in the Redis
// queue, so that a waiter with a tiny TTL does not renew it in a tight
// loop.
const minQueueLife = 100 * time.Millisecond

// WithRetryDelay bounds Acquire's fallback wait. A waiter is woken by the
// release that hands it the lock, not by a timer; the timer only covers a
// message lost with a broken connection, a holder that crashed, and the
// renewal of the waiter's place in the queue. It fires after a third of
// the waiter's TTL or of 100 ms, whichever is longer (the renewal of its
// place), kept between
// minDelay and maxDelay, or when the holder's TTL runs out, if that is
// sooner. Defaults:
// DefaultMinRetryDelay and DefaultMaxRetryDelay. A minDelay below 1ms is
// raised to 1ms and a maxDelay below minDelay is raised to minDelay.
func WithRetryDelay(minDelay, maxDelay time.Duration) AcquireOption {
	return func(c *acquireConfig) { c.minDelay, c.maxDelay = minDelay, maxDelay }
}

// Acquire locks resource for ttl, waiting while another owner holds it,
// until it gets the lock or ctx is done. On success Redis has granted the
// Lock, with a token higher than every token granted on resource before
// (unless Redis lost the counter and its clock is behind: see "What is
// promised"): a Lock is never returned on a local belief. Waiters are
// served first come, first served.
//
// When ctx ends while Redis last said that another owner holds the lock,
// the error wraps both ErrNotAcquired and ctx.Err(). When Redis cannot be
// reached, answers with an error, or does not answer the first attempt
// before ctx ends, the error wraps ErrUnavailable and the cause. Bad input
// returns an error wrapping ErrInvalidArgument at once. A waiter that
// gives up leaves the queue and passes on a lock handed to it meanwhile;
// once ctx has ended, that cleanup finishes in the background and the
// error says how far it got.
//
// With WithHeartbeat the Lock is refreshed until released or lost. With
// the Locker's WithReplicas a grant is returned only once replicas have
// confirmed it. How waiting works is in
// https://github.com/fencedlock/fencedlock/blob/main/docs/waiting.md.
func (l *Locker) Acquire(ctx context.Context, resource string, ttl time.Duration, opts ...AcquireOption) (*Lock, error) {
	if l == nil || !l.watched() {
		return l.acquire(ctx, resource, ttl, opts)
	}
	start := time.Now()
	ctx = l.emit(ctx, Event{Kind: EventAcquireStart, Resource: resource, TTL: ttl})
	lock, err := l.acquire(ctx, resource, ttl, opts)
	l.acquireEnd(ctx, start, resource, ttl, lock, err)
	return lock, err
}

func (l *Locker) acquire(ctx context.Context, resource string, ttl time.Duration, opts []AcquireOption) (*Lock, error) {
	if err := l.check(resource); err != nil {
		return nil, err
	}
	ms, err := ttlMillis(ttl)
	if err != nil {
		return nil, err
	}
	cfg := acquireConfig{minDelay: DefaultMinRetryDelay, maxDelay: DefaultMaxRetryDelay}
	for _, opt := range opts {
		if opt != nil {
			opt(&cfg)
		}
	}
	cfg.minDelay = max(cfg.minDelay, time.Millisecond)
	cfg.maxDelay = max(cfg.maxDelay, cfg.minDelay)
	interval := time.Duration(0)
	if cfg.beat {
		if interval, err = heartbeatInterval(cfg.heartbeat, ttl); err != nil {
			return nil, err
		}
	}
	if err := ctxErr(ctx); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrNotAcquired, names.Quote(resource), err)
	}
	lock, err := l.newLock(resource)
	if err != nil {
		return nil, err
	}
	w := &waiter{lock: lock, ms: ms, wake: make(chan struct{}, 1)}
	q, head := l.join(w)
	if !head {
		select {
		case <-ctx.Done():
			err := l.endedWaiting(ctx, q, resource)
			l.leave(q, w)
			return nil, err
		case <-w.wake:
		}
	}
	base, err := l.contend(ctx, q, w, ms, &cfg)
	l.leave(q, w)
	if err != nil {
		return nil, err
	}
	lock.hold(base, time.Duration(ms)*time.Millisecond)
	if err := l.replicate(ctx, lock, time.Duration(ms)*time.Millisecond); err != nil {
		return nil, acquireErr(ctx, err)
	}
	if cfg.beat {
		lock.startHeartbeat(interval)
	}
	return lock, nil
}

// waiter is a goroutine in Acquire. Its fields past wake are guarded by
// the Locker's mu.
type waiter struct {
	lock    *Lock
	ms      int64         // the TTL it asked for, in milliseconds
	wake    chan struct{} // a nudge: first in the local queue now, or look again
	granted Token         // nonzero once a release handed it the lock with this token
	floor   Token         // every grant made before its last refused attempt has a token at or below it
}

// waitQueue holds a Locker's waiters for one resource, first come first
// served. Only the first contends in Redis. Its fields are guarded by the
// Locker's mu.
type waitQueue struct {
	resource string
	channel  string
	waiters  []*waiter
	sub      *subscriber   // nil until the first waiter is refused
	ready    chan struct{} // closed when the subscription to channel is confirmed
	idle     *time.Timer   // unsubscribes after the queue stays empty
	idleGen  uint64        // tells the idle timer of now from earlier ones
	heard    bool          // Redis has answered an attempt of this queue's waiters
}

// endedWaiting is the error of a waiter of q whose ctx ended before its
// own attempt: ErrNotAcquired when Redis has answered one of q's waiters
// (and so said the lock is held), else ErrUnavailable: Redis has not
// answered at all yet (but for a ctx ended with a cause of its own: that
// cause).
func (l *Locker) endedWaiting(ctx context.Context, q *waitQueue, resource string) error {
	l.mu.Lock()
	heard := q.heard
	l.mu.Unlock()
	switch {
	case heard:
		return fmt.Errorf("%w: %s: %w", ErrNotAcquired, names.Quote(resource), ctxErr(ctx))
	case stopCause(ctx) != nil:
		return fmt.Errorf("fencedlock: acquire %s: stopped before Redis answered: %w", names.Quote(resource), ctxErr(ctx))
	}
	return fmt.Errorf("%w: acquire %s: no answer from Redis before the context ended: %w", ErrUnavailable, names.Quote(resource), ctxEnded(ctx))
}

// nudge wakes w unless a nudge is pending already.
func (w *waiter) nudge() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// join queues w; it reports whether w is first.
func (l *Locker) join(w *waiter) (*waitQueue, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.queues == nil {
		l.queues = make(map[string]*waitQueue)
	}
	q := l.queues[w.lock.resource]
	if q == nil {
		q = &waitQueue{resource: w.lock.resource, channel: w.lock.channel}
		l.queues[q.resource] = q
	}
	if q.idle != nil {
		q.idle.Stop()
		q.idle = nil
	}
	q.waiters = append(q.waiters, w)
	return q, len(q.waiters) == 1
}

// leave takes w out of q, if it is there, and wakes the next waiter when w
// was first. A queue left empty is dropped, after subscriptionLinger if
// it is subscribed.
func (l *Locker) leave(q *waitQueue, w *waiter) {
	l.mu.Lock()
	defer l.mu.Unlock()
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
	if len(q.waiters) > 0 || q.idle != nil || l.queues[q.resource] != q {
		return
	}
	if q.sub == nil {
		delete(l.queues, q.resource)
		return
	}
	q.idleGen++
	gen := q.idleGen
	q.idle = time.AfterFunc(subscriptionLinger, func() { l.unsubscribe(q, gen) })
}

// placeLife returns how long a waiter's place in the Redis queue lasts
// without another attempt, and how often the waiter renews it (its
// fallback timer), for a lock of ttl: it renews at a third of the TTL,
// at least minQueueLife, kept between the bounds of WithRetryDelay, and
// the place lasts three renewals, at least minQueueLife. So a slow retry
// delay never lets the place lapse, and a waiter whose process died
// keeps its place for three renewals.
func placeLife(ttl time.Duration, cfg *acquireConfig) (life, renew time.Duration) {
	renew = min(max(max(ttl, minQueueLife)/3, cfg.minDelay), cfg.maxDelay)
	return max(3*renew, minQueueLife), renew
}

// waitState is what the attempts of one waiter have learnt.
type waitState struct {
	refused    time.Time // when the last refused attempt was sent; zero before one
	lastErr    error     // the last attempt's error, while the wait rides it out
	unanswered bool      // the last attempt got no answer: it may have been granted
	lost       bool      // some attempt got no answer: a copy may still reach Redis
}

// contend is Acquire for the first waiter of q: it asks Redis until
// granted, woken by grants, confirmations and its fallback timer. An
// error that means "not now" (a broken connection, LOADING, READONLY,
// TRYAGAIN...) does not end the wait: it tries again after a pause that
// grows to the retry delay's maximum, until ctx ends. It returns the
// local time the grant is measured from.
func (l *Locker) contend(ctx context.Context, q *waitQueue, w *waiter, ms int64, cfg *acquireConfig) (time.Time, error) {
	ttl := time.Duration(ms) * time.Millisecond
	life, renew := placeLife(ttl, cfg)
	var (
		st    waitState
		timer *time.Timer
		pause time.Duration // the pause after an error that means "not now"
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if ctxEnded(ctx) != nil {
			return time.Time{}, l.quit(ctx, q, w, ms, life, &st)
		}
		// A grant handed over by a release came after the refused attempt
		// ran (its token is above the floor that attempt saw), so it lasts
		// at least until refused+ttl. One that came too late to be sure
		// the lock is still there is checked by the attempt below: its
		// script returns the grant, renewed, if it is still this waiter's.
		if t := l.takeGrant(w); t != 0 && time.Since(st.refused) < certainFor(ttl) {
			w.lock.token = t
			return st.refused, nil
		}
		select {
		case <-w.wake:
		default:
		}
		sent := time.Now()
		granted, r, err := l.attempt(ctx, w.lock, ms, life)
		wait := renew
		switch {
		case err != nil && ctxEnded(ctx) != nil && st.answered():
			// Cut short by ctx: what Redis last answered stands, and
			// the attempt may yet run.
			st.lost = st.lost || answerLost(err)
			return time.Time{}, l.quit(ctx, q, w, ms, life, &st)
		case err != nil && (ctxEnded(ctx) != nil || !notNow(err)):
			st.note(err)
			return time.Time{}, l.giveUpWait(ctx, w, ms, life, &st)
		case err != nil:
			// Not now: try again after a pause, listening for the
			// subscription that comes back with Redis.
			st.note(err)
			pause = min(max(2*pause, cfg.minDelay), cfg.maxDelay)
			wait = pause
		case granted:
			return sent, nil
		default:
			if st.refused.IsZero() {
				l.logWaiting(ctx, q.resource, ttl)
			}
			st.note(nil)
			st.refused, pause = sent, 0
			l.refused(q, w, r)
			if r.wait >= 0 {
				// PTTL counts whole milliseconds left, rounded down: 0 is
				// the last one. A negative PTTL is a key without expiry.
				wait = min(wait, r.wait+time.Millisecond)
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
			ready = l.subscribe(ctx, q)
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

// answered reports whether an attempt of the wait got an answer: a
// refusal, or an error that the wait rode out.
func (st *waitState) answered() bool { return !st.refused.IsZero() || st.lastErr != nil }

// note records the outcome of an attempt: err, or nil when Redis
// answered it.
func (st *waitState) note(err error) {
	st.lastErr = err
	st.unanswered = err != nil && answerLost(err)
	st.lost = st.lost || st.unanswered
}

// transientReplies are the error replies of Redis that mean "not now": a
// waiter tries again after them.
var transientReplies = [...]string{"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "BUSY", "MOVED", "ASK", "NOREPLICAS"}

// notNow reports whether err, the error of a round trip, says that Redis
// cannot answer now but may soon: a connection refused, reset or broken,
// a reply that did not come in time, a full connection pool, or one of
// transientReplies.
func notNow(err error) bool {
	if !errors.Is(err, ErrUnavailable) {
		return false
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		for _, prefix := range transientReplies {
			if redis.HasErrorPrefix(rerr, prefix) {
				return true
			}
		}
		return false
	}
	var nerr net.Error
	return errors.As(err, &nerr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted)
}

// acquireErr is the error of a wait that failed: when ctx ended, it wraps
// ctx's error (and its cause) too. The attempt's error says whether Redis
// answered; it may report a failed cleanup.
func acquireErr(ctx context.Context, err error) error {
	cerr := ctxErr(ctx)
	if cerr == nil || errors.Is(err, ctxEnded(ctx)) && errors.Is(err, context.Cause(ctx)) {
		return err
	}
	return fmt.Errorf("%w: %w", err, cerr)
}

// quit ends the wait of w when ctx is done: out of the local queue, and
// out of the Redis queue if it was queued there, passing on a lock handed
// to it meanwhile, and releasing what an attempt without an answer may
// have been granted. Its error says what Redis last said: the lock is
// held (ErrNotAcquired), it was failing (ErrUnavailable with its error),
// or nothing yet.
func (l *Locker) quit(ctx context.Context, q *waitQueue, w *waiter, ms int64, life time.Duration, st *waitState) error {
	var err error
	if st.lastErr != nil {
		err = st.lastErr
	} else {
		err = l.endedWaiting(ctx, q, w.lock.resource)
	}
	l.leave(q, w)
	if t := l.takeGrant(w); st.refused.IsZero() && !st.lost && t == 0 {
		return acquireErr(ctx, err)
	}
	return acquireErr(ctx, l.abandonWait(ctx, w, ms, life, st, err))
}

// giveUpWait ends the wait of w, the first waiter of its queue, after an
// attempt that failed for good (or whose ctx ended meanwhile), with that
// attempt's error.
func (l *Locker) giveUpWait(ctx context.Context, w *waiter, ms int64, life time.Duration, st *waitState) error {
	err := st.lastErr
	if !st.refused.IsZero() || st.lost {
		err = l.abandonWait(ctx, w, ms, life, st, err)
	}
	return acquireErr(ctx, err)
}

// abandonWait gives up the attempts of w, whose wait ends with err (see
// Locker.abandon).
func (l *Locker) abandonWait(ctx context.Context, w *waiter, ms int64, life time.Duration, st *waitState, err error) error {
	place := time.Duration(0)
	if !st.refused.IsZero() || st.lost {
		// Queued in Redis by a refusal, or maybe by an attempt whose
		// answer never came.
		place = life
	}
	return l.abandon(ctx, w.lock, ms, place, st.lost, st.unanswered, err)
}

// takeGrant returns the token of the grant a release handed w, or 0, and
// forgets it. A late grant (see waiter.late) is not returned: its message
// came after the grant had ended.
func (l *Locker) takeGrant(w *waiter) Token {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := w.granted
	w.granted = 0
	if w.late(t) {
		return 0
	}
	return t
}

// late reports whether a grant with token t may have been made before w's
// last refused attempt ran (t is at or below its floor), so may have
// ended since. Without a floor (no refusal yet, or a counter the refusal
// could not read) every grant may be late: the waiter's next attempt
// tells, as its script returns a grant still held by it. The Locker's mu
// is held.
func (w *waiter) late(t Token) bool { return w.floor == 0 || t <= w.floor }

// refused records what w's last refused attempt learned.
func (l *Locker) refused(q *waitQueue, w *waiter, r refusal) {
	l.mu.Lock()
	w.floor = r.floor
	q.heard = true
	l.mu.Unlock()
}

// handedOn delivers the grant of a release to owner, the first local
// waiter for resource, if it is one of this Locker's: the release's reply
// (when this Locker released) or its published message carried it.
func (l *Locker) handedOn(resource, owner string, token Token) {
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.queues[resource]
	if q == nil || len(q.waiters) == 0 {
		return
	}
	w := q.waiters[0]
	if w.granted != 0 || w.lock.owner.(string) != owner {
		return
	}
	if !w.late(token) {
		w.granted = token
	}
	// A late grant still wakes the waiter: its next attempt finds out
	// whether the grant is still its own.
	w.nudge()
}

// parseGrant splits the message of a grant, "<owner nonce>:<token>", into
// the owner (with its ':') and the token.
func parseGrant(msg string) (string, Token, bool) {
	i := strings.LastIndexByte(msg, ':')
	if i < 0 {
		return "", 0, false
	}
	t, err := ParseToken(msg[i+1:])
	if err != nil {
		return "", 0, false
	}
	return msg[:i+1], t, true
}
