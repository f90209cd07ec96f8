// Shared helpers of the root package's tests (package fencedlock_test):
// clients and Lockers on a test backend, acquiring and awaiting locks,
// reading keys, waiting for observable conditions, and the users of the
// ACL tests. Clients and hooks that provoke faults or watch commands are
// in helpers_faults_test.go. Helpers used by one test file only live in
// that file.

package fencedlock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// longTTL is a TTL no test waits out: locks taken with it end by
// Release, FastForward or a flush.
const longTTL = 30 * time.Second

// testCtx returns a context that bounds one test.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newLocker returns a Locker whose keys are unique to b's test.
func newLocker(b *redistest.Backend) *fencedlock.Locker {
	return fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix))
}

// newRedisStore returns a RedisStore whose keys are unique to b's test.
func newRedisStore(b *redistest.Backend) *fencedlock.RedisStore {
	return fencedlock.NewRedisStore(b.Client, fencedlock.WithStorePrefix(b.Prefix))
}

type namedStore struct {
	name  string
	store fencedlock.Store
}

// bothStores returns a fresh MemoryStore and a RedisStore on b.
func bothStores(b *redistest.Backend) []namedStore {
	return []namedStore{
		{"MemoryStore", fencedlock.NewMemoryStore()},
		{"RedisStore", newRedisStore(b)},
	}
}

// mustTryAcquire takes a lock that must be free.
func mustTryAcquire(t *testing.T, ctx context.Context, l *fencedlock.Locker, resource string, ttl time.Duration) *fencedlock.Lock {
	t.Helper()
	lock, err := l.TryAcquire(ctx, resource, ttl)
	require.NoError(t, err, "TryAcquire %q", resource)
	require.NotNil(t, lock)
	require.NotZero(t, lock.Token())
	require.Equal(t, resource, lock.Resource())
	return lock
}

// grantAndRelease takes a free lock and releases it at once, returning its token.
func grantAndRelease(t *testing.T, ctx context.Context, l *fencedlock.Locker, resource string) fencedlock.Token {
	t.Helper()
	lock := mustTryAcquire(t, ctx, l, resource, longTTL)
	require.NoError(t, lock.Release(ctx))
	return lock.Token()
}

// keyExists reports whether key exists.
func keyExists(t *testing.T, b *redistest.Backend, key string) bool {
	t.Helper()
	n, err := b.Client.Exists(context.Background(), key).Result()
	require.NoError(t, err)
	return n == 1
}

// getKey returns the string at key ("" and false when missing).
func getKey(t *testing.T, b *redistest.Backend, key string) (string, bool) {
	t.Helper()
	v, err := b.Client.Get(context.Background(), key).Result()
	if errors.Is(err, redis.Nil) {
		return "", false
	}
	require.NoError(t, err)
	return v, true
}

// keySnapshot describes key's type and content, to tell whether a call
// changed it.
func keySnapshot(t *testing.T, b *redistest.Backend, key string) string {
	t.Helper()
	ctx := context.Background()
	typ, err := b.Client.Type(ctx, key).Result()
	require.NoError(t, err)
	var content any
	switch typ {
	case "string":
		content, err = b.Client.Get(ctx, key).Result()
	case "hash":
		content, err = b.Client.HGetAll(ctx, key).Result()
	case "list":
		content, err = b.Client.LRange(ctx, key, 0, -1).Result()
	}
	require.NoError(t, err)
	return fmt.Sprintf("%s %v", typ, content)
}

// testKeys lists the keys of b's test.
func testKeys(t *testing.T, b *redistest.Backend) []string {
	t.Helper()
	keys, err := b.Client.Keys(context.Background(), b.Prefix+"*").Result()
	require.NoError(t, err)
	sort.Strings(keys)
	return keys
}

// serverMicros returns the Redis server clock (TIME) in microseconds.
func serverMicros(t *testing.T, b *redistest.Backend) uint64 {
	t.Helper()
	now, err := b.Client.Time(context.Background()).Result()
	require.NoError(t, err)
	return uint64(now.UnixMicro())
}

// requireStale checks that err is the store's refusal of token because
// it holds current.
func requireStale(t *testing.T, err error, resource string, token, current fencedlock.Token) {
	t.Helper()
	require.Error(t, err, "a write with token %d must be refused: the store holds %d", token, current)
	assert.ErrorIs(t, err, fencedlock.ErrStaleToken)
	var se *fencedlock.StaleTokenError
	require.True(t, errors.As(err, &se), "want *StaleTokenError, got %T: %v", err, err)
	assert.Equal(t, resource, se.Resource)
	assert.Equal(t, token, se.Token)
	assert.Equal(t, current, se.Current)
}

// requireValue checks what a store holds for resource.
func requireValue(t *testing.T, ctx context.Context, s fencedlock.Store, resource, value string, token fencedlock.Token) {
	t.Helper()
	v, tok, err := s.Get(ctx, resource)
	require.NoError(t, err)
	assert.Equal(t, value, string(v))
	assert.Equal(t, token, tok)
}

// noPanic runs fn and turns a panic into an error, so one bad method
// fails its assertion instead of the whole test binary.
func noPanic(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return fn()
}

// syncBuffer is a bytes.Buffer safe for a logger's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// awaitCleanupAfterCtxEnd checks what err, the error of a call whose ctx ended,
// says of its cleanup: done (the message speaks of no release), or still
// going on in the background, as it may be past ctx's end on a loaded
// machine; then it waits until done reports the cleanup's effect.
func awaitCleanupAfterCtxEnd(t *testing.T, err error, done func() bool) {
	t.Helper()
	msg := strings.ToLower(err.Error())
	if strings.Contains(msg, "goes on in the background") {
		waitUntil(t, done, "the background cleanup")
		return
	}
	assert.NotContains(t, msg, "releas", "the cleanup failed")
}

// noLock turns the results of TryAcquire or Acquire that must have
// failed into one error: a non-nil Lock is itself a failure.
func noLock(lock *fencedlock.Lock, err error) error {
	if lock != nil {
		return fmt.Errorf("got %v with token %d, want no lock (err %v)", lock, lock.Token(), err)
	}
	return err
}

type acquireResult struct {
	lock *fencedlock.Lock
	err  error
	at   time.Time
}

// requireStillWaiting checks that an Acquire has not returned.
func requireStillWaiting(t *testing.T, done <-chan acquireResult) {
	t.Helper()
	select {
	case r := <-done:
		t.Fatalf("Acquire returned while the lock was held: %v, %v", r.lock, r.err)
	case <-time.After(50 * time.Millisecond):
	}
}

// awaitAcquired waits for an Acquire that must succeed.
func awaitAcquired(t *testing.T, done <-chan acquireResult) *fencedlock.Lock {
	t.Helper()
	select {
	case r := <-done:
		require.NoError(t, r.err)
		require.NotNil(t, r.lock)
		return r.lock
	case <-time.After(10 * time.Second):
		t.Fatal("Acquire did not return once the lock was free")
		return nil
	}
}

// acquireCall is TryAcquire or Acquire, for tests that run both.
type acquireCall struct {
	name string
	call func(ctx context.Context, l *fencedlock.Locker, resource string) (*fencedlock.Lock, error)
}

var acquireCalls = []acquireCall{
	{"TryAcquire", func(ctx context.Context, l *fencedlock.Locker, resource string) (*fencedlock.Lock, error) {
		return l.TryAcquire(ctx, resource, longTTL)
	}},
	{"Acquire", func(ctx context.Context, l *fencedlock.Locker, resource string) (*fencedlock.Lock, error) {
		return l.Acquire(ctx, resource, longTTL)
	}},
}

// lockValuePattern matches a lock key's value: the owner's 128-bit nonce in hex,
// ':', and the token in decimal.
var lockValuePattern = regexp.MustCompile(`^([0-9a-f]{32}):([0-9]+)$`)

// requireNoGoroutinesLeftWithin is requireNoGoroutinesLeft for calls whose work
// goes on in the background after they returned: it waits up to d.
func requireNoGoroutinesLeftWithin(t *testing.T, d time.Duration) {
	t.Helper()
	pollUntil(d, func() bool { return len(ourGoroutines()) == 0 })
	requireNoGoroutinesLeft(t)
}

// ourGoroutines returns the stacks of goroutines running the library's
// code (a Lock's, a waiter's subscription's) or a go-redis subscription:
// the ones a Lock or a waiter may start.
func ourGoroutines() []string {
	buf := make([]byte, 1<<22)
	var ours []string
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, "fencedlock/fencedlock.(*") || strings.Contains(g, "fencedlock/fencedlock/internal/wait.") || strings.Contains(g, "go-redis/v9.(*channel)") {
			ours = append(ours, g)
		}
	}
	return ours
}

// requireNoGoroutinesLeft fails t if goroutines of the library are still
// running a second after the test's locks and waits ended.
func requireNoGoroutinesLeft(t *testing.T) {
	t.Helper()
	pollUntil(time.Second, func() bool { return len(ourGoroutines()) == 0 })
	if left := ourGoroutines(); len(left) > 0 {
		t.Errorf("%d goroutines of the library left:\n%s", len(left), strings.Join(left, "\n\n"))
	}
}

// isClosed reports whether ch is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// queueKeys returns the keys of resource's Redis queue: the sorted set of
// waiters and the hash of their deadlines.
func queueKeys(l *fencedlock.Locker, resource string) (queue, deadlines string) {
	base := strings.TrimSuffix(l.LockKey(resource), "lock")
	return base + "queue", base + "deadlines"
}

// queuedCount returns how many waiters resource's Redis queue holds.
func queuedCount(t *testing.T, b *redistest.Backend, l *fencedlock.Locker, resource string) int64 {
	t.Helper()
	queue, _ := queueKeys(l, resource)
	n, err := b.Client.ZCard(context.Background(), queue).Result()
	require.NoError(t, err)
	return n
}

// channelSubscribers is grantSubscribers for the server behind c (on
// Redis Cluster, for all its masters).
func channelSubscribers(t *testing.T, c redis.UniversalClient, l *fencedlock.Locker, resource string) int64 {
	t.Helper()
	n, err := redistest.Subscribers(context.Background(), c, grantsChannel(l, resource))
	require.NoError(t, err)
	return n
}

// grantsChannel returns the channel on which l's waiters for resource
// hear of the grants other Lockers hand them.
func grantsChannel(l *fencedlock.Locker, resource string) string {
	return l.GrantsChannel(resource)
}

// pollUntil checks cond every 2ms until it holds or d has passed, and
// reports whether it held: the one polling loop of the tests, for waits
// on something observable instead of a blind sleep.
func pollUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return cond()
		}
		<-tick.C
	}
	return true
}

// waitUntil waits up to 5s for cond, failing t with what otherwise.
func waitUntil(t *testing.T, cond func() bool, what string) {
	t.Helper()
	if !pollUntil(5*time.Second, cond) {
		t.Fatal("timed out waiting: " + what)
	}
}

// awaitQueued waits until the one waiter for resource is queued in
// Redis, its Locker subscribed, and the waiter has heard its refusal,
// then a little longer for the attempt the waiter makes once the
// subscription is confirmed.
func awaitQueued(t *testing.T, b *redistest.Backend, l *fencedlock.Locker, resource string) {
	t.Helper()
	waitUntil(t, func() bool {
		return queuedCount(t, b, l, resource) == 1 && grantSubscribers(t, b, l, resource) == 1 && l.WaiterRefused(resource)
	}, "the waiter for "+resource+" to queue, subscribe and hear its refusal")
	time.Sleep(20 * time.Millisecond)
}

// acquireAsync starts Acquire in a goroutine with opts and returns the
// channel of its result.
func acquireAsync(ctx context.Context, l *fencedlock.Locker, resource string, ttl time.Duration, opts ...fencedlock.AcquireOption) <-chan acquireResult {
	done := make(chan acquireResult, 1)
	go func() {
		lock, err := l.Acquire(ctx, resource, ttl, opts...)
		done <- acquireResult{lock, err, time.Now()}
	}()
	return done
}

// hourRetryDelay makes Acquire's fallback timer useless within a test: a
// waiter that gets the lock was woken by the release.
var hourRetryDelay = fencedlock.WithRetryDelay(time.Hour, time.Hour)

// grantSubscribers returns how many connections are subscribed to resource's
// channel, by the kind of pub/sub the library uses on the server: sharded
// where the server has it, classic elsewhere (miniredis, Redis before 7).
func grantSubscribers(t *testing.T, b *redistest.Backend, l *fencedlock.Locker, resource string) int64 {
	t.Helper()
	return channelSubscribers(t, b.Client, l, resource)
}

// keyPTTL returns key's PTTL: -2 when missing, -1 without expiry.
func keyPTTL(t *testing.T, b *redistest.Backend, key string) time.Duration {
	t.Helper()
	d, err := b.Client.PTTL(context.Background(), key).Result()
	require.NoError(t, err)
	if d < 0 {
		return d / time.Nanosecond // go-redis returns -1ns / -2ns for -1 / -2
	}
	return d
}

// requireUnavailable checks that err says the backend is down, not who
// holds the lock.
func requireUnavailable(t *testing.T, err error, what string) {
	t.Helper()
	require.Error(t, err, what)
	assert.ErrorIs(t, err, fencedlock.ErrUnavailable, what)
	assert.NotErrorIs(t, err, fencedlock.ErrNotAcquired, what)
	assert.NotErrorIs(t, err, fencedlock.ErrLockLost, what)
}

// abandonMarkers lists the abandon markers of resource's acquire attempts: the
// keys "<prefix>:{resource}:abandoned:<owner nonce>" left by the cleanup of
// an attempt that got no reply and was not granted.
func abandonMarkers(t *testing.T, b *redistest.Backend, l *fencedlock.Locker, resource string) []string {
	t.Helper()
	pattern := strings.TrimSuffix(l.LockKey(resource), "lock") + "abandoned:*"
	keys, err := b.Client.Keys(context.Background(), pattern).Result()
	require.NoError(t, err)
	sort.Strings(keys)
	return keys
}

// foWaitInSync waits until the replica's link to its master is up and it
// has applied everything the master has sent it.
func foWaitInSync(t testing.TB, ctx context.Context, master, replica *redis.Client) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, redistest.WaitInSync(wctx, master, replica))
}

// scriptFiles returns every script Redis runs: the root package's and
// election's.
func scriptFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, dir := range []string{"lua", "election"} {
		f, err := filepath.Glob(filepath.Join(dir, "*.lua"))
		require.NoError(t, err)
		files = append(files, f...)
	}
	require.GreaterOrEqual(t, len(files), 13)
	return files
}

// aclLinePrefix starts the one line of docs/redis.md's ACL section.
const aclLinePrefix = "ACL SETUSER fencedlock on >PASSWORD "

// aclRule returns the rule of the ACL section of docs/redis.md: the
// words after aclLinePrefix on the line of its first code block.
func aclRule(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("docs", "redis.md"))
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(doc), "\n## ACL\n")
	require.True(t, ok, "docs/redis.md has no \"## ACL\" section")
	section, _, _ = strings.Cut(section, "\n## ")
	_, block, ok := strings.Cut(section, "\n```\n")
	require.True(t, ok, "the ACL section has no code block")
	block, _, ok = strings.Cut(block, "\n```\n")
	require.True(t, ok, "the ACL section's code block does not end")
	lines := strings.Split(strings.TrimSpace(block), "\n")
	require.Len(t, lines, 1, "the ACL section's code block is not one line: %q", block)
	rule, ok := strings.CutPrefix(lines[0], aclLinePrefix)
	require.True(t, ok, "the ACL line does not begin %q: %q", aclLinePrefix, lines[0])
	return strings.Fields(rule)
}

// aclServer starts a redis-server of the test's own, so that the users
// it creates stay there, and returns it with a client of its default
// user. It skips the test on a server without ACL (Redis before 6).
func aclServer(t *testing.T) (*redistest.Server, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	skipWithoutACL(t, admin)
	return srv, admin
}

// skipWithoutACL skips the test when the server of c has no ACL.
func skipWithoutACL(t *testing.T, c *redis.Client) {
	t.Helper()
	if err := c.Do(context.Background(), "ACL", "WHOAMI").Err(); err != nil {
		if strings.Contains(strings.ToLower(err.Error()), "unknown command") {
			t.Skipf("this redis-server has no ACL (Redis before 6): %v", err)
		}
		t.Fatal(err)
	}
}

// setUser creates (or changes) user with password and the rule's words.
func setUser(t *testing.T, admin *redis.Client, user, password string, rule ...string) {
	t.Helper()
	args := []any{"ACL", "SETUSER", user, "on", ">" + password}
	for _, w := range rule {
		args = append(args, w)
	}
	require.NoError(t, admin.Do(context.Background(), args...).Err(), "ACL SETUSER %s", strings.Join(rule, " "))
}

// userClient returns a client of srv that logs in as user. quiet sets
// the go-redis options that keep connecting from sending commands the
// rule does not grant (see the ACL section).
func userClient(t *testing.T, srv *redistest.Server, user, password string, quiet bool) *redis.Client {
	t.Helper()
	opts := &redis.Options{Addr: srv.Addr, Username: user, Password: password}
	if quiet {
		opts.DisableIdentity = true
		opts.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	}
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	return c
}

// aclPassword is the password of the tests' users.
const aclPassword = "s3cret-of-the-test"

// startReplica starts a replica of srv, waits until it is in sync, and
// returns it.
func startReplica(t *testing.T, srv *redistest.Server) *redistest.Server {
	t.Helper()
	host, port, _ := strings.Cut(srv.Addr, ":")
	// No pause before a diskless full sync (Redis 7 waits 5 seconds).
	require.NoError(t, srv.Client(t).ConfigSet(context.Background(), "repl-diskless-sync-delay", "0").Err())
	replica := redistest.Start(t, "--replicaof", host, port)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, redistest.WaitInSync(ctx, srv.Client(t), replica.Client(t)))
	return replica
}
