package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"

	"github.com/fencedlock/fencedlock"
)

// libOptions are the settings of the libraries under test. The parent
// passes them to its children as JSON.
type libOptions struct {
	TTL          time.Duration // lock TTL (rueidislock: KeyValidity)
	RedsyncDelay time.Duration // redsync retry delay; 0 keeps its default
	RedislockMin time.Duration // redislock ExponentialBackoff minimum
	RedislockMax time.Duration // redislock ExponentialBackoff maximum
	// ContextTimeout makes every go-redis client (fencedlock's, redsync's,
	// redislock's) heed ctx deadlines: ContextTimeoutEnabled.
	ContextTimeout bool `json:",omitempty"`
}

// library is a lock library under test.
type library struct {
	name   string
	module string // the Go module that provides it
	// describe states how the bench configures the library.
	describe func(o libOptions) string
	// open connects one process to Redis at addr.
	open func(addr string, o libOptions) (libClient, error)
}

// libClient is one process's handle on a library: one Redis client,
// shared by all the goroutines of the process.
type libClient interface {
	// worker returns the state one goroutine uses to lock resource.
	worker(resource string) lockWorker
	// Close closes the Redis client.
	Close() error
}

// lockWorker acquires and releases one resource's lock, one hold at a
// time. It is used by one goroutine.
type lockWorker interface {
	// acquire waits, the library's documented way, until the lock is held
	// or ctx is done. It returns the fencing token where the library has
	// one, else 0.
	acquire(ctx context.Context) (token uint64, err error)
	// release frees the lock taken by the last successful acquire. It
	// returns an error if the lock turned out not to be held any more.
	release(ctx context.Context) error
}

// libraries lists the libraries the bench knows, in table order.
var libraries = []*library{
	{name: "fencedlock", module: "github.com/fencedlock/fencedlock", describe: describeFencedlock, open: openFencedlock},
	{name: "redsync", module: "github.com/go-redsync/redsync/v4", describe: describeRedsync, open: openRedsync},
	{name: "redislock", module: "github.com/bsm/redislock", describe: describeRedislock, open: openRedislock},
	{name: "rueidislock", module: "github.com/redis/rueidis", describe: describeRueidislock, open: openRueidislock},
}

// libraryByName returns the library called name, or nil.
func libraryByName(name string) *library {
	for _, l := range libraries {
		if l.name == name {
			return l
		}
	}
	return nil
}

// newGoRedis returns the go-redis client that fencedlock, redsync and
// redislock share the configuration of: the library defaults, with
// ContextTimeoutEnabled in the scenarios that ask for it.
func newGoRedis(addr string, o libOptions) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: o.ContextTimeout})
}

// fencedlock

func describeFencedlock(o libOptions) string {
	return fmt.Sprintf("Locker.Acquire with no options (the library's own waiting), ttl %v, "+
		"Lock.Token read on every grant; Lock.Release; go-redis client with default options (ContextTimeoutEnabled in the -heeding scenarios)", o.TTL)
}

func openFencedlock(addr string, o libOptions) (libClient, error) {
	rdb := newGoRedis(addr, o)
	return &fencedClient{rdb: rdb, locker: fencedlock.New(rdb), ttl: o.TTL}, nil
}

type fencedClient struct {
	rdb    *redis.Client
	locker *fencedlock.Locker
	ttl    time.Duration
}

func (c *fencedClient) worker(resource string) lockWorker {
	return &fencedWorker{c: c, resource: resource}
}

func (c *fencedClient) Close() error { return c.rdb.Close() }

type fencedWorker struct {
	c        *fencedClient
	resource string
	lock     *fencedlock.Lock
}

func (w *fencedWorker) acquire(ctx context.Context) (uint64, error) {
	lock, err := w.c.locker.Acquire(ctx, w.resource, w.c.ttl)
	if err != nil {
		return 0, err
	}
	w.lock = lock
	return uint64(lock.Token()), nil
}

func (w *fencedWorker) release(ctx context.Context) error {
	lock := w.lock
	w.lock = nil
	return lock.Release(ctx)
}

// redsync

// redsyncTries is high enough that a Mutex never runs out of tries in a
// run: the context ends the wait instead.
const redsyncTries = math.MaxInt32

func describeRedsync(o libOptions) string {
	delay := "default retry delay (random 50-250ms)"
	if o.RedsyncDelay > 0 {
		delay = fmt.Sprintf("WithRetryDelay(%v)", o.RedsyncDelay)
	}
	return fmt.Sprintf("Mutex.LockContext/UnlockContext, one Mutex per goroutine, goredis/v9 pool over one go-redis client (default options; ContextTimeoutEnabled in the -heeding scenarios); "+
		"WithExpiry(%v), WithTries(MaxInt32) (the context bounds the wait), %s, other options default",
		o.TTL, delay)
}

func openRedsync(addr string, o libOptions) (libClient, error) {
	rdb := newGoRedis(addr, o)
	return &redsyncClient{rdb: rdb, rs: redsync.New(redsyncgoredis.NewPool(rdb)), opts: o}, nil
}

type redsyncClient struct {
	rdb  *redis.Client
	rs   *redsync.Redsync
	opts libOptions
}

func (c *redsyncClient) worker(resource string) lockWorker {
	options := []redsync.Option{
		redsync.WithExpiry(c.opts.TTL),
		redsync.WithTries(redsyncTries),
	}
	if c.opts.RedsyncDelay > 0 {
		options = append(options, redsync.WithRetryDelay(c.opts.RedsyncDelay))
	}
	return &redsyncWorker{mutex: c.rs.NewMutex(resource, options...)}
}

func (c *redsyncClient) Close() error { return c.rdb.Close() }

type redsyncWorker struct {
	mutex *redsync.Mutex
}

func (w *redsyncWorker) acquire(ctx context.Context) (uint64, error) {
	return 0, w.mutex.LockContext(ctx)
}

func (w *redsyncWorker) release(ctx context.Context) error {
	ok, err := w.mutex.UnlockContext(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("redsync: unlock found the lock not held")
	}
	return nil
}

// redislock

func describeRedislock(o libOptions) string {
	return fmt.Sprintf("Client.Obtain with RetryStrategy ExponentialBackoff(%v, %v) (a new one per Obtain; "+
		"%v is the minimum its docs recommend), the context bounds the wait, ttl %v; Lock.Release; go-redis client with default options (ContextTimeoutEnabled in the -heeding scenarios)",
		o.RedislockMin, o.RedislockMax, 16*time.Millisecond, o.TTL)
}

func openRedislock(addr string, o libOptions) (libClient, error) {
	rdb := newGoRedis(addr, o)
	return &redislockClient{rdb: rdb, client: redislock.New(rdb), opts: o}, nil
}

type redislockClient struct {
	rdb    *redis.Client
	client *redislock.Client
	opts   libOptions
}

func (c *redislockClient) worker(resource string) lockWorker {
	return &redislockWorker{c: c, resource: resource}
}

func (c *redislockClient) Close() error { return c.rdb.Close() }

type redislockWorker struct {
	c        *redislockClient
	resource string
	lock     *redislock.Lock
}

func (w *redislockWorker) acquire(ctx context.Context) (uint64, error) {
	// The strategy counts its retries, so each Obtain gets a fresh one.
	opts := &redislock.Options{
		RetryStrategy: redislock.ExponentialBackoff(w.c.opts.RedislockMin, w.c.opts.RedislockMax),
	}
	lock, err := w.c.client.Obtain(ctx, w.resource, w.c.opts.TTL, opts)
	if err != nil {
		return 0, err
	}
	w.lock = lock
	return 0, nil
}

func (w *redislockWorker) release(ctx context.Context) error {
	lock := w.lock
	w.lock = nil
	return lock.Release(ctx)
}

// rueidislock

func describeRueidislock(o libOptions) string {
	return fmt.Sprintf("Locker.WithContext, release by its cancel func; KeyMajority 1, KeyValidity %v "+
		"(ExtendInterval default %v), NoLoopTracking, client-side caching on (waiters wake on invalidation), "+
		"other options default; rueidis client with default options",
		o.TTL, o.TTL/2)
}

func openRueidislock(addr string, o libOptions) (libClient, error) {
	locker, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption:   rueidis.ClientOption{InitAddress: []string{addr}},
		KeyMajority:    1,
		KeyValidity:    o.TTL,
		NoLoopTracking: true,
	})
	if err != nil {
		return nil, err
	}
	return &rueidisClient{locker: locker}, nil
}

type rueidisClient struct {
	locker rueidislock.Locker
}

func (c *rueidisClient) worker(resource string) lockWorker {
	return &rueidisWorker{locker: c.locker, resource: resource}
}

func (c *rueidisClient) Close() error {
	c.locker.Close()
	return nil
}

type rueidisWorker struct {
	locker   rueidislock.Locker
	resource string
	held     context.Context
	cancel   context.CancelFunc
}

func (w *rueidisWorker) acquire(ctx context.Context) (uint64, error) {
	held, cancel, err := w.locker.WithContext(ctx, w.resource)
	if err != nil {
		return 0, err
	}
	w.held, w.cancel = held, cancel
	return 0, nil
}

// release cancels the lock's context, which deletes the key and returns
// once it is deleted. A context that ended before release means the
// library saw the lock lost while it was held.
func (w *rueidisWorker) release(context.Context) error {
	held, cancel := w.held, w.cancel
	w.held, w.cancel = nil, nil
	lost := held.Err()
	cancel()
	if lost != nil {
		return fmt.Errorf("rueidislock: lock context ended while held: %w", lost)
	}
	return nil
}

// parseLibraries parses the -libs flag.
func parseLibraries(list string) ([]*library, error) {
	var out []*library
	seen := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" || seen[name] {
			continue
		}
		l := libraryByName(name)
		if l == nil {
			return nil, fmt.Errorf("unknown library %q (known: %s)", name, libraryNames())
		}
		seen[name] = true
		out = append(out, l)
	}
	if len(out) == 0 {
		return nil, errors.New("no library selected")
	}
	return out, nil
}

// libraryNames returns the known libraries' names, comma-separated.
func libraryNames() string {
	names := make([]string, len(libraries))
	for i, l := range libraries {
		names[i] = l.name
	}
	return strings.Join(names, ",")
}
