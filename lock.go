package fencedlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock/internal/call"
	"github.com/fencedlock/fencedlock/internal/names"
	"github.com/fencedlock/fencedlock/internal/script"
	"github.com/fencedlock/fencedlock/internal/wait"
	"github.com/fencedlock/fencedlock/observe"
)

// DefaultPrefix is the key prefix a Locker and a RedisStore use unless
// WithPrefix or WithStorePrefix sets another.
const DefaultPrefix = "fencedlock"

// Locker grants fenced locks on resources named by strings. All lock state
// is in Redis, so Lockers in many processes sharing one Redis (and one
// prefix) coordinate with each other. In the process, a Locker keeps only
// its waiting room (the goroutines waiting in Acquire, queued per
// resource, and its pub/sub subscription, which it opens when a goroutine
// has to wait and closes a second after the last one stopped waiting),
// and the grants of other libraries that IssueToken issued tokens to
// while their lock keys may hold them.
//
// Make a Locker with New. The zero Locker has no client: its methods
// return errors wrapping ErrInvalidArgument.
//
// A Locker is safe for concurrent use by multiple goroutines.
type Locker struct {
	client redis.UniversalClient
	heeds  bool // client ends round trips at ctx deadlines: see call.Heeds
	// resends is that the client may send a command again after its
	// connection failed: see call.Resends
	resends bool
	// redirects is that the client follows Cluster redirects: see
	// call.FollowsRedirects
	redirects bool
	prefix    string
	err       error // set by New for a configuration that cannot work

	replicas *replicaWait                  // set by WithReplicas
	idle     time.Duration                 // set by WithIdleExpiry
	idleArg  any                           // idle in milliseconds, boxed once for the scripts
	ttlArgs  boxedMS                       // the last TTL in milliseconds an attempt sent, boxed
	lifeArgs boxedMS                       // the last life of a waiter's place an attempt sent, boxed
	names    atomic.Pointer[resourceNames] // the names of the resource of the last Lock made (see Locker.lock)
	logger   *slog.Logger                  // set by WithLogger
	observer observe.Observer              // set by WithObserver
	cleanups *call.Cleanups                // the cleanups running in the background
	room     *wait.Room                    // the goroutines waiting in Acquire, and their subscription
	id       string                        // 16 random hex digits: the start of its Locks' owner nonces, and the end of its channels' names
	issued   issuedGrants                  // the grants whose tokens' keys IssueToken keeps
}

// Option configures a Locker in New: WithPrefix, WithReplicas,
// WithIdleExpiry, WithLogger, WithObserver. A nil Option is ignored.
type Option func(*Locker)

// WithPrefix sets the namespace of the Locker's keys: the keys of a
// resource R begin "<prefix>:{R}:" ("{R}:" with the empty prefix), as
// listed in https://github.com/fencedlock/fencedlock/blob/main/docs/redis.md.
// The default is DefaultPrefix. Lockers that must exclude each other need
// the same prefix. A prefix whose first "{" is followed at once by "}"
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
	l := &Locker{client: client, heeds: call.Heeds(client), resends: call.Resends(client), redirects: call.FollowsRedirects(client), prefix: DefaultPrefix, idle: DefaultIdleExpiry}
	for _, opt := range opts {
		if opt != nil {
			opt(l)
		}
	}
	l.cleanups = call.NewCleanups(l.warn)
	var log wait.Log
	if l.logger != nil {
		log = wait.Log{Warn: l.logger.Warn, Debug: l.logger.Debug}
	}
	l.room = wait.New(client, log)
	var id [8]byte
	_, _ = rand.Read(id[:]) // never fails (see crypto/rand.Read)
	l.id = hex.EncodeToString(id[:])
	l.idleArg = l.idle.Milliseconds()
	switch {
	case isNil(client):
		l.err = invalidArg("nil redis client")
	case l.idle < 0 || (l.idle > 0 && l.idle < time.Second):
		l.err = invalidArg("WithIdleExpiry(%v): the idle expiry must be 0 (none) or at least 1s", l.idle)
	case l.replicas != nil:
		l.err = l.replicas.check(client)
	}
	return l
}

// DefaultIdleExpiry is the idle expiry of a Locker's keys unless
// WithIdleExpiry sets another.
const DefaultIdleExpiry = 24 * time.Hour

// WithIdleExpiry makes the token counter the Locker keeps for a resource,
// and the keys IssueToken keeps for a lock key, expire once the resource
// or lock key has been idle for d: no lock held, nobody waiting, no grant
// or token issued in the last d. The default is DefaultIdleExpiry; 0
// keeps them for ever. The Locker's other keys expire on their own
// whatever d is, and values in a RedisStore never expire. A negative d,
// or one below one second, makes every call of the Locker return an error
// wrapping ErrInvalidArgument.
//
// Safety does not move: an expired counter is seeded again from the Redis
// server clock, as after FLUSHALL, so the next token is above every
// earlier one, provided the server clock does not step back by more than
// d. A counter ahead of the clock expires that much later, or never when
// it is more than 30 days ahead (raised by Advance to a huge token, say).
// Every key and its expiry are listed in
// https://github.com/fencedlock/fencedlock/blob/main/docs/redis.md.
func WithIdleExpiry(d time.Duration) Option {
	return func(l *Locker) { l.idle = d }
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

func (l *Locker) key(resource, kind string) string {
	return keyFor(l.prefix, resource, kind)
}

// Client returns the client the Locker was made with, so that code that
// keeps its own keys beside the locks (package election, a RedisStore)
// shares its connections, its ACL user and its topology.
func (l *Locker) Client() redis.UniversalClient {
	if l == nil {
		return nil
	}
	return l.client
}

// Key returns the name of the key "<prefix>:{<resource>}:<suffix>" (or
// "{<resource>}:<suffix>" with the empty prefix): a key beside resource's
// lock keys, under the Locker's prefix and in their Redis Cluster hash
// slot, so that a script of your own may touch it together with them. Its
// error wraps ErrInvalidArgument when the Locker's calls on resource
// would (an empty or too long name, an empty hash tag, a Locker not made
// by New), or when suffix is empty. The suffixes the Locker uses itself
// are listed in
// https://github.com/fencedlock/fencedlock/blob/main/docs/redis.md#keys:
// use others for keys of your own.
func (l *Locker) Key(resource, suffix string) (string, error) {
	if err := l.check(resource); err != nil {
		return "", err
	}
	if suffix == "" {
		return "", invalidArg("empty key suffix for resource %s", names.Quote(resource))
	}
	return l.key(resource, suffix), nil
}

func keyFor(prefix, resource, kind string) string {
	var b strings.Builder
	b.Grow(keyBaseLen(prefix, resource) + len(kind))
	writeKeyBase(&b, prefix, resource)
	b.WriteString(kind)
	return b.String()
}

// writeKeyBase writes what every key of resource starts with under
// prefix: "prefix:{resource}:", or "{resource}:" without a prefix (the
// braces make Redis Cluster put them in one hash slot).
func writeKeyBase(b *strings.Builder, prefix, resource string) {
	if prefix != "" {
		b.WriteString(prefix)
		b.WriteByte(':')
	}
	b.WriteByte('{')
	b.WriteString(resource)
	b.WriteString("}:")
}

// keyBaseLen is the length of what writeKeyBase writes.
func keyBaseLen(prefix, resource string) int {
	n := len(resource) + len("{}:")
	if prefix != "" {
		n += len(prefix) + 1
	}
	return n
}

// checkName validates the length of a resource name.
func checkName(resource string) error {
	if resource == "" {
		return invalidArg("empty resource name")
	}
	if len(resource) > MaxResourceLen {
		return invalidArg("resource name %s is longer than MaxResourceLen (%d bytes)", names.Quote(resource), MaxResourceLen)
	}
	return nil
}

// checkResource validates a resource name and the hash tag its keys get.
func checkResource(prefix, resource string) error {
	if err := checkName(resource); err != nil {
		return err
	}
	// Redis Cluster hashes the text between the first "{" and the next
	// "}" of a key. An empty tag makes it hash whole keys, which would put
	// the keys of one resource in different slots. The first "{" is the
	// prefix's, if it has one, else the one before the resource.
	if i := strings.IndexByte(prefix, '{'); i >= 0 {
		if i+1 < len(prefix) && prefix[i+1] == '}' {
			return invalidArg("prefix %s gives keys an empty hash tag", names.Quote(prefix))
		}
	} else if resource[0] == '}' {
		return invalidArg("resource %s begins with \"}\", which gives its keys an empty hash tag", names.Quote(resource))
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
// never below floor.
//
// A counter holding what the library did not write returns an error
// wrapping ErrCorrupt, and nothing changes. When Redis cannot be reached
// or does not answer before ctx ends, the error wraps ErrUnavailable and
// the counter may or may not have been raised: calling Advance again is
// safe.
func (l *Locker) Advance(ctx context.Context, resource string, floor Token) error {
	if err := l.check(resource); err != nil {
		return err
	}
	return l.advance(ctx, "resource", resource, l.key(resource, "token"), floor)
}

// advance raises the token counter at key above floor. what and name say
// whose counter it is, for errors.
func (l *Locker) advance(ctx context.Context, what, name, key string, floor Token) error {
	if floor == 0 || floor > maxFloor {
		return fmt.Errorf("%w: floor %d for %s %s is outside 1..%d", ErrInvalidToken, floor, what, names.Quote(name), uint64(maxFloor))
	}
	res, err := call.Bounded(ctx, l.heeds, func(ctx context.Context) (any, error) {
		return advanceScript.Run(ctx, l.client, script.Keys(key), floor.String(), l.idleArg).Result()
	})
	if err != nil {
		return redisErr(ctx, "advance", name, err, key)
	}
	if _, err := decodeAdvance(res, floor); err != nil {
		return fmt.Errorf("fencedlock: advance %s %s: %w", what, names.Quote(name), err)
	}
	return nil
}

// advanceReply is the reply of advance.lua, decoded.
type advanceReply struct {
	counter Token // the counter's value afterwards
}

// decodeAdvance decodes the reply of advance.lua for floor: the counter's
// value, at or above floor.
func decodeAdvance(res any, floor Token) (advanceReply, error) {
	if s, ok := res.(string); ok {
		if c, err := ParseToken(s); err == nil && c >= floor {
			return advanceReply{counter: c}, nil
		}
	}
	return advanceReply{}, fmt.Errorf("unexpected reply %v", res)
}

// boxedMS keeps the last count of milliseconds a script was sent, boxed:
// a Locker's callers mostly ask for the same TTL, so its attempts box it
// once, not once each.
type boxedMS struct{ last atomic.Pointer[msArg] }

type msArg struct {
	ms  int64
	arg any
}

// box returns ms boxed, as the last call did when it was the same.
func (b *boxedMS) box(ms int64) any {
	if p := b.last.Load(); p != nil && p.ms == ms {
		return p.arg
	}
	p := &msArg{ms: ms, arg: ms}
	b.last.Store(p)
	return p.arg
}
