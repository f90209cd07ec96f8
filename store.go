package fencedlock

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock/internal/call"
	"github.com/fencedlock/fencedlock/internal/names"
	"github.com/fencedlock/fencedlock/internal/script"
)

// Store is a resource protected by fencing tokens. Every write carries the
// writer's token, and so does a holder's read before a write (Fence): the
// store remembers the highest token it has seen for each resource, its
// fence, and applies the rule of CheckToken to every Put and Fence
// against it, atomically with the write.
//
// Implementations must be safe for concurrent use, and pass the
// conformance suite in package fencetest.
type Store interface {
	// Put stores value for resource if token is greater than or equal to
	// the resource's fence, and raises the fence to token, in the same
	// atomic step. A lower token returns a *StaleTokenError whose Current
	// is the fence, and changes nothing; so do a zero token (an error
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
	// error wrapping ErrNotFound when nothing was written (a resource that
	// was only fenced included). The token is the writer's, not the fence.
	// It reads every Put and Fence that returned before it was called,
	// and not a copy that may lag behind them (a replica): a holder's
	// Fence, Get and Put (as Update makes them) rely on it.
	Get(ctx context.Context, resource string) (value []byte, token Token, err error)

	// Fence raises resource's fence to token, as a Put with token would,
	// without writing a value: from then on every Put and Fence with a
	// lower token is refused with a *StaleTokenError whose Current is the
	// fence. An equal token passes; a lower one is refused the same way,
	// and the fence never goes down. A holder calls it before it reads
	// what it will write back, so that no stale holder's write can land
	// between its read and its write (Update does both). Its errors, and
	// the state after them, are those of Put.
	Fence(ctx context.Context, resource string, token Token) error
}

// MemoryStore is a Store in process memory, for tests and single-process
// programs. The zero value is an empty store, ready to use.
//
// A MemoryStore is safe for concurrent use by multiple goroutines.
type MemoryStore struct {
	mu   sync.Mutex
	data map[string]memoryEntry // guarded by mu
}

// memoryEntry is a resource of a MemoryStore: its fence, and the value
// and token of its last accepted Put, if any.
type memoryEntry struct {
	value   []byte
	token   Token
	fence   Token // at or above token
	written bool  // a Put was accepted
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{data: make(map[string]memoryEntry)}
}

// Put implements Store. It keeps a copy of value. With a ctx already done
// it returns ctx.Err() (with context.Cause(ctx) when the cause says more)
// and stores nothing: there is no backend to be unavailable.
func (s *MemoryStore) Put(ctx context.Context, resource string, token Token, value []byte) error {
	if err := checkName(resource); err != nil {
		return err
	}
	if err := call.Err(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.data == nil {
		s.data = make(map[string]memoryEntry)
	}
	if err := CheckToken(resource, token, s.data[resource].fence); err != nil {
		return err
	}
	s.data[resource] = memoryEntry{value: append([]byte{}, value...), token: token, fence: token, written: true}
	return nil
}

// Fence implements Store. With a ctx already done it returns ctx.Err()
// (with context.Cause(ctx) when the cause says more) and changes nothing.
func (s *MemoryStore) Fence(ctx context.Context, resource string, token Token) error {
	_, _, err := s.fence(ctx, resource, token, false)
	return err
}

// fence is Fence, and with read the fenced read of Update: it returns
// the value and whether one was written, as Fence left them.
func (s *MemoryStore) fence(ctx context.Context, resource string, token Token, read bool) ([]byte, bool, error) {
	if err := checkName(resource); err != nil {
		return nil, false, err
	}
	if err := call.Err(ctx); err != nil {
		return nil, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.data == nil {
		s.data = make(map[string]memoryEntry)
	}
	e := s.data[resource]
	if err := CheckToken(resource, token, e.fence); err != nil {
		return nil, false, err
	}
	if token > e.fence {
		e.fence = token
		s.data[resource] = e
	}
	if !read || !e.written {
		return nil, false, nil
	}
	return append([]byte{}, e.value...), true, nil
}

// Get implements Store. It returns a copy of the value. With a ctx already
// done it returns ctx.Err() (with context.Cause(ctx) when the cause says
// more).
func (s *MemoryStore) Get(ctx context.Context, resource string) ([]byte, Token, error) {
	if err := checkName(resource); err != nil {
		return nil, 0, err
	}
	if err := call.Err(ctx); err != nil {
		return nil, 0, err
	}
	s.mu.Lock()
	e := s.data[resource]
	s.mu.Unlock()
	if !e.written {
		return nil, 0, fmt.Errorf("%w: %s", ErrNotFound, names.Quote(resource))
	}
	return append([]byte{}, e.value...), e.token, nil
}

// RedisStore is a Store that keeps each resource's value, the token that
// wrote it and its fence in one Redis hash, "<prefix>:{<resource>}:value",
// in the same hash slot as the resource's lock keys when the prefixes
// match. Put, Get and Fence are one round trip each, and so is the fenced
// read of Update.
//
// Make a RedisStore with NewRedisStore. The zero RedisStore has no
// client: its methods return errors wrapping ErrInvalidArgument.
//
// A RedisStore is safe for concurrent use by multiple goroutines.
type RedisStore struct {
	client redis.UniversalClient
	heeds  bool // client ends round trips at ctx deadlines: see call.Heeds
	// replicas is that the client may send a plain read to a replica
	// (see call.ReadsReplicas): Get then reads with a script, which it
	// sends to the primary
	replicas bool
	prefix   string
	err      error // set by NewRedisStore for a configuration that cannot work
}

// StoreOption configures a RedisStore in NewRedisStore. The one option is
// WithStorePrefix; a nil StoreOption is ignored.
type StoreOption func(*RedisStore)

// WithStorePrefix sets the namespace of the store's keys. The default is
// DefaultPrefix; an empty prefix gives "{<resource>}:value". A prefix
// whose first "{" is followed at once by "}" would give every key an
// empty Redis Cluster hash tag; with it, Put and Get return an error
// wrapping ErrInvalidArgument.
func WithStorePrefix(prefix string) StoreOption {
	return func(s *RedisStore) { s.prefix = prefix }
}

// NewRedisStore returns a RedisStore that keeps its values in the Redis
// behind client. It does not contact Redis. A nil client does not panic:
// Put and Get return an error wrapping ErrInvalidArgument.
func NewRedisStore(client redis.UniversalClient, opts ...StoreOption) *RedisStore {
	s := &RedisStore{client: client, heeds: call.Heeds(client), replicas: call.ReadsReplicas(client), prefix: DefaultPrefix}
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

// check returns the error of a call with resource and, unless it is zero
// (a Get), token; nil when they can be sent.
func (s *RedisStore) check(resource string, token Token) error {
	if err := s.ready(resource); err != nil {
		return err
	}
	if token == 0 {
		return fmt.Errorf("%w: token 0 for resource %s: tokens start at 1", ErrInvalidToken, names.Quote(resource))
	}
	return nil
}

// ready returns the error of a call with resource, or nil when it can be
// sent.
func (s *RedisStore) ready(resource string) error {
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
	if err := s.check(resource, token); err != nil {
		return err
	}
	key := keyFor(s.prefix, resource, "value")
	res, err := call.Bounded(ctx, s.heeds, func(ctx context.Context) ([]any, error) {
		return putScript.Run(ctx, s.client, script.Keys(key), token.String(), value).Slice()
	})
	if err != nil {
		return redisErr(ctx, "put", resource, err, key)
	}
	r, err := decodePut(res)
	if err != nil {
		return fmt.Errorf("fencedlock: put %s: %w", names.Quote(resource), err)
	}
	if r.status == putStale {
		return staleError("put", resource, token, r.fence)
	}
	return nil
}

// Fence implements Store in one round trip, with the same token range
// as Put.
func (s *RedisStore) Fence(ctx context.Context, resource string, token Token) error {
	_, _, err := s.fence(ctx, resource, token, false)
	return err
}

// fence is Fence, and with read the fenced read of Update, in one round
// trip: it returns the value and whether one was written, as Fence left
// them.
func (s *RedisStore) fence(ctx context.Context, resource string, token Token, read bool) ([]byte, bool, error) {
	if err := s.check(resource, token); err != nil {
		return nil, false, err
	}
	key := keyFor(s.prefix, resource, "value")
	var readArg any = ""
	if read {
		readArg = "read"
	}
	res, err := call.Bounded(ctx, s.heeds, func(ctx context.Context) ([]any, error) {
		return fenceScript.Run(ctx, s.client, script.Keys(key), token.String(), readArg).Slice()
	})
	if err != nil {
		return nil, false, redisErr(ctx, "fence", resource, err, key)
	}
	r, err := decodeFence(res)
	if err != nil {
		return nil, false, fmt.Errorf("fencedlock: fence %s: %w", names.Quote(resource), err)
	}
	if r.status == fenceStale {
		return nil, false, staleError("fence", resource, token, r.fence)
	}
	if !read || !r.written {
		return nil, false, nil
	}
	if _, err := storedToken(resource, key, r.wrote); err != nil {
		return nil, false, err
	}
	return r.value, true, nil
}

// The statuses of put.lua's replies, named as in the script.
const (
	putStale  = 0 // STALE: the token is below the fence, which follows
	putStored = 1 // STORED: stored, and the fence is at the token
)

// putReply is a reply of put.lua, decoded.
type putReply struct {
	status int64 // putStored or putStale
	fence  Token // stale: the fence
}

// decodePut decodes a reply of put.lua: {STORED} or {STALE, fence}.
func decodePut(res []any) (putReply, error) {
	status, fence, err := decodeFenceStatus(res, putStored, putStale)
	return putReply{status: status, fence: fence}, err
}

// The statuses of fence.lua's replies, named as in the script.
const (
	fenceStale  = 0 // STALE: the token is below the fence, which follows
	fenceFenced = 1 // FENCED: the token is at or above the fence, which is now at it
)

// fenceReply is a reply of fence.lua, decoded.
type fenceReply struct {
	status int64 // fenceFenced or fenceStale
	fence  Token // stale: the fence
	// For a read that found a value: written is true, wrote the token
	// field as stored (unchecked) and value the value.
	written bool
	wrote   string
	value   []byte
}

// decodeFence decodes a reply of fence.lua: {FENCED}, {FENCED, token,
// value} (each false when no value was written) or {STALE, fence}.
func decodeFence(res []any) (fenceReply, error) {
	if len(res) != 3 {
		status, fence, err := decodeFenceStatus(res, fenceFenced, fenceStale)
		return fenceReply{status: status, fence: fence}, err
	}
	if status, _ := res[0].(int64); status != fenceFenced {
		return fenceReply{}, fmt.Errorf("unexpected reply %v", res)
	}
	r := fenceReply{status: fenceFenced}
	if wrote, ok := res[1].(string); ok {
		v, _ := res[2].(string)
		r.written, r.wrote, r.value = true, wrote, []byte(v)
	}
	return r, nil
}

// decodeFenceStatus decodes the replies put.lua and fence.lua share:
// {passed} or {stale, fence}.
func decodeFenceStatus(res []any, passed, stale int64) (int64, Token, error) {
	var status int64 = -1
	if len(res) > 0 {
		status, _ = res[0].(int64)
	}
	switch {
	case len(res) == 1 && status == passed:
		return status, 0, nil
	case len(res) == 2 && status == stale:
		s, _ := res[1].(string)
		fence, err := ParseToken(s)
		if err != nil {
			return 0, 0, fmt.Errorf("stored token: %w", err)
		}
		return status, fence, nil
	}
	return 0, 0, fmt.Errorf("unexpected reply %v", res)
}

// staleError is the *StaleTokenError of CheckToken for token against the
// fence a script (of op) refused it by.
func staleError(op, resource string, token, fence Token) error {
	// The script applied the rule; CheckToken builds the error it gives.
	if err := CheckToken(resource, token, fence); err != nil {
		return err
	}
	return fmt.Errorf("fencedlock: %s %s: script refused token %d against fence %d", op, names.Quote(resource), token, fence)
}

// Get implements Store in one round trip. It reads the primary: with a
// client that may send reads to replicas (a ClusterClient made with
// ReadOnly, RouteByLatency or RouteRandomly), which may lag behind the
// writes and fences the primary took, it reads with a script, which such
// a client sends to the primary; otherwise with HMGET.
func (s *RedisStore) Get(ctx context.Context, resource string) ([]byte, Token, error) {
	if err := s.ready(resource); err != nil {
		return nil, 0, err
	}
	key := keyFor(s.prefix, resource, "value")
	res, err := call.Bounded(ctx, s.heeds, func(ctx context.Context) ([]any, error) {
		if s.replicas {
			return readScript.Run(ctx, s.client, script.Keys(key)).Slice()
		}
		return s.client.HMGet(ctx, key, "t", "v").Result()
	})
	if err != nil {
		return nil, 0, redisErr(ctx, "get", resource, err, key)
	}
	if len(res) != 2 {
		return nil, 0, fmt.Errorf("fencedlock: get %s: unexpected reply %v", names.Quote(resource), res)
	}
	ts, ok := res[0].(string)
	if !ok {
		return nil, 0, fmt.Errorf("%w: %s", ErrNotFound, names.Quote(resource))
	}
	token, err := storedToken(resource, key, ts)
	if err != nil {
		return nil, 0, err
	}
	v, _ := res[1].(string)
	return []byte(v), token, nil
}

// storedToken parses the token field of resource's value key: ErrCorrupt
// unless it is canonical, as the store writes it.
func storedToken(resource, key, ts string) (Token, error) {
	token, err := ParseToken(ts)
	if err != nil || ts != token.String() {
		return 0, fmt.Errorf("%w: get %s: key %s holds token %q", ErrCorrupt, names.Quote(resource), names.Quote(key), ts)
	}
	return token, nil
}
