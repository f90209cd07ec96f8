package fencedlock

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock/internal/names"
)

// Store is a resource protected by fencing tokens. Every write carries the
// writer's token and the store applies the rule of CheckToken to it,
// atomically with the write.
//
// Implementations must be safe for concurrent use, and pass the
// conformance suite in package fencetest.
type Store interface {
	// Put stores value for resource if token is greater than or equal to
	// the token stored with the resource's current value, and stores token
	// next to it in the same atomic step. A lower token returns a
	// *StaleTokenError and changes nothing; so do a zero token (an error
	// wrapping ErrInvalidToken) and an empty resource or one longer than
	// MaxResourceLen (ErrInvalidArgument).
	//
	// When the store's backend cannot be reached or does not answer before
	// ctx ends, the error wraps ErrUnavailable. After such an error the
	// write may or may not have happened. Putting the same value with the same token again
	// is safe: an equal token passes. For the same reason a Put that the
	// client sent again after a lost reply can return a *StaleTokenError
	// although its first delivery was stored before a newer writer's: make
	// the operation behind a write idempotent, or turn off the client's
	// retries for the store.
	Put(ctx context.Context, resource string, token Token, value []byte) error

	// Get returns resource's value and the token that wrote it, or an
	// error wrapping ErrNotFound when nothing was written.
	Get(ctx context.Context, resource string) (value []byte, token Token, err error)
}

// MemoryStore is a Store in process memory, for tests and single-process
// programs. The zero value is an empty store, ready to use.
//
// A MemoryStore is safe for concurrent use by multiple goroutines.
type MemoryStore struct {
	mu   sync.Mutex
	data map[string]memoryEntry // guarded by mu
}

type memoryEntry struct {
	value []byte
	token Token
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{data: make(map[string]memoryEntry)}
}

// Put implements Store. It keeps a copy of value. With a ctx already done
// it returns ctx.Err() and stores nothing: there is no backend to be
// unavailable.
func (s *MemoryStore) Put(ctx context.Context, resource string, token Token, value []byte) error {
	if err := checkName(resource); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.data == nil {
		s.data = make(map[string]memoryEntry)
	}
	if err := CheckToken(resource, token, s.data[resource].token); err != nil {
		return err
	}
	s.data[resource] = memoryEntry{value: append([]byte{}, value...), token: token}
	return nil
}

// Get implements Store. It returns a copy of the value. With a ctx already
// done it returns ctx.Err().
func (s *MemoryStore) Get(ctx context.Context, resource string) ([]byte, Token, error) {
	if err := checkName(resource); err != nil {
		return nil, 0, err
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	s.mu.Lock()
	e, ok := s.data[resource]
	s.mu.Unlock()
	if !ok {
		return nil, 0, fmt.Errorf("%w: %s", ErrNotFound, names.Quote(resource))
	}
	return append([]byte{}, e.value...), e.token, nil
}

// RedisStore is a Store that keeps each resource's value and token in one
// Redis hash, "<prefix>:{<resource>}:value", in the same hash slot as the
// resource's lock keys when the prefixes match. Put is one round trip.
//
// Make a RedisStore with NewRedisStore. The zero RedisStore has no
// client: its methods return errors wrapping ErrInvalidArgument.
//
// A RedisStore is safe for concurrent use by multiple goroutines.
type RedisStore struct {
	client redis.UniversalClient
	prefix string
	err    error // set by NewRedisStore for a configuration that cannot work
}

// StoreOption configures a RedisStore in NewRedisStore. The one option is
// WithStorePrefix; a nil StoreOption is ignored.
type StoreOption func(*RedisStore)

// WithStorePrefix sets the namespace of the store's keys. The default is
// DefaultPrefix; an empty prefix gives "{<resource>}:value". A prefix
// holding "{}" would give every key an empty Redis Cluster hash tag; with
// it, Put and Get return an error wrapping ErrInvalidArgument.
func WithStorePrefix(prefix string) StoreOption {
	return func(s *RedisStore) { s.prefix = prefix }
}

// NewRedisStore returns a RedisStore that keeps its values in the Redis
// behind client. It does not contact Redis. A nil client does not panic:
// Put and Get return an error wrapping ErrInvalidArgument.
func NewRedisStore(client redis.UniversalClient, opts ...StoreOption) *RedisStore {
	s := &RedisStore{client: client, prefix: DefaultPrefix}
	for _, opt := range opts {
		if opt != nil {
			opt(s)
		}
	}
	if isNil(client) {
		s.err = invalidArg("nil redis client")
	}
	return s
}

func (s *RedisStore) check(resource string) error {
	if s == nil {
		return invalidArg("nil RedisStore")
	}
	if s.err != nil {
		return s.err
	}
	if s.client == nil {
		return invalidArg("RedisStore has no redis client: make it with NewRedisStore")
	}
	return checkResource(s.prefix, resource)
}

// Put implements Store in one round trip. It takes every token from 1 to
// 2^64-1; the zero token is refused with an error wrapping
// ErrInvalidToken.
func (s *RedisStore) Put(ctx context.Context, resource string, token Token, value []byte) error {
	if err := s.check(resource); err != nil {
		return err
	}
	if token == 0 {
		return fmt.Errorf("%w: token 0 for resource %s: tokens start at 1", ErrInvalidToken, names.Quote(resource))
	}
	key := keyFor(s.prefix, resource, "value")
	res, err := bounded(ctx, func(ctx context.Context) ([]any, error) {
		return putScript.run(ctx, s.client, boxKeys(key), token.String(), value).Slice()
	})
	if err != nil {
		return redisErr(ctx, "put", resource, err, key)
	}
	if len(res) == 1 {
		if n, _ := res[0].(int64); n == 1 {
			return nil
		}
	}
	if len(res) != 2 {
		return fmt.Errorf("fencedlock: put %s: unexpected reply %v", names.Quote(resource), res)
	}
	s2, _ := res[1].(string)
	current, err := ParseToken(s2)
	if err != nil {
		return fmt.Errorf("fencedlock: put %s: stored token: %w", names.Quote(resource), err)
	}
	// The script applied the rule; CheckToken builds the error it gives.
	if err := CheckToken(resource, token, current); err != nil {
		return err
	}
	return fmt.Errorf("fencedlock: put %s: script refused token %d against stored %d", names.Quote(resource), token, current)
}

// Get implements Store in one round trip.
func (s *RedisStore) Get(ctx context.Context, resource string) ([]byte, Token, error) {
	if err := s.check(resource); err != nil {
		return nil, 0, err
	}
	key := keyFor(s.prefix, resource, "value")
	res, err := bounded(ctx, func(ctx context.Context) ([]any, error) {
		return s.client.HMGet(ctx, key, "t", "v").Result()
	})
	if err != nil {
		return nil, 0, redisErr(ctx, "get", resource, err, key)
	}
	ts, ok := res[0].(string)
	if !ok {
		return nil, 0, fmt.Errorf("%w: %s", ErrNotFound, names.Quote(resource))
	}
	token, err := ParseToken(ts)
	if err != nil || ts != token.String() {
		return nil, 0, fmt.Errorf("%w: get %s: key %s holds token %q", ErrCorrupt, names.Quote(resource), names.Quote(key), ts)
	}
	v, _ := res[1].(string)
	return []byte(v), token, nil
}
