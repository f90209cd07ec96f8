package fencedlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
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

// Locker grants fenced locks on resources named by strings. All lock state
// is in Redis, so Lockers in many processes sharing one Redis (and one
// prefix) coordinate with each other. In the process, a Locker keeps only
// its queues of waiting goroutines and its pub/sub subscription, which it
// opens when a goroutine has to wait and closes a second after the last
// one stopped waiting.
//
// Make a Locker with New. The zero Locker has no client: its methods
// return errors wrapping ErrInvalidArgument.
//
// A Locker is safe for concurrent use by multiple goroutines.
type Locker struct {
	client redis.UniversalClient
	prefix string
	err    error // set by New for a configuration that cannot work

	replicas *replicaWait // set by WithReplicas

	mu      sync.Mutex             // guards the fields below
	queues  map[string]*waitQueue  // local waiters by resource
	subs    map[uint16]*subscriber // subscriptions by group (see subGroup)
	sharded int8                   // 0: not known yet; 1: SSUBSCRIBE; -1: SUBSCRIBE
}

// Option configures a Locker in New: WithPrefix, WithReplicas. A nil
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
	switch {
	case isNil(client):
		l.err = invalidArg("nil redis client")
	case l.replicas != nil:
		l.err = l.replicas.check(client)
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
	if err := l.ready(); err != nil {
		return err
	}
	return checkResource(l.prefix, resource)
}

// ready reports why l cannot contact Redis, or nil when it can.
func (l *Locker) ready() error {
	if l == nil {
		return invalidArg("nil Locker")
	}
	if l.err != nil {
		return l.err
	}
	if l.client == nil {
		return invalidArg("Locker has no redis client: make it with New")
	}
	return nil
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
	k := &Lock{locker: l, resource: resource, owner: nonce + ":"}
	// One allocation for all the names: the keys are slices of it.
	base := keyFor(l.prefix, resource, "")
	all := base + "lock" + base + "token" + base + "queue" + base + "deadlines" + base + "abandoned:" + nonce + base + "grants"
	for i, n := range [...]int{len("lock"), len("token"), len("queue"), len("deadlines"), len("abandoned:") + len(nonce)} {
		k.keys[i], all = all[:len(base)+n], all[len(base)+n:]
	}
	k.channel = all
	return k, nil
}

// Indexes into Lock.keys.
const (
	keyLock = iota
	keyToken
	keyQueue
	keyDeadlines
	keyMarker
)

// TryAcquire makes one attempt to lock resource for ttl, in one round trip
// to Redis. On success the Lock carries a fresh token, higher than every
// token granted on resource before. When another owner holds the lock, or
// it is free but promised to a waiter queued by Acquire, it returns an
// error wrapping ErrNotAcquired.
//
// ttl must be at least one millisecond; it is rounded down to whole
// milliseconds. A done ctx returns its error at once. With WithReplicas,
// a grant is returned only once replicas have confirmed it.
//
// A lost reply does not leave an orphaned lock. The script is idempotent
// for its owner: when the client sends it again (go-redis retries after a
// network error) a lock already granted to this attempt is returned again,
// with its token. When no reply arrives at all (every retry failed, or ctx
// ended while the command was in flight), TryAcquire returns the error and,
// as a best effort within a short detached timeout, releases the lock the
// attempt may have been granted (handing it to the next waiter, as Release
// does) and leaves a marker that makes Redis refuse any copy of the
// attempt still on its way. If that fails too, a
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
	sent := time.Now()
	granted, _, err := l.attempt(ctx, lock, ms, 0)
	if err != nil {
		return nil, err
	}
	if !granted {
		return nil, fmt.Errorf("%w: %q is held by another owner or promised to a waiter", ErrNotAcquired, resource)
	}
	lock.hold(sent, ttl)
	if err := l.replicate(ctx, lock, ttl); err != nil {
		return nil, err
	}
	return lock, nil
}

// attempt runs the acquire script once for an ungranted lock. When
// granted it sets lock's token and reports true; when not, it reports
// what the refusal said. life is 0 for a single attempt; for a waiter, it
// is how long its place in the queue lasts without another attempt.
func (l *Locker) attempt(ctx context.Context, lock *Lock, ms int64, life time.Duration) (bool, refusal, error) {
	var lifeArg any = ""
	if life > 0 {
		lifeArg = life.Milliseconds()
	}
	res, err := acquireScript.Run(ctx, l.client, lock.keys[:], lock.owner, ms, lifeArg).Slice()
	if err != nil {
		err = scriptErr("acquire", lock.resource, err, lock.keys[keyLock], lock.keys[keyToken], lock.keys[keyQueue], lock.keys[keyDeadlines])
		if !isServerError(err) {
			// The grant may have happened with its reply lost, or the
			// request may still be on its way: free the lock, or mark the
			// attempt abandoned so that the script refuses it on arrival.
			// At most the longest time.Duration: ms came from one.
			markerMS := min(ms+abandonMarkerTTL.Milliseconds(), math.MaxInt64/int64(time.Millisecond))
			if cerr := lock.giveUp(ctx, ms, life > 0, markerMS); cerr != nil {
				err = fmt.Errorf("%w (releasing the grant the lost reply may have carried failed too, so it may stay locked until its TTL ends: %v)", err, cerr)
			}
		}
		return false, refusal{}, err
	}
	if len(res) < 2 {
		return false, refusal{}, fmt.Errorf("fencedlock: acquire %q: unexpected reply %v", lock.resource, res)
	}
	if ok, _ := res[0].(int64); ok != 1 {
		left, _ := res[1].(int64)
		if left == -3 {
			return false, refusal{}, fmt.Errorf("fencedlock: acquire %q: attempt was abandoned", lock.resource)
		}
		r := refusal{wait: time.Duration(left) * time.Millisecond}
		if len(res) == 4 {
			// Unparsable values (a counter of another type) stay 0: no
			// floor, no reservation.
			r.floor, _ = tokenFromReply(res[2])
			r.reserved, _ = tokenFromReply(res[3])
		}
		return false, r, nil
	}
	token, err := tokenFromReply(res[1])
	if err != nil {
		return false, refusal{}, fmt.Errorf("fencedlock: acquire %q: %w", lock.resource, err)
	}
	lock.token = token
	return true, refusal{}, nil
}

// refusal is what a refused acquire attempt learned.
type refusal struct {
	// wait is how long until the lock may be free: the holder's PTTL, or
	// the remaining life of the waiter ahead; negative for a lock key
	// without expiry.
	wait time.Duration
	// floor is the token counter before the attempt ran: every grant made
	// before has a token at or below it.
	floor Token
	// reserved is the token reserved for the waiter, first in the queue,
	// or 0.
	reserved Token
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
	return l.advance(ctx, "resource", resource, l.TokenKey(resource), floor)
}

// advance raises the token counter at key above floor. what and name say
// whose counter it is, for errors.
func (l *Locker) advance(ctx context.Context, what, name, key string, floor Token) error {
	if floor == 0 || floor > maxFloor {
		return fmt.Errorf("%w: floor %d for %s %q is outside 1..%d", ErrInvalidToken, floor, what, name, uint64(maxFloor))
	}
	if err := advanceScript.Run(ctx, l.client, []string{key}, floor.String()).Err(); err != nil {
		return scriptErr("advance", name, err, key)
	}
	return nil
}
