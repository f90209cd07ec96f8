package redistest

import (
	"context"
	"os"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock/internal/servertest"
)

// Backend is a Redis for one test: a fresh miniredis, or the process's
// shared real redis-server with a key prefix of the test's own.
//
// On a real Redis the prefix keeps tests apart only for the calls that
// honour it: FastForward does, but FlushAll and Restart act on the whole
// shared server, deleting the keys of every test of the process. A test
// that calls them must therefore not call t.Parallel (nor run beside one
// that does): tests running at the same time would lose their locks and
// counters under them.
type Backend struct {
	Name   string // "miniredis" or "redis"
	Real   bool
	Client *redis.Client
	Prefix string // unique to the test; pass it to WithPrefix/WithStorePrefix

	mini   *miniredis.Miniredis
	server *Server
}

// FastForward moves time forward by d for the keys of this test: on
// miniredis its clock, on a real Redis the TTL of every key under Prefix
// (keys whose TTL runs out are deleted, as expiry would).
func (b *Backend) FastForward(tb testing.TB, d time.Duration) {
	tb.Helper()
	if b.mini != nil {
		b.mini.FastForward(d)
		return
	}
	ctx := context.Background()
	iter := b.Client.Scan(ctx, 0, b.Prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		key := iter.Val()
		pttl, err := b.Client.PTTL(ctx, key).Result()
		if err != nil {
			tb.Fatal(err)
		}
		if pttl < 0 {
			continue
		}
		if pttl <= d {
			b.Client.Del(ctx, key)
		} else {
			b.Client.PExpire(ctx, key, pttl-d)
		}
	}
	if err := iter.Err(); err != nil {
		tb.Fatal(err)
	}
}

// FlushAll deletes every key, as FLUSHALL or a lost Redis would. On a real
// Redis it flushes the whole shared server, not only this test's keys: see
// Backend.
func (b *Backend) FlushAll(tb testing.TB) {
	tb.Helper()
	if b.mini != nil {
		b.mini.FlushAll()
		return
	}
	if err := b.Client.FlushAll(context.Background()).Err(); err != nil {
		tb.Fatal(err)
	}
}

// Restart kills the Redis and starts it empty (no persistence). miniredis
// keeps its data across Restart, so there it flushes too. On a real Redis
// it restarts the whole shared server, which every test of the process
// uses: see Backend.
func (b *Backend) Restart(tb testing.TB) {
	tb.Helper()
	if b.mini != nil {
		b.mini.Close()
		b.mini.FlushAll()
		if err := b.mini.Restart(); err != nil {
			tb.Fatal(err)
		}
		return
	}
	b.server.Restart(tb)
}

// Miniredis returns the test's miniredis, or nil on a real Redis.
func (b *Backend) Miniredis() *miniredis.Miniredis { return b.mini }

var shared servertest.Shared[*Server]

// Shared returns the process's shared redis-server, starting it on first
// use. Stop it in TestMain with StopShared. It skips tb (fails it when
// CI=true) when redis-server is not on PATH.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	bin := Binary(tb)
	s, err := shared.Get(func() (*Server, error) { return start(bin) })
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// StopShared stops the shared server if one was started.
func StopShared() { shared.Stop() }

// Main runs m and stops the shared server; call it from TestMain:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
//
// When real-Redis tests were skipped because redis-server is not on PATH,
// it says so, and how to run them, in one line on stderr after the tests
// (see servertest.Program.Report).
func Main(m *testing.M) {
	code := m.Run()
	StopShared()
	program.Report(os.Stderr)
	os.Exit(code)
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// Each runs fn as two subtests, "miniredis" on a fresh miniredis and
// "redis" on the shared real redis-server. With RealOnlyEnv set to 1 the
// first is skipped: CI's server matrix sets it, as the miniredis runs do
// not depend on the server and run elsewhere in CI.
func Each(t *testing.T, fn func(t *testing.T, b *Backend)) {
	t.Helper()
	t.Run("miniredis", func(t *testing.T) {
		if os.Getenv(RealOnlyEnv) == "1" {
			t.Skip(RealOnlyEnv + "=1: the real server's run alone")
		}
		fn(t, Mini(t))
	})
	t.Run("redis", func(t *testing.T) { fn(t, Real(t)) })
}

// RealOnlyEnv names the environment variable that, set to 1, makes Each
// run its real-Redis subtest alone, and ClientSide skip its test. The
// server matrix (.ci/matrix) sets it.
const RealOnlyEnv = "FENCEDLOCK_TEST_REAL_ONLY"

// ClientSide marks a test whose subject is the client's handling of a
// fault made outside the server (a connection refused by a killed
// server, a proxy that stalls), which no server version changes: it
// skips tb where RealOnlyEnv is 1, in the server matrix, and runs
// everywhere else (the race run runs it on Debian's redis-server).
func ClientSide(tb testing.TB) {
	tb.Helper()
	if os.Getenv(RealOnlyEnv) == "1" {
		tb.Skip(RealOnlyEnv + "=1: the client's handling of a fault made outside the server, the same on every server")
	}
}

// Mini returns a Backend on a fresh miniredis, closed when t ends.
func Mini(tb testing.TB) *Backend {
	tb.Helper()
	m := miniredis.RunT(tb)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	tb.Cleanup(func() { c.Close() })
	return &Backend{Name: "miniredis", Client: c, Prefix: prefixFor(tb), mini: m}
}

// Real returns a Backend on the shared redis-server with a prefix unique
// to tb.
func Real(tb testing.TB) *Backend {
	tb.Helper()
	s := Shared(tb)
	return &Backend{Name: "redis", Real: true, Client: s.Client(tb), Prefix: prefixFor(tb), server: s}
}

var (
	seqMu sync.Mutex
	seq   int
)

func prefixFor(tb testing.TB) string {
	seqMu.Lock()
	seq++
	n := seq
	seqMu.Unlock()
	return "t" + strconv.Itoa(n) + "-" + unsafeChars.ReplaceAllString(tb.Name(), "_")
}
