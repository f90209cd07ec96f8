package fencedlock_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// issueEnv is a Locker on a backend and a lock key of another library,
// both unique to the test.
type issueEnv struct {
	b       *redistest.Backend
	locker  *fencedlock.Locker
	lockKey string
	ctx     context.Context
}

func newIssueEnv(t *testing.T, b *redistest.Backend, name string) *issueEnv {
	t.Helper()
	return &issueEnv{
		b:       b,
		locker:  fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix)),
		lockKey: "other-lib:" + b.Prefix + ":" + name,
		ctx:     context.Background(),
	}
}

// grant sets the lock key as another library does when it grants the lock.
func (e *issueEnv) grant(t *testing.T, value string) {
	t.Helper()
	require.NoError(t, e.b.Client.Set(e.ctx, e.lockKey, value, time.Minute).Err())
}

func (e *issueEnv) issue(t *testing.T, value string) fencedlock.Token {
	t.Helper()
	token, err := e.locker.IssueToken(e.ctx, e.lockKey, value)
	require.NoError(t, err)
	require.NotZero(t, token)
	return token
}

func TestIssueTokenSameGrantSameTokenNewGrantHigher(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := newIssueEnv(t, b, "orders")
		e.grant(t, "grant-1")
		t1 := e.issue(t, "grant-1")
		assert.Equal(t, t1, e.issue(t, "grant-1"), "the same grant asking again")

		// A Locker's token of some resource in between moves no counter
		// of IssueToken's.
		_, err := e.locker.TryAcquire(e.ctx, "unrelated", time.Minute)
		require.NoError(t, err)

		e.grant(t, "grant-2")
		t2 := e.issue(t, "grant-2")
		assert.Greater(t, t2, t1)
		assert.Equal(t, t2, e.issue(t, "grant-2"))

		// The old grant is refused now, and its token is not handed out.
		_, err = e.locker.IssueToken(e.ctx, e.lockKey, "grant-1")
		assert.ErrorIs(t, err, fencedlock.ErrLockLost)

		// The lock key itself is untouched: value and TTL.
		v, err := b.Client.Get(e.ctx, e.lockKey).Result()
		require.NoError(t, err)
		assert.Equal(t, "grant-2", v)
		ttl, err := b.Client.PTTL(e.ctx, e.lockKey).Result()
		require.NoError(t, err)
		assert.Greater(t, ttl, 50*time.Second)

		// The tokens are seeded from the Redis clock, in microseconds.
		assert.Greater(t, uint64(t1), uint64(time.Now().Add(-time.Hour).UnixMicro()))
	})
}

// A store fences a paused holder of another library's lock by the tokens
// IssueToken gave the two grants.
func TestIssueTokenFencesStore(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := newIssueEnv(t, b, "store")
		store := fencedlock.NewRedisStore(b.Client, fencedlock.WithStorePrefix(b.Prefix))
		e.grant(t, "a")
		ta := e.issue(t, "a")
		require.NoError(t, store.Put(e.ctx, "queue", ta, []byte("a1")))

		// a's lock expires; b takes it and writes.
		require.NoError(t, b.Client.Del(e.ctx, e.lockKey).Err())
		e.grant(t, "b")
		tb := e.issue(t, "b")
		require.NoError(t, store.Put(e.ctx, "queue", tb, []byte("b1")))

		// a wakes up and writes with its token.
		err := store.Put(e.ctx, "queue", ta, []byte("a2"))
		var stale *fencedlock.StaleTokenError
		require.ErrorAs(t, err, &stale)
		assert.Equal(t, fencedlock.StaleTokenError{Resource: "queue", Token: ta, Current: tb}, *stale)
	})
}

func TestIssueTokenLockNotHeld(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		for _, c := range []struct {
			name  string
			setup func(e *issueEnv) error
		}{
			{"missing", func(e *issueEnv) error { return nil }},
			{"other_value", func(e *issueEnv) error { return b.Client.Set(e.ctx, e.lockKey, "someone-else", 0).Err() }},
			{"value_with_the_owner_as_prefix", func(e *issueEnv) error { return b.Client.Set(e.ctx, e.lockKey, "mine-and-more", 0).Err() }},
			{"list", func(e *issueEnv) error { return b.Client.RPush(e.ctx, e.lockKey, "mine").Err() }},
			{"hash", func(e *issueEnv) error { return b.Client.HSet(e.ctx, e.lockKey, "mine", "mine").Err() }},
		} {
			c := c
			t.Run(c.name, func(t *testing.T) {
				e := newIssueEnv(t, b, c.name)
				require.NoError(t, c.setup(e))
				token, err := e.locker.IssueToken(e.ctx, e.lockKey, "mine")
				assert.ErrorIs(t, err, fencedlock.ErrLockLost)
				assert.Contains(t, err.Error(), e.lockKey)
				assert.Zero(t, token)
				// Nothing was written: no counter, no record.
				keys, err := b.Client.Keys(e.ctx, b.Prefix+":*").Result()
				require.NoError(t, err)
				assert.Empty(t, keys)
			})
		}
	})
}

// The same grant keeps its token when its counter is lost, and the
// counter is raised to it, so the next grant does not get it again.
// (TestIssueTokenNewGrantAfterCounterLost: nor when the next grant asks
// first.)
func TestIssueTokenCounterLost(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := newIssueEnv(t, b, "lost")
		counter := e.locker.IssuedTokenKey(e.lockKey)
		e.grant(t, "g1")
		// A counter far ahead of the clock: a lost counter re-seeded from
		// the clock would be below it.
		require.NoError(t, e.locker.AdvanceIssued(e.ctx, e.lockKey, 1<<52))
		t1 := e.issue(t, "g1")
		require.Equal(t, fencedlock.Token(1<<52+1), t1)

		require.NoError(t, b.Client.Del(e.ctx, counter).Err())
		assert.Equal(t, t1, e.issue(t, "g1"))
		c, err := b.Client.Get(e.ctx, counter).Result()
		require.NoError(t, err)
		assert.Equal(t, t1.String(), c)

		e.grant(t, "g2")
		assert.Equal(t, t1+1, e.issue(t, "g2"))
	})
}

// A new grant asking first after the counter was lost gets a token above
// the last one issued, though the clock the counter is seeded from is
// below it.
func TestIssueTokenNewGrantAfterCounterLost(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := newIssueEnv(t, b, "lost-new")
		require.NoError(t, e.locker.AdvanceIssued(e.ctx, e.lockKey, 1<<52))
		e.grant(t, "g1")
		t1 := e.issue(t, "g1")
		require.Equal(t, fencedlock.Token(1<<52+1), t1)
		require.NoError(t, b.Client.Del(e.ctx, e.locker.IssuedTokenKey(e.lockKey)).Err())
		e.grant(t, "g2")
		assert.Equal(t, t1+1, e.issue(t, "g2"))
	})
}

// Record tokens are compared as numbers, not as strings: "95" is below
// 2^63-1 though it sorts above it.
func TestIssueTokenShortRecordToken(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := newIssueEnv(t, b, "short")
		e.grant(t, "mine")
		require.NoError(t, b.Client.HSet(e.ctx, e.locker.IssuedRecordKey(e.lockKey), "v", "mine", "t", "95").Err())
		assert.Equal(t, fencedlock.Token(95), e.issue(t, "mine"))
		c, err := b.Client.Get(e.ctx, e.locker.IssuedTokenKey(e.lockKey)).Result()
		require.NoError(t, err)
		assert.Equal(t, "95", c)
	})
}

// The key names are kept in Redis across versions of the library: a
// change of them loses every counter. They also never equal a key of a
// resource, which begins "<prefix>:{".
func TestIssuedKeyNames(t *testing.T) {
	for _, c := range []struct{ prefix, lockKey, counter, record string }{
		{"fencedlock", "plain", "fencedlock:issued-token:{plain}:plain", "fencedlock:issued:{plain}:plain"},
		{"fencedlock", "locks:{orders}", "fencedlock:issued-token:{orders}:locks:{orders}", "fencedlock:issued:{orders}:locks:{orders}"},
		{"fencedlock", "a{b", "fencedlock:issued-token:{a{b}:a{b", "fencedlock:issued:{a{b}:a{b"},
		{"fencedlock", "a}b", "fencedlock:issued-token:{20658}:a}b", "fencedlock:issued:{20658}:a}b"},
		{"fencedlock", "{}x", "fencedlock:issued-token:{19354}:{}x", "fencedlock:issued:{19354}:{}x"},
		{"", "plain", "issued-token:{plain}:plain", "issued:{plain}:plain"},
	} {
		l := fencedlock.New(nil, fencedlock.WithPrefix(c.prefix))
		assert.Equal(t, c.counter, l.IssuedTokenKey(c.lockKey))
		assert.Equal(t, c.record, l.IssuedRecordKey(c.lockKey))
		assert.Equal(t, fencedlock.HashSlot(c.lockKey), fencedlock.HashSlot(c.counter), c.lockKey)
	}
	// A resource whose keys looked like IssueToken's under the earlier
	// layout "<prefix>:{<tag>}:issued-token:<lockKey>".
	l := fencedlock.New(nil)
	assert.NotEqual(t, l.TokenKey("a}:issued-token:{a}"), l.IssuedTokenKey("{a}}:token"))
}

// After the counter and record are lost together (a restart without
// persistence), a new grant gets a token from the clock, above the
// old ones.
func TestIssueTokenAfterFlush(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := newIssueEnv(t, b, "flush")
		e.grant(t, "g1")
		t1 := e.issue(t, "g1")
		keys, err := b.Client.Keys(e.ctx, b.Prefix+":*").Result()
		require.NoError(t, err)
		require.Len(t, keys, 2, "counter and record")
		require.NoError(t, b.Client.Del(e.ctx, keys...).Err())
		if !b.Real {
			// miniredis's clock stands still unless moved.
			b.Miniredis().SetTime(time.Now().Add(time.Second))
		} else {
			waitUntil(t, func() bool { return serverMicros(t, b) > uint64(t1) }, "the server clock to pass the first token")
		}
		e.grant(t, "g2")
		assert.Greater(t, e.issue(t, "g2"), t1)
	})
}

func TestAdvanceIssued(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := newIssueEnv(t, b, "advance")
		e.grant(t, "g1")
		t1 := e.issue(t, "g1")
		// A floor a day ahead of the clock the counter is seeded from.
		ahead := t1 + fencedlock.Token(24*time.Hour/time.Microsecond)
		require.NoError(t, e.locker.AdvanceIssued(e.ctx, e.lockKey, ahead))
		assert.Equal(t, t1, e.issue(t, "g1"), "a grant keeps its token")
		e.grant(t, "g2")
		assert.Equal(t, ahead+1, e.issue(t, "g2"))
		// A lower floor changes nothing.
		require.NoError(t, e.locker.AdvanceIssued(e.ctx, e.lockKey, 5))
		e.grant(t, "g3")
		assert.Equal(t, ahead+2, e.issue(t, "g3"))

		for _, floor := range []fencedlock.Token{0, 1<<63 - 1, 1<<64 - 1} {
			err := e.locker.AdvanceIssued(e.ctx, e.lockKey, floor)
			assert.ErrorIs(t, err, fencedlock.ErrInvalidToken, "floor %d", floor)
		}
	})
}

// The highest token there is, 2^63-1, is issued once: the grant that has
// it gets it again when it asks again, and a new grant is refused, since
// no token can follow it.
func TestIssueTokenHighest(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := newIssueEnv(t, b, "highest")
		require.NoError(t, e.locker.AdvanceIssued(e.ctx, e.lockKey, 1<<63-2))
		e.grant(t, "g1")
		assert.Equal(t, fencedlock.Token(1<<63-1), e.issue(t, "g1"))
		assert.Equal(t, fencedlock.Token(1<<63-1), e.issue(t, "g1"), "the same grant asking again")
		e.grant(t, "g2")
		_, err := e.locker.IssueToken(e.ctx, e.lockKey, "g2")
		assert.ErrorIs(t, err, fencedlock.ErrCorrupt, "a new grant after the highest token")
	})
}

// Tokens beyond 2^53 are exact: the script never formats them as Lua
// numbers (real Redis would print 1.2345678901235e+17).
func TestIssueTokenBeyond2p53(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := newIssueEnv(t, b, "big")
		const floor = fencedlock.Token(123456789012345678)
		require.NoError(t, e.locker.AdvanceIssued(e.ctx, e.lockKey, floor))
		e.grant(t, "g1")
		assert.Equal(t, floor+1, e.issue(t, "g1"))
		assert.Equal(t, floor+1, e.issue(t, "g1"))
		e.grant(t, "g2")
		assert.Equal(t, floor+2, e.issue(t, "g2"))
	})
}

func TestIssueTokenCorrupt(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		for _, c := range []struct {
			name    string
			counter any    // set as a string when not nil
			record  []any  // HSET arguments, when not nil
			list    string // "counter" or "record": make it a list
		}{
			{name: "counter_not_a_number", counter: "abc"},
			{name: "counter_negative", counter: "-5"},
			{name: "counter_at_max", counter: "9223372036854775807"},
			{name: "counter_list", list: "counter"},
			{name: "record_list", list: "record"},
			{name: "record_token_not_a_number", record: []any{"v", "mine", "t", "x1"}},
			{name: "record_token_zero", record: []any{"v", "mine", "t", "0"}},
			{name: "record_token_above_max", record: []any{"v", "mine", "t", "9223372036854775808"}},
			{name: "record_token_at_max_counter_below", counter: "95", record: []any{"v", "mine", "t", "9223372036854775807"}},
			{name: "record_without_token", record: []any{"v", "mine"}},
			{name: "record_without_value", record: []any{"t", "95"}},
			{name: "record_of_another_grant_token_not_a_number", record: []any{"v", "other", "t", "x1"}},
			{name: "same_grant_counter_not_a_number", counter: "abc", record: []any{"v", "mine", "t", "95"}},
			{name: "new_grant_counter_not_a_number", counter: "abc", record: []any{"v", "other", "t", "95"}},
		} {
			c := c
			t.Run(c.name, func(t *testing.T) {
				e := newIssueEnv(t, b, c.name)
				e.grant(t, "mine")
				counter := e.locker.IssuedTokenKey(e.lockKey)
				record := e.locker.IssuedRecordKey(e.lockKey)
				if c.counter != nil {
					require.NoError(t, b.Client.Set(e.ctx, counter, c.counter, 0).Err())
				}
				if c.record != nil {
					require.NoError(t, b.Client.HSet(e.ctx, record, c.record...).Err())
				}
				switch c.list {
				case "counter":
					require.NoError(t, b.Client.RPush(e.ctx, counter, "1").Err())
				case "record":
					require.NoError(t, b.Client.RPush(e.ctx, record, "1").Err())
				}
				before := dumpKeys(t, b)
				_, err := e.locker.IssueToken(e.ctx, e.lockKey, "mine")
				assert.ErrorIs(t, err, fencedlock.ErrCorrupt)
				assert.Equal(t, before, dumpKeys(t, b), "nothing changed")
			})
		}
	})
}

// dumpKeys returns the test's keys and their DUMP serialisations.
func dumpKeys(t *testing.T, b *redistest.Backend) map[string]string {
	t.Helper()
	ctx := context.Background()
	keys, err := b.Client.Keys(ctx, b.Prefix+":*").Result()
	require.NoError(t, err)
	m := make(map[string]string, len(keys))
	for _, k := range keys {
		typ, err := b.Client.Type(ctx, k).Result()
		require.NoError(t, err)
		switch typ {
		case "string":
			m[k], err = b.Client.Get(ctx, k).Result()
		case "list":
			var l []string
			l, err = b.Client.LRange(ctx, k, 0, -1).Result()
			m[k] = "list:" + strings.Join(l, ",")
		case "hash":
			var h map[string]string
			h, err = b.Client.HGetAll(ctx, k).Result()
			m[k] = fmt.Sprintf("hash:%v", h)
		default:
			t.Fatalf("key %s of type %s", k, typ)
		}
		require.NoError(t, err)
	}
	return m
}

func TestIssueTokenInvalidArguments(t *testing.T) {
	b := redistest.Mini(t)
	ctx := context.Background()
	require.NoError(t, b.Client.Set(ctx, "k", "v", 0).Err())
	for _, c := range []struct {
		name   string
		locker *fencedlock.Locker
		key    string
		value  string
	}{
		{"nil_locker", nil, "k", "v"},
		{"zero_locker", &fencedlock.Locker{}, "k", "v"},
		{"nil_client", fencedlock.New(nil), "k", "v"},
		{"empty_key", fencedlock.New(b.Client), "", "v"},
		{"empty_value", fencedlock.New(b.Client), "k", ""},
		{"prefix_with_tag", fencedlock.New(b.Client, fencedlock.WithPrefix("app{1}")), "k", "v"},
		{"prefix_with_open_brace", fencedlock.New(b.Client, fencedlock.WithPrefix("app{")), "k", "v"},
	} {
		c := c
		t.Run(c.name, func(t *testing.T) {
			_, err := c.locker.IssueToken(ctx, c.key, c.value)
			assert.ErrorIs(t, err, fencedlock.ErrInvalidArgument)
			if c.value != "" {
				err = c.locker.AdvanceIssued(ctx, c.key, 10)
				assert.ErrorIs(t, err, fencedlock.ErrInvalidArgument)
			}
		})
	}
	keys, err := b.Client.Keys(ctx, "*").Result()
	require.NoError(t, err)
	assert.Equal(t, []string{"k"}, keys, "nothing written")
}

func TestIssueTokenDoneContext(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := newIssueEnv(t, b, "ctx")
		e.grant(t, "g")
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := e.locker.IssueToken(ctx, e.lockKey, "g")
		assert.ErrorIs(t, err, context.Canceled)
		assert.Empty(t, dumpKeys(t, b))
	})
}

// Many goroutines of one grant get one token; every new grant a higher
// one.
func TestIssueTokenConcurrent(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		e := newIssueEnv(t, b, "concurrent")
		var last fencedlock.Token
		for g := 0; g < 5; g++ {
			value := fmt.Sprintf("grant-%d", g)
			e.grant(t, value)
			tokens := make([]fencedlock.Token, 8)
			errs := make([]error, len(tokens))
			var wg sync.WaitGroup
			for i := range tokens {
				i := i
				wg.Add(1)
				go func() {
					defer wg.Done()
					tokens[i], errs[i] = e.locker.IssueToken(e.ctx, e.lockKey, value)
				}()
			}
			wg.Wait()
			for i, tok := range tokens {
				require.NoError(t, errs[i])
				assert.Equal(t, tokens[0], tok, "grant %d", g)
			}
			assert.Greater(t, tokens[0], last)
			last = tokens[0]
		}
	})
}

// The counter and record share the lock key's hash slot, whatever the
// key: with a hash tag, without one, and with braces that make no tag.
// On a real one-node cluster, which refuses cross-slot scripts, the whole
// use runs through a ClusterClient.
func TestIssueTokenClusterSlots(t *testing.T) {
	keys := []string{
		"plain", "locks:{orders}", "{orders}", "a{b", "a}b", "{}x", "x{}y{z}",
		"}{", "{a}{b}", "with space", "ünï{cödé}", strings.Repeat("k", 300),
	}
	for _, key := range keys {
		locker := fencedlock.New(nil)
		counter, record := locker.IssuedTokenKey(key), locker.IssuedRecordKey(key)
		assert.Equal(t, fencedlock.HashSlot(key), fencedlock.HashSlot(counter), "key %q, counter %q", key, counter)
		assert.Equal(t, fencedlock.HashSlot(key), fencedlock.HashSlot(record), "key %q, record %q", key, record)
		assert.True(t, strings.HasSuffix(counter, "}:"+key), counter)
		assert.True(t, strings.HasSuffix(record, "}:"+key), record)
	}

	srv := redistest.StartCluster(t)
	ctx := context.Background()
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr}})
	t.Cleanup(func() { client.Close() })
	locker := fencedlock.New(client)
	for _, key := range keys {
		want, err := client.ClusterKeySlot(ctx, key).Result()
		require.NoError(t, err)
		got, err := client.ClusterKeySlot(ctx, locker.IssuedTokenKey(key)).Result()
		require.NoError(t, err)
		assert.Equal(t, want, got, "key %q", key)

		require.NoError(t, client.Set(ctx, key, "g1", time.Minute).Err())
		t1, err := locker.IssueToken(ctx, key, "g1")
		require.NoError(t, err, "key %q", key)
		require.NoError(t, client.Set(ctx, key, "g2", time.Minute).Err())
		t2, err := locker.IssueToken(ctx, key, "g2")
		require.NoError(t, err, "key %q", key)
		assert.Greater(t, t2, t1, "key %q", key)
		require.NoError(t, locker.AdvanceIssued(ctx, key, t2+10), "key %q", key)

		record := locker.IssuedRecordKey(key)
		got, err = client.ClusterKeySlot(ctx, record).Result()
		require.NoError(t, err)
		assert.Equal(t, want, got, "record of key %q", key)
		n, err := client.Exists(ctx, record).Result()
		require.NoError(t, err)
		assert.Equal(t, int64(1), n, "record %q", record)
	}
}
