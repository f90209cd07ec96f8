package fencedlock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/fencedlock/fencedlock/internal/call"
	"github.com/fencedlock/fencedlock/internal/names"
	"github.com/fencedlock/fencedlock/internal/wait"
	"github.com/fencedlock/fencedlock/observe"
)

// abandonMarkerTTL is how long, beyond the lock's TTL, the marker of an
// abandoned acquire attempt (one whose caller gave up before its answer
// came) refuses the attempt if it arrives late: longer than TCP keeps
// retransmitting a request (about 15 minutes on Linux). Without it, such
// an attempt, held up in the network and delivered after its caller's
// cleanup, takes a free lock that nobody will use or release, for its
// TTL: TestAbandonedAttemptArrivingLateIsRefused shows it.
const abandonMarkerTTL = 16 * time.Minute

// AcquireOption configures one call of Acquire.
type AcquireOption func(*acquireConfig)

type acquireConfig struct {
	minDelay, maxDelay time.Duration
	heartbeat          time.Duration
	beat               bool
	call               observe.Call // what the events of the acquire name as its call
}

// newAcquireConfig returns the configuration of an Acquire with opts.
func newAcquireConfig(opts []AcquireOption) acquireConfig {
	if len(opts) == 0 {
		// No option can take the address of cfg: it stays on the stack.
		return acquireConfig{minDelay: defaultMinRetryDelay, maxDelay: defaultMaxRetryDelay, call: observe.CallAcquire}
	}
	cfg := acquireConfig{minDelay: defaultMinRetryDelay, maxDelay: defaultMaxRetryDelay, call: observe.CallAcquire}
	for _, opt := range opts {
		if opt != nil {
			opt(&cfg)
		}
	}
	return cfg
}

// WithCall names the call that Acquire makes, in the events the Locker's
// Observer gets (observe.Event's Call; fencedotel's fencedlock.call
// attribute): for a package that acquires locks for a call of its own, as
// package election's Campaign does with observe.CallCampaign, so that its
// long waits are told apart from those of ordinary locks. The default is
// observe.CallAcquire (observe.CallDo for Do's acquire); observe.CallNone
// and observe.CallTry are taken as observe.CallAcquire. It changes nothing
// else.
func WithCall(c observe.Call) AcquireOption {
	return func(cfg *acquireConfig) {
		if c == observe.CallNone || c == observe.CallTry {
			c = observe.CallAcquire
		}
		cfg.call = c
	}
}

// asDo is Do's option for its acquire: its events name Do as the call.
var asDo AcquireOption = func(cfg *acquireConfig) { cfg.call = observe.CallDo }

// Default bounds of the fallback wait of Acquire (see WithRetryDelay), and
// the least minDelay it takes: a smaller one is raised to it.
const (
	defaultMinRetryDelay = 2 * time.Millisecond
	defaultMaxRetryDelay = time.Second
	leastRetryDelay      = time.Millisecond
)

// WithRetryDelay bounds Acquire's fallback wait. A waiter is woken by the
// release that hands it the lock, not by a timer; the timer only covers a
// message lost with a broken connection, a holder that crashed, and the
// renewal of the waiter's place in the queue. It fires after a third of
// the waiter's TTL or of 100 ms, whichever is longer (the renewal of its
// place), kept between minDelay and maxDelay, or when the holder's TTL
// runs out, if that is sooner; after an error that means "not now", the
// pause doubles from minDelay to maxDelay. The defaults are 2ms and 1s. A
// minDelay below 1ms is raised to 1ms and a maxDelay below minDelay is
// raised to minDelay.
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
	cfg := newAcquireConfig(opts)
	if l == nil || !l.watched() {
		return l.acquire(ctx, resource, ttl, &cfg)
	}
	start := time.Now()
	ctx = l.emit(ctx, observe.Event{Kind: observe.AcquireStart, Call: cfg.call, Resource: resource, TTL: ttl})
	lock, err := l.acquire(ctx, resource, ttl, &cfg)
	l.acquireEnd(ctx, start, cfg.call, resource, ttl, lock, err)
	return lock, err
}

func (l *Locker) acquire(ctx context.Context, resource string, ttl time.Duration, cfg *acquireConfig) (*Lock, error) {
	if err := l.check(resource); err != nil {
		return nil, err
	}
	ms, err := ttlMillis(ttl)
	if err != nil {
		return nil, err
	}
	cfg.minDelay = max(cfg.minDelay, leastRetryDelay)
	cfg.maxDelay = max(cfg.maxDelay, cfg.minDelay)
	interval := time.Duration(0)
	if cfg.beat {
		if interval, err = heartbeatInterval(cfg.heartbeat, ttl); err != nil {
			return nil, err
		}
	}
	if err := call.Err(ctx); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrNotAcquired, names.Quote(resource), err)
	}
	lock, err := l.newLock(resource)
	if err != nil {
		return nil, err
	}
	req := wait.Request{
		Resource: resource, Channel: lock.channel, Owner: lock.owner.(string),
		TTL: time.Duration(ms) * time.Millisecond, Delays: wait.Delays{Min: cfg.minDelay, Max: cfg.maxDelay},
	}
	lock.contender = contender{l: l, lock: lock, ms: ms, call: cfg.call}
	c := &lock.contender
	req.Slot = &c.slot
	token, base, err := l.room.Wait(ctx, req, c)
	if !c.waitStart.IsZero() {
		l.emit(ctx, observe.Event{Kind: observe.WaitEnd, Call: cfg.call, Resource: resource, TTL: req.TTL, Duration: time.Since(c.waitStart)})
	}
	if err != nil {
		return nil, err
	}
	lock.call = cfg.call
	lock.grant(Token(token), base, req.TTL)
	if l.replicas != nil {
		if err := l.replicate(ctx, lock, req.TTL); err != nil {
			return nil, withCtx(ctx, err)
		}
	}
	if cfg.beat {
		lock.startHeartbeat(interval)
	}
	return lock, nil
}

// contender is what the waiting room asks of the lock a waiter waits for
// (see wait.Contender).
type contender struct {
	l         *Locker
	lock      *Lock
	ms        int64        // the TTL asked for, in milliseconds
	call      observe.Call // the call that acquires
	waitStart time.Time    // when the wait began, reported (see Refused); zero until then
	slot      wait.Slot    // the wait's state, allocated with the Lock
}

func (c *contender) Attempt(ctx context.Context, life time.Duration) (wait.Answer, error) {
	return c.l.attempt(ctx, c.lock, c.ms, life)
}

// NotNow says whether the wait rides out err: Redis could not answer
// now, but may soon.
func (c *contender) NotNow(err error) bool { return c.l.notNow(err) }

// notNow reports whether err, an error of the Locker's, says that Redis
// could not answer now but may soon: ErrUnavailable for a cause that
// call.NotNow takes to pass, but for a Cluster redirect (MOVED, ASK) to a
// client that follows none, which gets it for good.
func (l *Locker) notNow(err error) bool {
	return errors.Is(err, ErrUnavailable) && call.NotNow(err) && (l.redirects || !call.Redirected(err))
}

// Stopped is the error of a waiter whose ctx ended before its attempt
// was answered: ErrNotAcquired when Redis refused an attempt of its queue
// (and so said the lock is held), else ErrUnavailable: Redis has not
// answered at all yet (but for a ctx ended with a cause of its own: that
// cause).
func (c *contender) Stopped(ctx context.Context, heard bool) error {
	resource := c.lock.resource
	switch {
	case heard:
		return fmt.Errorf("%w: %s: %w", ErrNotAcquired, names.Quote(resource), call.Err(ctx))
	case call.Cause(ctx) != nil:
		return fmt.Errorf("fencedlock: acquire %s: stopped before Redis answered: %w", names.Quote(resource), call.Err(ctx))
	}
	return fmt.Errorf("%w: acquire %s: no answer from Redis before the context ended: %w", ErrUnavailable, names.Quote(resource), call.Ended(ctx))
}

func (c *contender) GiveUp(ctx context.Context, place time.Duration, lost, lastLost bool, err error) error {
	return c.l.giveUp(ctx, c.lock, c.ms, place, lost, lastLost, err)
}

// Refused is told that the waiter waits: it logs that once, and reports
// it (observe.WaitStart) when the Locker is watched.
func (c *contender) Refused(ctx context.Context) {
	if !c.waitStart.IsZero() || !c.l.watched() {
		return
	}
	ttl := time.Duration(c.ms) * time.Millisecond
	c.waitStart = time.Now()
	c.l.logWaiting(ctx, c.lock.resource, ttl)
	c.l.emit(ctx, observe.Event{Kind: observe.WaitStart, Call: c.call, Resource: c.lock.resource, TTL: ttl})
}

// withCtx is the error of an acquire that failed: when ctx ended, it
// wraps ctx's error (and its cause) too.
func withCtx(ctx context.Context, err error) error {
	cerr := call.Err(ctx)
	if cerr == nil || errors.Is(err, call.Ended(ctx)) && errors.Is(err, context.Cause(ctx)) {
		return err
	}
	return fmt.Errorf("%w: %w", err, cerr)
}

// TryAcquire makes one attempt to lock resource for ttl, in one round trip
// to Redis. On success Redis has granted the Lock, with a token higher
// than every token granted on resource before (unless Redis lost the
// counter and its clock is behind: see "What is promised"). ttl must be at
// least one millisecond; it is rounded down to whole milliseconds.
//
// When Redis answers that another owner holds the lock, or that it is
// free but promised to a queued waiter, the error wraps ErrNotAcquired.
// When Redis cannot be reached, does not answer before ctx ends, or
// answers with an error, the error wraps ErrUnavailable and the cause. A
// ctx done before the call sends nothing and returns an error wrapping
// ErrNotAcquired and ctx's error.
//
// An attempt whose answer never came leaves no orphaned lock: TryAcquire
// releases what the attempt may have been granted, while ctx lasts and
// past it in the background, and the error says how that cleanup went. If
// the cleanup failed, the lock may stay taken, with nobody holding it,
// until ttl runs out. See
// https://github.com/fencedlock/fencedlock/blob/main/docs/errors.md.
func (l *Locker) TryAcquire(ctx context.Context, resource string, ttl time.Duration) (*Lock, error) {
	if l == nil || !l.watched() {
		return l.tryAcquire(ctx, resource, ttl)
	}
	start := time.Now()
	ctx = l.emit(ctx, observe.Event{Kind: observe.AcquireStart, Call: observe.CallTry, Resource: resource, TTL: ttl})
	lock, err := l.tryAcquire(ctx, resource, ttl)
	l.acquireEnd(ctx, start, observe.CallTry, resource, ttl, lock, err)
	return lock, err
}

func (l *Locker) tryAcquire(ctx context.Context, resource string, ttl time.Duration) (*Lock, error) {
	if err := l.check(resource); err != nil {
		return nil, err
	}
	ms, err := ttlMillis(ttl)
	if err != nil {
		return nil, err
	}
	if err := call.Err(ctx); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrNotAcquired, names.Quote(resource), err)
	}
	lock, err := l.newLock(resource)
	if err != nil {
		return nil, err
	}
	sent := time.Now()
	a, err := l.attempt(ctx, lock, ms, 0)
	if err != nil {
		if call.Unanswered(err, l.resends) {
			err = l.giveUp(ctx, lock, ms, 0, true, true, err)
		}
		return nil, err
	}
	if !a.Granted {
		return nil, fmt.Errorf("%w: %s is held by another owner or promised to a waiter", ErrNotAcquired, names.Quote(resource))
	}
	lock.call = observe.CallTry
	lock.grant(Token(a.Token), sent, ttl)
	if l.replicas != nil {
		if err := l.replicate(ctx, lock, ttl); err != nil {
			return nil, err
		}
	}
	return lock, nil
}

// attempt runs the acquire script once for an ungranted lock, and says
// what Redis answered: a grant (and its token), or a refusal. life is 0
// for a single attempt; for a waiter, it is how long its place in the
// queue lasts without another attempt. Its error is redisErr's, or says
// that the reply could not be read; it cleans up nothing: see giveUp.
func (l *Locker) attempt(ctx context.Context, lock *Lock, ms int64, life time.Duration) (wait.Answer, error) {
	a := acquireCall{lock: lock, ms: l.ttlArgs.box(ms), life: ""}
	if life > 0 {
		a.life = l.lifeArgs.box(life.Milliseconds())
	}
	res, err := call.BoundedOn(ctx, l.heeds, a, runAcquire)
	if err != nil {
		return wait.Answer{}, redisErr(ctx, "acquire", lock.resource, err, lock.keys[keyLock], lock.keys[keyToken], lock.keys[keyQueue], lock.keys[keyDeadlines])
	}
	r, err := decodeAcquire(res)
	if err == nil && r.status == acquireAbandoned {
		err = errors.New("attempt was abandoned")
	}
	if err != nil {
		return wait.Answer{}, fmt.Errorf("fencedlock: acquire %s: %w", names.Quote(lock.resource), err)
	}
	return wait.Answer{Granted: r.status == acquireGranted, Token: uint64(r.token), Wait: r.wait, Floor: uint64(r.floor)}, nil
}

// acquireCall is what an attempt sends besides the Lock's keys and owner:
// the TTL and the life of a waiter's place in milliseconds ("" for a
// single attempt), boxed.
type acquireCall struct {
	lock     *Lock
	ms, life any
}

// runAcquire runs the acquire script for a, one round trip (see
// call.BoundedOn).
func runAcquire(ctx context.Context, a acquireCall) (any, error) {
	k := a.lock
	return acquireScript.Run(ctx, k.locker.client, k.keyArgs[:], k.owner, a.ms, a.life, k.locker.idleArg).Result()
}

// The statuses of acquire.lua's replies: a refusal's and an abandoned
// attempt's named as in the script, which answers a grant with its token
// alone.
const (
	acquireRefused   = 0 // REFUSED: the lock is another's, or promised to a waiter ahead
	acquireGranted   = 1 // a token: the lock is the caller's
	acquireAbandoned = 2 // ABANDONED: the attempt's caller gave up on it
)

// acquireReply is a reply of acquire.lua, decoded.
type acquireReply struct {
	status int64         // acquireGranted, acquireRefused or acquireAbandoned
	token  Token         // granted: the lock's token
	wait   time.Duration // refused: how long until the lock may be free
	floor  Token         // refused: the counter before the run; 0 when the reply has none
}

// decodeAcquire decodes a reply of acquire.lua: a token (an integer, or
// a digit string), {REFUSED, ms[, floor]} or {ABANDONED}.
func decodeAcquire(reply any) (acquireReply, error) {
	res, ok := reply.([]any)
	if !ok {
		token, err := tokenFromReply(reply)
		if err != nil {
			return acquireReply{}, err
		}
		return acquireReply{status: acquireGranted, token: token}, nil
	}
	var status int64 = -1
	if len(res) > 0 {
		status, _ = res[0].(int64)
	}
	switch {
	case status == acquireRefused && (len(res) == 2 || len(res) == 3):
		ms, ok := res[1].(int64)
		if !ok {
			break
		}
		r := acquireReply{status: status, wait: time.Duration(ms) * time.Millisecond}
		if len(res) == 3 {
			// A counter that holds no token gives no floor.
			r.floor, _ = tokenFromReply(res[2])
		}
		return r, nil
	case status == acquireAbandoned && len(res) == 1:
		return acquireReply{status: status}, nil
	}
	return acquireReply{}, fmt.Errorf("unexpected reply %v", res)
}

// giveUp gives up the acquire attempts of lock for ms milliseconds,
// whose wait ends with err: when queued in Redis (place is the life of
// its place there, 0 when not queued) it leaves the queue, passing on a
// lock handed to it meanwhile, and when lost says that an attempt got no
// answer, it releases what that attempt may have been granted and leaves
// the marker that refuses a copy still on its way (see Lock.withdraw). It
// returns err with how that went, telling of a grant a lost reply may
// have carried only when unanswered says the last attempt got no answer.
//
// It tries while its place may still be handed the lock, and once more
// after it lapsed, within call.Timeout, so that an error reply that
// means "not now" (TRYAGAIN during a Cluster reshard) leaves no entry
// that a release could hand the lock to, nor a lock handed to it.
func (l *Locker) giveUp(ctx context.Context, lock *Lock, ms int64, place time.Duration, lost, unanswered bool, err error) error {
	var markerMS int64
	if lost {
		// At most the longest time.Duration: ms came from one.
		markerMS = min(ms+abandonMarkerTTL.Milliseconds(), math.MaxInt64/int64(time.Millisecond))
	}
	cerr := l.cleanups.Run(ctx, lock.resource, "give up acquire", place+call.Timeout, func(ctx context.Context) error {
		return lock.withdraw(ctx, ms, place, markerMS)
	})
	switch {
	case unanswered:
		return call.Report(err, "releasing the grant the lost reply may have carried", "it may stay locked until its TTL ends", cerr)
	case place > 0:
		return call.Report(err, "leaving the queue", "a lock handed to this waiter may stay locked until its TTL ends", cerr)
	}
	return call.Report(err, "refusing a late copy of an attempt that got no answer", "such a copy may take the lock for its TTL", cerr)
}

// tokenFromReply converts a token from a script reply: an integer, or a
// string of digits for values a Lua number cannot hold exactly.
func tokenFromReply(v any) (Token, error) {
	switch v := v.(type) {
	case int64:
		if v > 0 {
			return Token(v), nil
		}
	case string:
		return ParseToken(v)
	}
	return 0, fmt.Errorf("%w: unexpected token reply %v", ErrInvalidToken, v)
}
