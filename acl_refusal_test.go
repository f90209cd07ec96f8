package fencedlock_test

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/script"
)

// Users that the ACL rule of docs/redis.md does not cover: a refusal
// names the command and points to the ACL section, and a script refused
// a read has written nothing.

// aclDocsURL is where errors of refused commands point.
const aclDocsURL = "https://github.com/fencedlock/fencedlock/blob/main/docs/redis.md#acl"

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
		// the caller's lock released by its holder, with no candidate and
		// with one: the fast path reads the lock with pcall, and the
		// refusal must not pass for a free lock (NOT_HELD)
		{"lua/release.lua", "get", []string{lockKey, counter, queue, deadlines}, []any{"me:", p + "ch", "", "", "60000", "", "", ""}, func(ctx context.Context) {
			require.NoError(t, admin.Set(ctx, lockKey, "me:7", longTTL).Err())
		}},
		{"lua/release.lua", "get", []string{lockKey, counter, queue, deadlines, marker}, []any{"me:", p + "ch", "", "", "60000", "me:next:30000", "60000", ""}, func(ctx context.Context) {
			require.NoError(t, admin.Set(ctx, lockKey, "me:7", longTTL).Err())
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
		{"election/forget.lua", "get", []string{p + "leader"}, []any{"7"}, func(ctx context.Context) {
			require.NoError(t, admin.Set(ctx, p+"leader", "7:v", longTTL).Err())
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
