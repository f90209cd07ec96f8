package fencedlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/election"
	"github.com/fencedlock/fencedlock/internal/redistest"
	"github.com/fencedlock/fencedlock/internal/script"
)

// aclDocsURL is where errors of refused commands point.
const aclDocsURL = "https://github.com/fencedlock/fencedlock/blob/main/docs/redis.md#acl"

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

// TestACLRuleIsOneLine checks the shape of the documented rule, which
// the tests below run: one line, the default prefix's keys and channels.
func TestACLRuleIsOneLine(t *testing.T) {
	rule := aclRule(t)
	assert.Contains(t, rule, "~"+fencedlock.DefaultPrefix+":*")
	assert.Contains(t, rule, "&"+fencedlock.DefaultPrefix+":*")
	assert.Contains(t, rule, "resetchannels", "Redis 6.2 lets a new user use every channel without it")
	for _, w := range rule {
		assert.NotContains(t, w, "~*", "the rule grants every key")
		for _, all := range []string{"allkeys", "&*", "allchannels", "+@all", "allcommands"} {
			assert.NotEqual(t, all, w)
		}
	}
}

// TestACLScriptLinesCallOneCommand checks what the errors of refused
// commands rely on: Redis 6.2 and 7.0 name only the line of the script
// that called a refused command, and each line of the scripts calls at
// most one command (maybe more than once), so the line names it.
func TestACLScriptLinesCallOneCommand(t *testing.T) {
	call := regexp.MustCompile(`redis\.p?call\(\s*['"]([A-Za-z]+)['"]`)
	calls := 0
	for _, f := range scriptFiles(t) {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		for i, line := range strings.Split(string(src), "\n") {
			cmds := map[string]bool{}
			for _, m := range call.FindAllStringSubmatch(line, -1) {
				cmds[strings.ToUpper(m[1])] = true
				calls++
			}
			assert.LessOrEqual(t, len(cmds), 1, "%s:%d calls more than one command: %s", f, i+1, line)
		}
	}
	assert.Greater(t, calls, 20, "the pattern finds the scripts' calls")
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

// aclLogEntry is one entry of ACL LOG.
type aclLogEntry struct {
	reason, context, object, user string
}

func (e aclLogEntry) String() string {
	return fmt.Sprintf("%s %s refused to %s (in %s)", e.reason, e.object, e.user, e.context)
}

// aclLog returns what the server refused to users since the last
// ACL LOG RESET.
func aclLog(t *testing.T, admin *redis.Client) []aclLogEntry {
	t.Helper()
	raw, err := admin.Do(context.Background(), "ACL", "LOG").Slice()
	require.NoError(t, err)
	var entries []aclLogEntry
	for _, r := range raw {
		fields := map[string]string{}
		switch r := r.(type) {
		case map[any]any: // RESP3
			for k, v := range r {
				fields[fmt.Sprint(k)] = fmt.Sprint(v)
			}
		case []any: // RESP2
			for i := 0; i+1 < len(r); i += 2 {
				fields[fmt.Sprint(r[i])] = fmt.Sprint(r[i+1])
			}
		default:
			t.Fatalf("ACL LOG entry %T %v", r, r)
		}
		entries = append(entries, aclLogEntry{fields["reason"], fields["context"], fields["object"], fields["username"]})
	}
	return entries
}

// slogRecords is a slog.Handler that keeps every record at Debug and
// above.
type slogRecords struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *slogRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h *slogRecords) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}
func (h *slogRecords) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *slogRecords) WithGroup(string) slog.Handler      { return h }

// atLeast returns the records at level or above, as text.
func (h *slogRecords) atLeast(level slog.Level) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.records {
		if r.Level >= level {
			var b strings.Builder
			fmt.Fprintf(&b, "%s %s", r.Level, r.Message)
			r.Attrs(func(a slog.Attr) bool {
				fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
				return true
			})
			out = append(out, b.String())
		}
	}
	return out
}

func (h *slogRecords) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.records)
}

// aclPassword is the password of the tests' users.
const aclPassword = "s3cret-of-the-test"

// startReplica starts a replica of srv and waits until it is in sync.
func startReplica(t *testing.T, srv *redistest.Server) {
	t.Helper()
	host, port, _ := strings.Cut(srv.Addr, ":")
	// No pause before a diskless full sync (Redis 7 waits 5 seconds).
	require.NoError(t, srv.Client(t).ConfigSet(context.Background(), "repl-diskless-sync-delay", "0").Err())
	replica := redistest.Start(t, "--replicaof", host, port)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, redistest.WaitInSync(ctx, srv.Client(t), replica.Client(t)))
}

// The documented rule, with ~locks:* for the lock keys of another library,
// lets a user run every part of the library: nothing is refused (ACL LOG
// records every refusal, in scripts too, even one that a script or
// go-redis takes in its stride), nothing is logged at Warn, and waiters
// hear hand-overs by pub/sub.
func TestACLRuleRunsEveryFeature(t *testing.T) {
	srv, admin := aclServer(t)
	startReplica(t, srv)
	ctx := testCtx(t)
	setUser(t, admin, "fencedlock", aclPassword, append(aclRule(t), "~locks:*")...)
	require.NoError(t, admin.Do(ctx, "ACL", "LOG", "RESET").Err())
	defer fencedlock.SetSubscriptionLinger(50 * time.Millisecond)()

	logs := &slogRecords{}
	logger := slog.New(logs)
	client := userClient(t, srv, "fencedlock", aclPassword, false)
	locker := fencedlock.New(client, fencedlock.WithLogger(logger))
	// Another process's Locker, on a connection of its own.
	waiters := fencedlock.New(userClient(t, srv, "fencedlock", aclPassword, false), fencedlock.WithLogger(logger))

	t.Run("lock", func(t *testing.T) {
		lock, err := locker.TryAcquire(ctx, "a", longTTL)
		require.NoError(t, err)
		_, err = locker.TryAcquire(ctx, "a", longTTL)
		require.ErrorIs(t, err, fencedlock.ErrNotAcquired)
		left, err := lock.TTL(ctx)
		require.NoError(t, err)
		assert.Greater(t, left, time.Second)
		require.NoError(t, lock.Refresh(ctx, longTTL))
		info, err := locker.Inspect(ctx, "a")
		require.NoError(t, err)
		assert.Equal(t, lock.Token(), info.Token)
		require.NoError(t, lock.Release(ctx))
		require.NoError(t, locker.Advance(ctx, "a", lock.Token()+1e12))
		next, err := locker.TryAcquire(ctx, "a", longTTL)
		require.NoError(t, err)
		assert.Greater(t, next.Token(), lock.Token()+1e12)
		require.NoError(t, next.Release(ctx))
	})

	t.Run("hand-over", func(t *testing.T) {
		// Two resources held, a waiter for each in another Locker: one
		// pub/sub connection for both channels.
		holders := map[string]*fencedlock.Lock{}
		done := map[string]<-chan acquireResult{}
		for _, r := range []string{"h1", "h2"} {
			lock, err := locker.TryAcquire(ctx, r, longTTL)
			require.NoError(t, err)
			holders[r] = lock
			done[r] = acquireAsync(ctx, waiters, r, longTTL, hourRetryDelay)
		}
		waitUntil(t, func() bool {
			return channelSubscribers(t, admin, waiters, "h1") == 1 && channelSubscribers(t, admin, waiters, "h2") == 1
		}, "the waiters to subscribe")
		// Idle for over a second, the subscription's connection is
		// sent a PING.
		time.Sleep(1300 * time.Millisecond)
		for _, r := range []string{"h1", "h2"} {
			released := time.Now()
			require.NoError(t, holders[r].Release(ctx))
			lock := awaitAcquired(t, done[r])
			woke := time.Since(released)
			// The fallback timer would take an hour: the grant was heard.
			assert.Less(t, woke, 500*time.Millisecond, "the waiter for %s was not woken by the release", r)
			assert.Greater(t, lock.Token(), holders[r].Token())
			require.NoError(t, lock.Release(ctx))
			if r == "h1" {
				// With no waiter left, h1's channel is unsubscribed
				// while h2's stays.
				waitUntil(t, func() bool { return channelSubscribers(t, admin, waiters, "h1") == 0 }, "h1's channel to be unsubscribed")
				assert.Equal(t, int64(1), channelSubscribers(t, admin, waiters, "h2"))
			}
		}
	})

	t.Run("heartbeat and Do", func(t *testing.T) {
		lock, err := locker.Acquire(ctx, "hb", 300*time.Millisecond, fencedlock.WithHeartbeat(50*time.Millisecond))
		require.NoError(t, err)
		time.Sleep(500 * time.Millisecond)
		require.NoError(t, lock.Err(), "the heartbeat did not keep the lock")
		require.NoError(t, lock.Release(ctx))
		ran := false
		require.NoError(t, locker.Do(ctx, "do", 300*time.Millisecond, func(ctx context.Context, lock *fencedlock.Lock) error {
			ran = lock.Token() > 0 && ctx.Err() == nil
			return nil
		}))
		assert.True(t, ran)
	})

	t.Run("replicas", func(t *testing.T) {
		replicated := fencedlock.New(client, fencedlock.WithLogger(logger), fencedlock.WithReplicas(1, 5*time.Second))
		lock, err := replicated.TryAcquire(ctx, "replicated", longTTL)
		require.NoError(t, err)
		require.NoError(t, lock.Release(ctx))
	})

	t.Run("IssueToken", func(t *testing.T) {
		require.NoError(t, client.Do(ctx, "SET", "locks:x", "grant-1", "NX", "PX", longTTL.Milliseconds()).Err())
		first, err := locker.IssueToken(ctx, "locks:x", "grant-1")
		require.NoError(t, err)
		again, err := locker.IssueToken(ctx, "locks:x", "grant-1")
		require.NoError(t, err)
		assert.Equal(t, first, again)
		require.NoError(t, locker.AdvanceIssued(ctx, "locks:x", first+1e12))
		require.NoError(t, client.Set(ctx, "locks:x", "grant-2", longTTL).Err())
		next, err := locker.IssueToken(ctx, "locks:x", "grant-2")
		require.NoError(t, err)
		assert.Greater(t, next, first+1e12)
	})

	t.Run("RedisStore", func(t *testing.T) {
		store := fencedlock.NewRedisStore(client)
		lock, err := locker.TryAcquire(ctx, "s", longTTL)
		require.NoError(t, err)
		require.NoError(t, store.Put(ctx, "s", lock.Token(), []byte("one")))
		requireValue(t, ctx, store, "s", "one", lock.Token())
		require.NoError(t, store.Fence(ctx, "s", lock.Token()+1))
		requireStale(t, store.Put(ctx, "s", lock.Token(), []byte("late")), "s", lock.Token(), lock.Token()+1)
		require.NoError(t, fencedlock.Update(ctx, store, "s", lock.Token()+2, func(v []byte, found bool) ([]byte, error) {
			return append(v, " two"...), nil
		}))
		requireValue(t, ctx, store, "s", "one two", lock.Token()+2)
		require.NoError(t, lock.Release(ctx))
	})

	t.Run("election", func(t *testing.T) {
		e := election.New(locker, "office", election.WithTTL(time.Second))
		octx, stop := context.WithCancel(ctx)
		defer stop()
		leaders := e.Observe(octx)
		term, err := e.Campaign(ctx, "first")
		require.NoError(t, err)
		leader, err := e.Leader(ctx)
		require.NoError(t, err)
		assert.Equal(t, election.Leader{Value: "first", Token: term.Token()}, leader)
		select {
		case seen := <-leaders:
			assert.Equal(t, leader, seen)
		case <-time.After(5 * time.Second):
			t.Fatal("Observe did not see the leader")
		}
		require.NoError(t, term.Resign(ctx))

		rctx, cancel := context.WithCancel(ctx)
		var ran fencedlock.Token
		err = e.Run(rctx, "second", func(ctx context.Context, term *election.Term) error {
			ran = term.Token()
			cancel()
			return nil
		})
		assert.ErrorIs(t, err, context.Canceled)
		assert.Greater(t, ran, term.Token())
		select {
		case seen := <-leaders:
			assert.Equal(t, election.Leader{Value: "second", Token: ran}, seen)
		case <-time.After(5 * time.Second):
			t.Fatal("Observe did not see the second leader")
		}
	})

	assert.Empty(t, logs.atLeast(slog.LevelWarn), "records at Warn or above")
	assert.NotZero(t, logs.count(), "nothing was logged at all: is the logger in use?")
	// Connecting, go-redis sends commands that the rule cannot grant on
	// every server, and takes their refusal in its stride (see
	// TestACLQuietClientIsRefusedNothing): nothing else was refused.
	for _, e := range aclLog(t, admin) {
		t.Logf("ACL LOG: %v", e)
		assert.True(t, e.context == "toplevel" && strings.HasPrefix(e.object, "client"), "refused: %v", e)
	}
}

// A client made with the go-redis options of the ACL section sends
// nothing the rule refuses, not even when it connects.
func TestACLQuietClientIsRefusedNothing(t *testing.T) {
	srv, admin := aclServer(t)
	ctx := testCtx(t)
	setUser(t, admin, "fencedlock", aclPassword, aclRule(t)...)
	require.NoError(t, admin.Do(ctx, "ACL", "LOG", "RESET").Err())
	client := userClient(t, srv, "fencedlock", aclPassword, true)
	locker := fencedlock.New(client)
	lock, err := locker.TryAcquire(ctx, "quiet", longTTL)
	require.NoError(t, err)
	require.NoError(t, lock.Release(ctx))
	assert.Empty(t, aclLog(t, admin))
}

// The role of the issue's categories cannot acquire: TIME is in none of
// them. The error names the command and points to the ACL section.
func TestACLCategoryRoleCannotAcquire(t *testing.T) {
	srv, admin := aclServer(t)
	ctx := testCtx(t)
	setUser(t, admin, "categories", aclPassword, "+@read", "+@write", "+@scripting", "+@pubsub", "+@connection",
		"+@keyspace", "+@string", "+@sortedset", "+@hash", "~*", "&*")
	locker := fencedlock.New(userClient(t, srv, "categories", aclPassword, false))
	_, err := locker.TryAcquire(ctx, "r", longTTL)
	requireACLError(t, err, "TIME")
	// Acquire, which waits through outages, does not wait this out.
	start := time.Now()
	_, err = locker.Acquire(ctx, "r", longTTL)
	requireACLError(t, err, "TIME")
	assert.Less(t, time.Since(start), 2*time.Second, "Acquire retried a refusal")
}

// requireACLError checks that err is an ACL refusal of the command cmd:
// it matches ErrUnavailable and no other sentinel, names cmd and points
// to the ACL section.
func requireACLError(t *testing.T, err error, cmd string) {
	t.Helper()
	require.Error(t, err)
	t.Logf("%s: %v", cmd, err)
	assert.ErrorIs(t, err, fencedlock.ErrUnavailable)
	for _, other := range []error{fencedlock.ErrNotAcquired, fencedlock.ErrLockLost, fencedlock.ErrCorrupt, fencedlock.ErrInvalidArgument} {
		assert.NotErrorIs(t, err, other)
	}
	assert.Regexp(t, `\bthe command `+cmd+`\b`, err.Error())
	assert.Contains(t, err.Error(), aclDocsURL)
	var rerr redis.Error
	assert.True(t, errors.As(err, &rerr), "Redis's reply is not wrapped")
}

// A rule that lacks one command fails the calls that need it with an
// error naming the command, on every server: some name it in their reply,
// others only the line of the script that called it.
func TestACLRuleMissingACommand(t *testing.T) {
	srv, admin := aclServer(t)
	startReplica(t, srv)
	rule := append(aclRule(t), "~locks:*")
	holder := fencedlock.New(admin, fencedlock.WithPrefix(fencedlock.DefaultPrefix))
	for _, tc := range []struct {
		refused string // the command the rule lacks
		run     func(ctx context.Context, c *redis.Client) error
	}{
		{"time", func(ctx context.Context, c *redis.Client) error {
			l := fencedlock.New(c)
			return noLock(l.TryAcquire(ctx, "time", longTTL))
		}},
		{"evalsha", func(ctx context.Context, c *redis.Client) error {
			l := fencedlock.New(c)
			return noLock(l.TryAcquire(ctx, "evalsha", longTTL))
		}},
		{"eval", func(ctx context.Context, c *redis.Client) error {
			l := fencedlock.New(c)
			// The server's script cache is empty: EVALSHA gets NOSCRIPT.
			require.NoError(t, admin.ScriptFlush(ctx).Err())
			return noLock(l.TryAcquire(ctx, "eval", longTTL))
		}},
		{"exists", func(ctx context.Context, c *redis.Client) error {
			l := fencedlock.New(c)
			return noLock(l.TryAcquire(ctx, "exists", longTTL))
		}},
		{"set", func(ctx context.Context, c *redis.Client) error {
			l := fencedlock.New(c)
			return noLock(l.TryAcquire(ctx, "set", longTTL))
		}},
		{"pttl", func(ctx context.Context, c *redis.Client) error {
			l := fencedlock.New(c)
			lock, err := l.TryAcquire(ctx, "pttl", longTTL)
			require.NoError(t, err)
			_, err = lock.TTL(ctx)
			return err
		}},
		{"pexpire", func(ctx context.Context, c *redis.Client) error {
			l := fencedlock.New(c)
			lock, err := l.TryAcquire(ctx, "pexpire", longTTL)
			require.NoError(t, err)
			return lock.Refresh(ctx, longTTL)
		}},
		{"del", func(ctx context.Context, c *redis.Client) error {
			l := fencedlock.New(c)
			lock, err := l.TryAcquire(ctx, "del", longTTL)
			require.NoError(t, err)
			return lock.Release(ctx)
		}},
		{"incr", func(ctx context.Context, c *redis.Client) error {
			l := fencedlock.New(c)
			// A counter ahead of the clock is raised by INCR.
			require.NoError(t, l.Advance(ctx, "incr", fencedlock.Token(time.Now().UnixMicro())+1e12))
			return noLock(l.TryAcquire(ctx, "incr", longTTL))
		}},
		{"zadd", func(ctx context.Context, c *redis.Client) error {
			l := fencedlock.New(c)
			// A waiter takes its place in the queue.
			mustTryAcquire(t, ctx, holder, "zadd", longTTL)
			return noLock(l.Acquire(ctx, "zadd", longTTL))
		}},
		{"hgetall", func(ctx context.Context, c *redis.Client) error {
			l := fencedlock.New(c)
			_, err := l.Inspect(ctx, "hgetall")
			return err
		}},
		{"get", func(ctx context.Context, c *redis.Client) error {
			// IssueToken reads the other library's lock key with a GET
			// that takes a key of another type for a lock not held: a
			// GET refused is an ACL error, not a lock lost.
			require.NoError(t, admin.Set(ctx, "locks:get", "grant", longTTL).Err())
			l := fencedlock.New(c)
			_, err := l.IssueToken(ctx, "locks:get", "grant")
			return err
		}},
		{"hmget", func(ctx context.Context, c *redis.Client) error {
			s := fencedlock.NewRedisStore(c)
			_, _, err := s.Get(ctx, "hmget")
			return err
		}},
		{"hset", func(ctx context.Context, c *redis.Client) error {
			s := fencedlock.NewRedisStore(c)
			return s.Put(ctx, "hset", 1, []byte("v"))
		}},
		{"wait", func(ctx context.Context, c *redis.Client) error {
			replicated := fencedlock.New(c, fencedlock.WithReplicas(1, time.Second))
			return noLock(replicated.TryAcquire(ctx, "wait", longTTL))
		}},
	} {
		tc := tc
		t.Run(tc.refused, func(t *testing.T) {
			ctx := testCtx(t)
			user := "no-" + tc.refused
			setUser(t, admin, user, aclPassword, append(rule, "-"+tc.refused)...)
			client := userClient(t, srv, user, aclPassword, false)
			err := tc.run(ctx, client)
			requireACLError(t, err, strings.ToUpper(tc.refused))
		})
	}
}

// IssueToken without the other library's key pattern in the rule: Redis
// refuses the script a key, and the error says so.
func TestACLRuleWithoutTheOtherLockKeys(t *testing.T) {
	srv, admin := aclServer(t)
	ctx := testCtx(t)
	setUser(t, admin, "fencedlock", aclPassword, aclRule(t)...)
	require.NoError(t, admin.Set(ctx, "locks:y", "grant", longTTL).Err())
	locker := fencedlock.New(userClient(t, srv, "fencedlock", aclPassword, false))
	_, err := locker.IssueToken(ctx, "locks:y", "grant")
	requireACLError(t, err, "EVALSHA")
	assert.Contains(t, err.Error(), "refused the client's ACL user a key of the command EVALSHA")
}

// aclClusterRule is what the ACL section says a cluster client needs
// besides the rule.
const aclClusterRule = "+cluster|slots +command +asking"

// On a Redis Cluster node, the rule with the cluster client's commands
// that the ACL section lists lets a cluster client lock, wait and hear
// hand-overs, and nothing is refused.
func TestACLRuleOnACluster(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("docs", "redis.md"))
	require.NoError(t, err)
	require.True(t, strings.Contains(string(doc), "`"+aclClusterRule+"`"), "docs/redis.md does not list %q for a cluster client", aclClusterRule)

	srv := redistest.StartCluster(t)
	admin := srv.Client(t)
	skipWithoutACL(t, admin)
	ctx := testCtx(t)
	setUser(t, admin, "fencedlock", aclPassword, append(aclRule(t), strings.Fields(aclClusterRule)...)...)
	require.NoError(t, admin.Do(ctx, "ACL", "LOG", "RESET").Err())
	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: []string{srv.Addr}, Username: "fencedlock", Password: aclPassword,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	t.Cleanup(func() { client.Close() })
	logs := &slogRecords{}
	holders := fencedlock.New(client, fencedlock.WithLogger(slog.New(logs)))
	waiters := fencedlock.New(client, fencedlock.WithLogger(slog.New(logs)))

	holder, err := holders.TryAcquire(ctx, "c", longTTL)
	require.NoError(t, err)
	done := acquireAsync(ctx, waiters, "c", longTTL, hourRetryDelay)
	waitUntil(t, func() bool { return channelSubscribers(t, admin, waiters, "c") == 1 }, "the waiter to subscribe")
	released := time.Now()
	require.NoError(t, holder.Release(ctx))
	lock := awaitAcquired(t, done)
	assert.Less(t, time.Since(released), 500*time.Millisecond, "the waiter was not woken by the release")
	require.NoError(t, lock.Release(ctx))
	assert.Empty(t, logs.atLeast(slog.LevelWarn), "records at Warn or above")
	assert.Empty(t, aclLog(t, admin))
}

// The rule grants no more than the library uses: other commands, and
// keys and channels outside the prefix, are refused, even to a user that
// could do everything before.
func TestACLRuleGrantsNoMore(t *testing.T) {
	srv, admin := aclServer(t)
	ctx := testCtx(t)
	setUser(t, admin, "fencedlock", aclPassword, "+@all", "allkeys", "allchannels")
	setUser(t, admin, "fencedlock", aclPassword, aclRule(t)...)
	client := userClient(t, srv, "fencedlock", aclPassword, true)
	for _, args := range [][]any{
		{"PUBSUB", "CHANNELS"}, {"PUBSUB", "NUMSUB", "fencedlock:x"}, {"KEYS", "*"}, {"SCAN", "0"},
		{"FLUSHALL"}, {"CONFIG", "GET", "maxmemory"}, {"SCRIPT", "FLUSH"}, {"MULTI"}, {"INFO"},
		{"GET", "other:key"}, {"SET", "other:key", "v"}, {"PUBLISH", "other:channel", "m"},
	} {
		err := client.Do(ctx, args...).Err()
		assert.True(t, isNoPerm(err), "%v: %v", args, err)
	}
	for _, sub := range []struct {
		pattern string
		open    func(context.Context, ...string) *redis.PubSub
	}{
		{"fencedlock:*", client.PSubscribe},
		{"other:channel", client.Subscribe},
	} {
		ps := sub.open(ctx, sub.pattern)
		_, err := ps.Receive(ctx)
		assert.True(t, isNoPerm(err), "subscribe to %s: %v", sub.pattern, err)
		ps.Close()
	}
}

// isNoPerm reports whether err is an ACL refusal.
func isNoPerm(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOPERM")
}

// With another prefix, the rule's key and channel patterns change as the
// ACL section says, and the library runs as before: the empty prefix
// too, whose keys begin with "{" and IssueToken's with "issued".
func TestACLRuleForAnotherPrefix(t *testing.T) {
	srv, admin := aclServer(t)
	for _, tc := range []struct {
		prefix   string
		patterns []string
	}{
		{"app", []string{"~app:*", "&app:*"}},
		{"", []string{"~{*", "~issued-token:*", "~issued:*", "&{*"}},
	} {
		tc := tc
		t.Run(fmt.Sprintf("prefix %q", tc.prefix), func(t *testing.T) {
			ctx := testCtx(t)
			var rule []string
			for _, w := range aclRule(t) {
				if w != "~"+fencedlock.DefaultPrefix+":*" && w != "&"+fencedlock.DefaultPrefix+":*" {
					rule = append(rule, w)
				}
			}
			setUser(t, admin, "other-prefix", aclPassword, append(append(rule, tc.patterns...), "~locks:*")...)
			require.NoError(t, admin.Do(ctx, "ACL", "LOG", "RESET").Err())
			client := userClient(t, srv, "other-prefix", aclPassword, true)
			logs := &slogRecords{}
			holders := fencedlock.New(client, fencedlock.WithPrefix(tc.prefix), fencedlock.WithLogger(slog.New(logs)))
			waiters := fencedlock.New(client, fencedlock.WithPrefix(tc.prefix), fencedlock.WithLogger(slog.New(logs)))

			holder, err := holders.TryAcquire(ctx, "p", longTTL)
			require.NoError(t, err)
			done := acquireAsync(ctx, waiters, "p", longTTL, hourRetryDelay)
			waitUntil(t, func() bool { return channelSubscribers(t, admin, waiters, "p") == 1 }, "the waiter to subscribe")
			released := time.Now()
			require.NoError(t, holder.Release(ctx))
			lock := awaitAcquired(t, done)
			assert.Less(t, time.Since(released), 500*time.Millisecond, "the waiter was not woken by the release")
			store := fencedlock.NewRedisStore(client, fencedlock.WithStorePrefix(tc.prefix))
			require.NoError(t, store.Put(ctx, "p", lock.Token(), []byte("v")))
			require.NoError(t, lock.Release(ctx))
			require.NoError(t, client.Set(ctx, "locks:p", "grant", longTTL).Err())
			_, err = holders.IssueToken(ctx, "locks:p", "grant")
			require.NoError(t, err)
			assert.Empty(t, logs.atLeast(slog.LevelWarn), "records at Warn or above")
			assert.Empty(t, aclLog(t, admin))
		})
	}
}

// TestACLRefusedReadInAScriptIsNamedBeforeAnyWrite runs each script that
// reads with GET (or HGET) as a user the rule refuses that command:
// Redis's refusal comes back as an ACL error naming the command, not as
// a missing key (a lock lost, a grant over) or a corrupt one, and the
// script has written nothing, though some read with pcall to take a key
// of another type for a state of their own.
func TestACLRefusedReadInAScriptIsNamedBeforeAnyWrite(t *testing.T) {
	srv, admin := aclServer(t)
	rule := append(aclRule(t), "~locks:*")
	clients := map[string]*redis.Client{}
	for _, refused := range []string{"get", "hget"} {
		user := "no-" + refused
		setUser(t, admin, user, aclPassword, append(rule, "-"+refused)...)
		clients[refused] = userClient(t, srv, user, aclPassword, false)
	}
	const p = "fencedlock:{r}:"
	lockKey, counter, queue, deadlines, marker := p+"lock", p+"token", p+"queue", p+"deadlines", p+"abandoned"
	for _, tc := range []struct {
		file    string
		refused string
		keys    []string
		args    []any
		setup   func(ctx context.Context)
	}{
		// the counter behind the clock: the fast path reads it
		{"lua/acquire.lua", "get", []string{lockKey, counter, queue, deadlines, marker}, []any{"me:", "30000", "", "60000"}, func(ctx context.Context) {
			require.NoError(t, admin.Set(ctx, counter, "12345", 0).Err())
		}},
		// the caller's lock, its queue entry to remove and a marker to
		// set: nothing is removed or set
		{"lua/release.lua", "get", []string{lockKey, counter, queue, deadlines, marker}, []any{"me:", p + "ch", "me:30000", "5000", "60000"}, func(ctx context.Context) {
			require.NoError(t, admin.Set(ctx, lockKey, "me:7", longTTL).Err())
			require.NoError(t, admin.ZAdd(ctx, queue, redis.Z{Score: 1, Member: "me:30000"}).Err())
			require.NoError(t, admin.HSet(ctx, deadlines, "me:30000", time.Now().Add(time.Hour).UnixMilli()).Err())
		}},
		{"lua/refresh.lua", "get", []string{lockKey, counter}, []any{"me:", "60000", "60000"}, func(ctx context.Context) {
			require.NoError(t, admin.Set(ctx, lockKey, "me:7", longTTL).Err())
			require.NoError(t, admin.Set(ctx, counter, "7", longTTL).Err())
		}},
		{"lua/pttl.lua", "get", []string{lockKey}, []any{"me:"}, func(ctx context.Context) {
			require.NoError(t, admin.Set(ctx, lockKey, "me:7", longTTL).Err())
		}},
		{"lua/advance.lua", "get", []string{counter}, []any{"100", "60000"}, func(ctx context.Context) {
			require.NoError(t, admin.Set(ctx, counter, "7", longTTL).Err())
		}},
		{"lua/issue.lua", "get", []string{"locks:{r}", counter, p + "issued"}, []any{"grant", "60000"}, func(ctx context.Context) {
			require.NoError(t, admin.Set(ctx, "locks:{r}", "grant", longTTL).Err())
		}},
		{"lua/keep_issued.lua", "get", []string{"locks:{r}", counter, p + "issued"}, []any{"grant", "60000"}, func(ctx context.Context) {
			require.NoError(t, admin.Set(ctx, "locks:{r}", "grant", longTTL).Err())
			require.NoError(t, admin.Set(ctx, counter, "7", time.Second).Err())
			require.NoError(t, admin.HSet(ctx, p+"issued", "v", "grant", "t", "7").Err())
		}},
		// the lock key's GET passes; the record's HGET is refused
		{"lua/keep_issued.lua", "hget", []string{"locks:{r}", counter, p + "issued"}, []any{"grant", "60000"}, func(ctx context.Context) {
			require.NoError(t, admin.Set(ctx, "locks:{r}", "grant", longTTL).Err())
			require.NoError(t, admin.Set(ctx, counter, "7", time.Second).Err())
			require.NoError(t, admin.HSet(ctx, p+"issued", "v", "grant", "t", "7").Err())
			require.NoError(t, admin.PExpire(ctx, p+"issued", time.Second).Err())
		}},
		{"lua/inspect.lua", "get", []string{lockKey, counter, deadlines}, nil, func(ctx context.Context) {
			require.NoError(t, admin.Set(ctx, lockKey, "me:7", longTTL).Err())
		}},
		{"election/announce.lua", "get", []string{lockKey, p + "leader"}, []any{"7", "v", "60000", p + "leaders"}, func(ctx context.Context) {
			require.NoError(t, admin.Set(ctx, lockKey, "me:7", longTTL).Err())
		}},
		{"election/keep.lua", "get", []string{lockKey, p + "leader"}, []any{"7", "v", "60000", "1000", p + "leaders"}, func(ctx context.Context) {
			require.NoError(t, admin.Set(ctx, lockKey, "me:7", longTTL).Err())
		}},
		{"election/leader.lua", "get", []string{lockKey, p + "leader"}, nil, func(ctx context.Context) {
			require.NoError(t, admin.Set(ctx, lockKey, "me:7", longTTL).Err())
		}},
	} {
		tc := tc
		t.Run(tc.file+" without "+tc.refused, func(t *testing.T) {
			ctx := testCtx(t)
			require.NoError(t, admin.Del(ctx, append(tc.keys, lockKey, counter, queue, deadlines, marker)...).Err())
			tc.setup(ctx)
			before := keyDumps(t, admin, tc.keys)
			src, err := os.ReadFile(tc.file)
			require.NoError(t, err)
			err = script.New(string(src)).Run(ctx, clients[tc.refused], script.Keys(tc.keys...), tc.args...).Err()
			var acl *script.ACLError
			require.ErrorAs(t, err, &acl, "the script's reply is not Redis's refusal")
			assert.Equal(t, strings.ToUpper(tc.refused), acl.Command, "%v", err)
			after := keyDumps(t, admin, tc.keys)
			for i, k := range tc.keys {
				assert.Equal(t, before[i].dump, after[i].dump, "%s was written", k)
				assert.LessOrEqual(t, after[i].pttl, before[i].pttl, "%s's expiry was extended", k)
			}
		})
	}
}

// keyDump is a key's value serialized by DUMP ("" when missing) and its
// PTTL.
type keyDump struct {
	dump string
	pttl time.Duration
}

func keyDumps(t *testing.T, c *redis.Client, keys []string) []keyDump {
	t.Helper()
	ctx := context.Background()
	out := make([]keyDump, len(keys))
	for i, k := range keys {
		d, err := c.Dump(ctx, k).Result()
		if err != redis.Nil {
			require.NoError(t, err)
		}
		pttl, err := c.PTTL(ctx, k).Result()
		require.NoError(t, err)
		out[i] = keyDump{d, pttl}
	}
	return out
}
