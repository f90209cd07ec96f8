package fencedlock_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
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
)

// The ACL rule of docs/redis.md: a user made with it runs every part of
// the library, on a cluster and with another prefix too, and is granted
// nothing more.

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
