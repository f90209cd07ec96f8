package fencedlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	mrand "math/rand"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultPrefix is the key prefix a Locker and a RedisStore use unless
// WithPrefix or WithStorePrefix sets another.
const DefaultPrefix = "fencedlock"

// cleanupTimeout bounds work that must happen after the caller's context is
// done, such as releasing a lock whose grant reply was lost.
const cleanupTimeout = time.Second

// abandonMarkerTTL is how long, beyond the lock's TTL, the marker of an
// abandoned acquire attempt refuses the attempt if it arrives late: longer
// than TCP keeps retransmitting a request (about 15 minutes on Linux).
const abandonMarkerTTL = 16 * time.Minute

// Locker grants fenced locks on resources named by strings. It keeps no
// state of its own besides its configuration: all lock state is in Redis,
// so Lockers in many processes sharing one Redis (and one prefix)
// coordinate with each other.
//
// Make a Locker with New. The zero Locker has no client: its methods
// return errors wrapping ErrInvalidArgument.
//
// A Locker is safe for concurrent use by multiple goroutines.
type Locker struct {
	client redis.UniversalClient
	prefix string
	err    error // set by New for a configuration that cannot work
}

// Option configures a Locker in New. The one option is WithPrefix; a nil
// Option is ignored.
type Option func(*Locker)

// WithPrefix sets the namespace of the Locker's keys: a resource R uses
// the keys "<prefix>:{R}:lock" and "<prefix>:{R}:token". The default is
// DefaultPrefix. An empty prefix gives "{R}:lock" and "{R}:token". Lockers
// that must exclude each other need the same prefix. A prefix holding "{}"
// would give every key an empty Redis Cluster hash tag; with it, every
// call returns an error wrapping ErrInvalidArgument.
func WithPrefix(prefix string) Option {
	return func(l *Locker) { l.prefix = prefix }
}

// New returns a Locker that keeps its locks and token counters in the
// Redis behind client: a single node, a Sentinel failover client, or a
// Cluster client.
//
// New does not contact Redis. A nil client does not panic: every method of
// the returned Locker that would contact Redis returns an error wrapping
// ErrInvalidArgument.
func New(client redis.UniversalClient, opts ...Option) *Locker {
	l := &Locker{client: client, prefix: DefaultPrefix}
	for _, opt := range opts {
		if opt != nil {
			opt(l)
		}
	}
	if isNil(client) {
		l.err = invalidArg("nil redis client")
	}
	return l
}

// isNil reports whether an interface holds nil or a nil pointer.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Func, reflect.Slice, reflect.Chan:
		return rv.IsNil()
	}
	return false
}

// LockKey returns the Redis key that holds the lock on resource.
func (l *Locker) LockKey(resource string) string { return l.key(resource, "lock") }

// TokenKey returns the Redis key that holds resource's token counter. It
// has no TTL: it outlives every lock on the resource.
func (l *Locker) TokenKey(resource string) string { return l.key(resource, "token") }

func (l *Locker) key(resource, kind string) string {
	return keyFor(l.prefix, resource, kind)
}

func keyFor(prefix, resource, kind string) string {
	if prefix == "" {
		return "{" + resource + "}:" + kind
	}
	return prefix + ":{" + resource + "}:" + kind
}

// checkResource validates a resource name and the hash tag its keys get.
func checkResource(prefix, resource string) error {
	if resource == "" {
		return invalidArg("empty resource name")
	}
	// Redis Cluster hashes the text between the first "{" and the next
	// "}" of a key. An empty tag makes it hash whole keys, which would put
	// the keys of one resource in different slots. The first "{" is the
	// prefix's, if it has one, else the one before the resource.
	if i := strings.IndexByte(prefix, '{'); i >= 0 {
		if i+1 < len(prefix) && prefix[i+1] == '}' {
			return invalidArg("prefix %q gives keys an empty hash tag", prefix)
		}
	} else if resource[0] == '}' {
		return invalidArg("resource %q begins with \"}\", which gives its keys an empty hash tag", resource)
	}
	return nil
}

// ttlMillis validates a TTL and converts it to whole milliseconds,
// rounding down.
func ttlMillis(ttl time.Duration) (int64, error) {
	if ttl < time.Millisecond {
		return 0, invalidArg("ttl %v is below 1ms", ttl)
	}
	return ttl.Milliseconds(), nil
}

func (l *Locker) check(resource string) error {
	if l == nil {
		return invalidArg("nil Locker")
	}
	if l.err != nil {
		return l.err
	}
	if l.client == nil {
		return invalidArg("Locker has no redis client: make it with New")
	}
	return checkResource(l.prefix, resource)
}

// newLock returns an ungranted Lock on resource with a fresh random
// 128-bit owner nonce, hex-encoded and followed by ':', the separator
// between the nonce and the token in the lock key's value.
func (l *Locker) newLock(resource string) (*Lock, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("fencedlock: reading random owner nonce: %w", err)
	}
	nonce := hex.EncodeToString(b[:])
	return &Lock{
		locker:   l,
		resource: resource,
		keys:     [3]string{l.LockKey(resource), l.TokenKey(resource), l.key(resource, "abandoned:"+nonce)},
		owner:    nonce + ":",
	}, nil
}

// TryAcquire makes one attempt to lock resource for ttl, in one round trip
// to Redis. On success the Lock carries a fresh token, higher than every
// token granted on resource before. When another owner holds the lock it
// returns an error wrapping ErrNotAcquired.
//
// ttl must be at least one millisecond; it is rounded down to whole
// milliseconds. A done ctx returns its error at once.
//
// A lost reply does not leave an orphaned lock. The script is idempotent
// for its owner: when the client sends it again (go-redis retries after a
// network error) a lock already granted to this attempt is returned again,
// with its token. When no reply arrives at all (every retry failed, or ctx
// ended while the command was in flight), TryAcquire returns the error and,
// as a best effort within a short detached timeout, deletes the lock the
// attempt may have been granted and leaves a marker that makes Redis
// refuse any copy of the attempt still on its way. If that fails too, a
// grant may stay locked until its TTL runs out, and the returned error
// says so.
//
// One case is not covered: when the client sends the command again while
// the first copy is held up in the network (go-redis does after
// ReadTimeout), and the second copy finds the lock held, TryAcquire returns
// ErrNotAcquired and sets no marker; should the first copy arrive after the
// holder released, it locks the resource until ttl passes, with nobody
// holding the Lock. Fencing is unaffected: no write carries that grant's
// token.
func (l *Locker) TryAcquire(ctx context.Context, resource string, ttl time.Duration) (*Lock, error) {
	if err := l.check(resource); err != nil {
		return nil, err
	}
	ms, err := ttlMillis(ttl)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("fencedlock: acquire %q: %w", resource, err)
	}
	lock, err := l.newLock(resource)
	if err != nil {
		return nil, err
	}
	granted, _, err := l.attempt(ctx, lock, ms)
	if err != nil {
		return nil, err
	}
	if !granted {
		return nil, fmt.Errorf("%w: %q is held by another owner", ErrNotAcquired, resource)
	}
	return lock, nil
}

// attempt runs the acquire script once for an ungranted lock. When
// granted it sets lock's token and reports true; when the lock is held it
// reports false and the holder's remaining TTL.
func (l *Locker) attempt(ctx context.Context, lock *Lock, ms int64) (bool, time.Duration, error) {
	res, err := acquireScript.Run(ctx, l.client, lock.keys[:], lock.owner, ms).Slice()
	if err != nil {
		err = scriptErr("acquire", lock.resource, err, lock.keys[:2]...)
		if !isServerError(err) {
			// The grant may have happened with its reply lost, or the
			// request may still be on its way: free the lock, or mark the
			// attempt abandoned so that the script refuses it on arrival.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
			// At most the longest time.Duration: ms came from one.
			markerMS := min(ms+abandonMarkerTTL.Milliseconds(), math.MaxInt64/int64(time.Millisecond))
			cerr := abandonScript.Run(cctx, l.client, []string{lock.keys[0], lock.keys[2]}, lock.owner, markerMS).Err()
			cancel()
			if cerr != nil {
				err = fmt.Errorf("%w (releasing the grant the lost reply may have carried failed too, so it may stay locked until its TTL ends: %v)", err, cerr)
			}
		}
		return false, 0, err
	}
	if len(res) != 2 {
		return false, 0, fmt.Errorf("fencedlock: acquire %q: unexpected reply %v", lock.resource, res)
	}
	if granted, _ := res[0].(int64); granted != 1 {
		pttl, _ := res[1].(int64)
		if pttl == -3 {
			return false, 0, fmt.Errorf("fencedlock: acquire %q: attempt was abandoned", lock.resource)
		}
		return false, time.Duration(pttl) * time.Millisecond, nil
	}
	token, err := tokenFromReply(res[1])
	if err != nil {
		return false, 0, fmt.Errorf("fencedlock: acquire %q: %w", lock.resource, err)
	}
	lock.token = token
	return true, 0, nil
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

// AcquireOption configures one call of Acquire.
type AcquireOption func(*acquireConfig)

type acquireConfig struct {
	minDelay, maxDelay time.Duration
}

// Default retry delays of Acquire.
const (
	DefaultMinRetryDelay = 2 * time.Millisecond
	DefaultMaxRetryDelay = 64 * time.Millisecond
)

// WithRetryDelay sets the bounds of the delay between Acquire's attempts
// while the lock is held. The delay starts at minDelay and doubles up to
// maxDelay, each wait drawn at random from its upper half, and no wait
// outlasts the holder's remaining TTL (plus the millisecond PTTL rounds
// away), so an expired lock is taken at once. Defaults: DefaultMinRetryDelay and
// DefaultMaxRetryDelay. A minDelay below 1ms is raised to 1ms and a
// maxDelay below minDelay is raised to minDelay.
func WithRetryDelay(minDelay, maxDelay time.Duration) AcquireOption {
	return func(c *acquireConfig) { c.minDelay, c.maxDelay = minDelay, maxDelay }
}

// Acquire locks resource for ttl, waiting while another owner holds it,
// until it gets the lock or ctx is done. On success the Lock carries a
// fresh token, higher than every token granted on resource before. When
// ctx ends first it returns an error that wraps both ErrNotAcquired and
// ctx.Err(). Errors other than a held lock (a Redis failure, bad input)
// end the wait at once.
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
	if cfg.minDelay < time.Millisecond {
		cfg.minDelay = time.Millisecond
	}
	if cfg.maxDelay < cfg.minDelay {
		cfg.maxDelay = cfg.minDelay
	}
	lock, err := l.newLock(resource)
	if err != nil {
		return nil, err
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for delay := cfg.minDelay; ; delay = nextDelay(delay, cfg.maxDelay) {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%w: %q: %w", ErrNotAcquired, resource, err)
		}
		granted, holderTTL, err := l.attempt(ctx, lock, ms)
		if err != nil {
			// When ctx ended, say so with both sentinels, and keep the
			// attempt's error: it may report a failed cleanup.
			ctxErr := ctx.Err()
			switch {
			case ctxErr == nil:
				return nil, err
			case errors.Is(err, ctxErr):
				return nil, fmt.Errorf("%w: %w", ErrNotAcquired, err)
			default:
				return nil, fmt.Errorf("%w: %w: %w", ErrNotAcquired, ctxErr, err)
			}
		}
		if granted {
			return lock, nil
		}
		wait := delay/2 + time.Duration(mrand.Int63n(int64(delay/2)+1))
		// PTTL counts whole milliseconds left, rounded down: 0 is the last
		// one. A negative PTTL is a key without expiry: no bound.
		if bound := holderTTL + time.Millisecond; holderTTL >= 0 && bound < wait {
			wait = bound
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %q: %w", ErrNotAcquired, resource, ctx.Err())
		case <-timer.C:
		}
	}
}

// nextDelay doubles delay up to maxDelay, without overflowing.
func nextDelay(delay, maxDelay time.Duration) time.Duration {
	if delay > maxDelay/2 {
		return maxDelay
	}
	return 2 * delay
}

// maxFloor is the highest floor Advance takes: the counter must stay
// below 2^63-1 for INCR to raise it.
const maxFloor = math.MaxInt64 - 1

// Advance raises resource's token counter so that the next token granted
// is higher than floor. A counter already at or above floor is left alone.
//
// Use it when a store rejects a write with a *StaleTokenError whose Current
// is not below the tokens this Locker grants: the counter was lost and the
// Redis clock that re-seeded it is behind. floor must be from 1 to
// 2^63-2; otherwise the error wraps ErrInvalidToken and nothing changes.
// A missing counter is seeded from the Redis clock as on acquire, but
// never below floor. Tokens above MaxRedisStoreToken are refused by a
// RedisStore: a floor taken from a RedisStore's Current never gets there.
func (l *Locker) Advance(ctx context.Context, resource string, floor Token) error {
	if err := l.check(resource); err != nil {
		return err
	}
	if floor == 0 || floor > maxFloor {
		return fmt.Errorf("%w: floor %d is outside 1..%d", ErrInvalidToken, floor, uint64(maxFloor))
	}
	err := advanceScript.Run(ctx, l.client, []string{l.TokenKey(resource)}, floor.String()).Err()
	if err != nil {
		return scriptErr("advance", resource, err, l.TokenKey(resource))
	}
	return nil
}

// Lock is a granted lock on one resource, with the fencing token of its
// grant. Pass Token with every write to the protected resource.
//
// Get a Lock from a Locker. The methods of a nil or zero Lock return
// errors wrapping ErrInvalidArgument (Resource and Token return zero
// values).
//
// A Lock is safe for concurrent use by multiple goroutines.
type Lock struct {
	locker   *Locker
	resource string
	keys     [3]string // lock key, token key, abandon marker of the acquire attempt
	owner    any       // 128-bit random nonce in hex and ':', the start of the lock key's value; boxed once for script arguments
	token    Token     // zero until granted
}

// Resource returns the name of the locked resource.
func (k *Lock) Resource() string {
	if k == nil {
		return ""
	}
	return k.resource
}

// Token returns the fencing token of this grant. It does not change for
// the life of the Lock: Refresh keeps it.
func (k *Lock) Token() Token {
	if k == nil {
		return 0
	}
	return k.token
}

// Refresh sets the lock's TTL to ttl from now, if this Lock still holds
// it. Otherwise (the key expired, was deleted, or holds another owner's
// value or a value of another type) it returns an error wrapping
// ErrLockLost and changes nothing. ttl must be at least one millisecond.
func (k *Lock) Refresh(ctx context.Context, ttl time.Duration) error {
	if err := k.check(); err != nil {
		return err
	}
	ms, err := ttlMillis(ttl)
	if err != nil {
		return err
	}
	n, err := refreshScript.Run(ctx, k.locker.client, k.keys[:1], k.owner, ms).Int64()
	if err != nil {
		return scriptErr("refresh", k.resource, err, k.keys[0])
	}
	if n != 1 {
		return k.lost()
	}
	return nil
}

// Release deletes the lock if this Lock still holds it. Otherwise it
// returns an error wrapping ErrLockLost and changes nothing: a late Release
// never frees another owner's lock. Release is bounded by ctx; to release
// after ctx is done (in a deferred cleanup, say), pass a short detached
// context: context.WithTimeout(context.WithoutCancel(ctx), time.Second).
//
// When the reply to a Release is lost and the client sends it again, the
// second run finds the key gone and Release reports ErrLockLost although
// the first run deleted it. Either way this Lock no longer holds the lock.
func (k *Lock) Release(ctx context.Context) error {
	if err := k.check(); err != nil {
		return err
	}
	n, err := releaseScript.Run(ctx, k.locker.client, k.keys[:1], k.owner).Int64()
	if err != nil {
		return scriptErr("release", k.resource, err, k.keys[0])
	}
	if n != 1 {
		return k.lost()
	}
	return nil
}

// TTL returns the lock's remaining time to live in Redis, if this Lock
// still holds it; otherwise an error wrapping ErrLockLost. It is a
// measurement, not a safety check: the lock can expire right after it
// returns. Only the store's token check is safe.
func (k *Lock) TTL(ctx context.Context) (time.Duration, error) {
	if err := k.check(); err != nil {
		return 0, err
	}
	ms, err := pttlScript.Run(ctx, k.locker.client, k.keys[:1], k.owner).Int64()
	if err != nil {
		return 0, scriptErr("ttl", k.resource, err, k.keys[0])
	}
	if ms == -3 {
		return 0, k.lost()
	}
	if ms < 0 {
		return 0, fmt.Errorf("fencedlock: ttl %q: lock key has no expiry (pttl %d)", k.resource, ms)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

func (k *Lock) check() error {
	if k == nil || k.locker == nil || k.locker.client == nil {
		return invalidArg("nil or zero Lock: use one returned by a Locker")
	}
	return nil
}

func (k *Lock) lost() error {
	return fmt.Errorf("%w: %q (token %d)", ErrLockLost, k.resource, k.token)
}

// String describes the lock for logs: resource and token, not the owner
// nonce.
func (k *Lock) String() string {
	if k == nil {
		return "fencedlock.Lock(nil)"
	}
	return "fencedlock.Lock{" + strconv.Quote(k.resource) + " token " + k.token.String() + "}"
}
