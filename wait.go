package fencedlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
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
// the TTL (the place's renewal), kept between minDelay and maxDelay, or
// when the holder's TTL runs out, if that is sooner. Defaults:
// DefaultMinRetryDelay and DefaultMaxRetryDelay. A minDelay below 1ms is
// raised to 1ms and a maxDelay below minDelay is raised to minDelay.
func WithRetryDelay(minDelay, maxDelay time.Duration) AcquireOption {
	return func(c *acquireConfig) { c.minDelay, c.maxDelay = minDelay, maxDelay }
}

// Acquire locks resource for ttl, waiting while another owner holds it,
// until it gets the lock or ctx is done. On success the Lock carries a
// fresh token, higher than every token granted on resource before. When
// ctx ends first it returns an error that wraps both ErrNotAcquired and
// ctx.Err(). Errors other than a held lock (a Redis failure, bad input)
// end the wait at once.
//
// Waiting is first come, first served, and costs Redis little while the
// lock is held: one renewal of the waiter's place per process every third
// of the TTL or every second, whichever is sooner (see WithRetryDelay).
// The goroutines of one Locker waiting for one resource queue in the
// process, and only the first of them queues in Redis, where waiters of
// every process queue in order of arrival. Release hands the lock to the
// first live waiter in that queue, with a fresh token, in the same script,
// and publishes the grant on the resource's channel; the Locker's one
// subscription (one per Redis Cluster hash slot in use) wakes the waiter.
// The first waiter has a token reserved: a holder whose next waiter is in
// its own Locker, and whose own lease is certain by the local clock, hands
// it the lock at once, before the release's reply comes back, and the new
// Lock's commands wait until Redis has confirmed the grant (the Lock ends
// as lost if Redis does not). A waiter that gives
// up leaves the queue, passing on a lock handed to it meanwhile. A waiter
// whose process dies keeps its place until its TTL (at least 100ms) runs
// out unrenewed: like a holder that crashes, it delays the others by at
// most one TTL. TryAcquire, too, does not take a free lock that is
// promised to a waiter.
//
// A timer bounded by the holder's remaining TTL covers a crashed holder
// and a lost message: see WithRetryDelay. With WithHeartbeat, the Lock is
// refreshed until released or lost. With the Locker's WithReplicas, a
// grant is returned only once replicas have confirmed it, and a grant they
// do not confirm ends the wait with ErrNotReplicated.
func (l *Locker) Acquire(ctx context.Context, resource string, ttl time.Duration, opts ...AcquireOption) (*Lock, error) {
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
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrNotAcquired, resource, err)
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
			l.leave(q, w)
			return nil, fmt.Errorf("%w: %q: %w", ErrNotAcquired, resource, ctx.Err())
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

// waiter is a goroutine in Acquire.
type waiter struct {
	lock     *Lock
	ms       int64         // the TTL it asked for, in milliseconds
	wake     chan struct{} // a nudge: first in the local queue now, or look again
	granted  Token         // nonzero once a release handed it the lock with this token
	transfer *transfer     // the handing over of granted, when not yet confirmed
	floor    Token         // every grant made before its last refused attempt has a token at or below it
	reserved Token         // the token reserved for it, first in the Redis queue, or 0
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
	transfer *transfer     // the last handing over of the lock to one of waiters
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

// contend is Acquire for the first waiter of q: it asks Redis until
// granted, woken by grants, confirmations and its fallback timer. It
// returns the local time the grant is measured from.
func (l *Locker) contend(ctx context.Context, q *waitQueue, w *waiter, ms int64, cfg *acquireConfig) (time.Time, error) {
	ttl := time.Duration(ms) * time.Millisecond
	life := max(ttl, minQueueLife)
	var (
		timer   *time.Timer
		refused time.Time // when the last refused attempt was sent
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			return time.Time{}, l.quit(ctx, q, w, ms, !refused.IsZero())
		}
		// A grant handed over by a release came after the refused attempt
		// ran (its token is above the floor that attempt saw), so it lasts
		// at least until refused+ttl. One that came too late to be sure
		// the lock is still there is checked by the attempt below: its
		// script returns the grant, renewed, if it is still this waiter's.
		fresh := time.Since(refused) < certainFor(ttl)
		if t, tr := l.takeGrant(w); tr != nil && fresh {
			l.take(tr)
			return refused, nil
		} else if t != 0 && tr == nil && fresh {
			w.lock.token = t
			return refused, nil
		}
		select {
		case <-w.wake:
		default:
		}
		if err := l.awaitTransfer(ctx, q); err != nil {
			continue // ctx is done
		}
		sent := time.Now()
		granted, r, err := l.attempt(ctx, w.lock, ms, life)
		if err != nil {
			if !refused.IsZero() && isServerError(err) {
				// An error reply (OOM, READONLY during a failover...):
				// leave the queue, or the lock would be handed to a waiter
				// that has gone.
				if cerr := w.lock.giveUp(ctx, ms, true, 0); cerr != nil {
					err = fmt.Errorf("%w (leaving the queue failed too: %v)", err, cerr)
				}
			}
			return time.Time{}, acquireErr(ctx, err)
		}
		if granted {
			return sent, nil
		}
		refused = sent
		l.refused(w, r)
		wait := min(max(life/3, cfg.minDelay), cfg.maxDelay)
		if r.wait >= 0 {
			// PTTL counts whole milliseconds left, rounded down: 0 is
			// the last one. A negative PTTL is a key without expiry.
			wait = min(wait, r.wait+time.Millisecond)
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		// Until the subscription is confirmed, a release could go unheard:
		// look again once it is.
		ready := l.subscribe(ctx, q)
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

// acquireErr is the error of an attempt that failed while waiting: when
// ctx ended, it says so with both sentinels, keeping the attempt's error,
// which may report a failed cleanup.
func acquireErr(ctx context.Context, err error) error {
	ctxErr := ctxEnded(ctx)
	switch {
	case ctxErr == nil:
		return err
	case errors.Is(err, ctxErr):
		return fmt.Errorf("%w: %w", ErrNotAcquired, err)
	default:
		return fmt.Errorf("%w: %w: %w", ErrNotAcquired, ctxErr, err)
	}
}

// ctxEnded returns ctx.Err(), or context.DeadlineExceeded once ctx's
// deadline has passed although its timer has not fired yet: a read
// deadline that go-redis took from ctx (ContextTimeoutEnabled) can end a
// command first.
func ctxEnded(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// quit ends the wait of w when ctx is done: out of the local queue, and,
// if it was queued in Redis, out of the Redis queue, passing on a lock
// handed to it meanwhile.
func (l *Locker) quit(ctx context.Context, q *waitQueue, w *waiter, ms int64, queued bool) error {
	l.leave(q, w)
	err := fmt.Errorf("%w: %q: %w", ErrNotAcquired, w.lock.resource, ctx.Err())
	if t, _ := l.takeGrant(w); !queued && t == 0 {
		return err
	}
	if cerr := w.lock.giveUp(ctx, ms, true, 0); cerr != nil {
		return fmt.Errorf("%w (leaving the queue failed too, so a lock handed to this waiter may stay locked until its TTL ends: %v)", err, cerr)
	}
	return err
}

// takeGrant returns the token of the grant a release handed w, or 0, and
// forgets it, with the transfer that hands it over if it is not confirmed
// yet. A late grant (see waiter.late) is not returned: its message came
// after the grant had ended.
func (l *Locker) takeGrant(w *waiter) (Token, *transfer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, tr := w.granted, w.transfer
	w.granted, w.transfer = 0, nil
	if w.late(t) {
		return 0, nil
	}
	return t, tr
}

// late reports whether a grant with token t was made before w's last
// refused attempt ran (t is at or below its floor), so has ended since.
// The token reserved for w is the exception: it is granted to w alone,
// after the reservation. The Locker's mu is held.
func (w *waiter) late(t Token) bool { return t <= w.floor && t != w.reserved }

// refused records what w's last refused attempt learned.
func (l *Locker) refused(w *waiter, r refusal) {
	l.mu.Lock()
	w.floor, w.reserved = r.floor, r.reserved
	l.mu.Unlock()
}

// transfer is a lock handed by its holder to the next waiter of the same
// Locker before Redis confirmed it: the waiter holds the lock from the
// moment it takes it, with the token reserved for it, while the release
// that grants it in Redis is on its way. The holder hands over only while
// its own lease is certain (see handOver), so the release finds it holding
// the lock and grants it to that waiter, first in the queue. done is
// closed once the release has answered; if it did not grant the lock to
// the waiter, a waiter that took it ends as lost, and leaves the queue in
// Redis, passing on a lock granted to it after all; one that had not
// taken it goes on waiting.
type transfer struct {
	w     *waiter
	token Token // reserved for w
	taken bool  // guarded by the Locker's mu
	done  chan struct{}
}

// handOver hands the lock on resource, which holder is about to release,
// to the first local waiter if the release will grant it to that waiter:
// the waiter is first in the Redis queue with a token reserved, and
// holder's lease is certain (it was granted or refreshed for a TTL that
// has not nearly run out, by the local clock; a holder that does not know
// whether it holds the lock hands nothing over). It returns the transfer
// to complete with the release's answer, or nil.
func (l *Locker) handOver(holder *Lock) *transfer {
	if !holder.certain() {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.queues[holder.resource]
	if q == nil || len(q.waiters) == 0 {
		return nil
	}
	w := q.waiters[0]
	if w.reserved == 0 || w.granted != 0 {
		return nil
	}
	tr := &transfer{w: w, token: w.reserved, done: make(chan struct{})}
	w.granted, w.transfer = w.reserved, tr
	q.transfer = tr
	w.nudge()
	return tr
}

// take gives the waiter the lock handed over by tr.
func (l *Locker) take(tr *transfer) {
	l.mu.Lock()
	tr.taken = true
	tr.w.lock.token = tr.token
	tr.w.lock.transfer = tr
	l.mu.Unlock()
}

// complete ends tr with the answer of the release: the owner and token of
// the waiter it handed the lock to, or err.
func (l *Locker) complete(tr *transfer, owner string, token Token, err error) {
	defer close(tr.done)
	lock := tr.w.lock
	if err == nil && owner == lock.owner.(string) && token == tr.token {
		return
	}
	l.mu.Lock()
	taken := tr.taken
	if !taken && tr.w.transfer == tr {
		tr.w.granted, tr.w.transfer = 0, nil
	}
	l.mu.Unlock()
	if !taken {
		return // the waiter goes on waiting: see contend
	}
	if err == nil {
		err = errors.New("the lock went to another waiter, or to none")
	}
	lock.lost(fmt.Sprintf("the holder's release did not hand the lock over: %v", err))
	_ = lock.giveUp(context.Background(), tr.w.ms, true, 0)
}

// awaitTransfer waits until the transfer of the lock to the waiter before
// this one in q, if any, has been answered: until then, Redis does not
// know that waiter holds the lock, and this one's attempt would queue
// behind it. It returns ctx's error if ctx ends first.
func (l *Locker) awaitTransfer(ctx context.Context, q *waitQueue) error {
	l.mu.Lock()
	tr := q.transfer
	l.mu.Unlock()
	if tr == nil {
		return nil
	}
	select {
	case <-tr.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// handedOn delivers the grant of a release to owner, the first local
// waiter for resource, if it is one of this Locker's.
func (l *Locker) handedOn(resource, owner string, token Token) {
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.queues[resource]
	if q == nil || len(q.waiters) == 0 {
		return
	}
	w := q.waiters[0]
	if w.granted != 0 || w.lock.owner.(string) != owner || w.late(token) {
		return
	}
	w.granted = token
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
