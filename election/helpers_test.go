package election_test

import (
	"context"
	"errors"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/election"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// ACL rules of users that may run every command on every key but have no
// pub/sub: noChannels may use no channel (Redis 7's default for a new
// user), noPubSub may run no command of the @pubsub category.
var (
	noChannels = []string{"resetchannels", "+@all", "~*"}
	noPubSub   = []string{"allchannels", "+@all", "-@pubsub", "~*"}
)

// elPubSubDenied runs fn once for each kind of user without pub/sub. The
// user's client fails t when Redis answers one of its scripts with an
// error: no script may fail without pub/sub.
func elPubSubDenied(t *testing.T, fn func(t *testing.T, admin, user *redis.Client)) {
	for _, c := range []struct {
		name  string
		rules []string
	}{{"no channels", noChannels}, {"no pubsub commands", noPubSub}} {
		t.Run(c.name, func(t *testing.T) {
			admin, user := elACLUser(t, c.rules...)
			fn(t, admin, user)
		})
	}
}

// elACLUser starts a redis-server of the test's own, makes a user with
// rules there, and returns a client of the default user and one of the new
// user. It skips t on a server without ACL (Redis before 6), which it
// finds out from the server's answer to ACL WHOAMI.
func elACLUser(t *testing.T, rules ...string) (admin, user *redis.Client) {
	t.Helper()
	s := redistest.Start(t)
	admin = s.Client(t)
	ctx := context.Background()
	if err := admin.Do(ctx, "ACL", "WHOAMI").Err(); err != nil {
		if strings.Contains(strings.ToLower(err.Error()), "unknown command") {
			t.Skipf("the server has no ACL, so no user can be denied pub/sub (ACL WHOAMI: %v)", err)
		}
		t.Fatalf("ACL WHOAMI: %v", err)
	}
	args := []any{"ACL", "SETUSER", "candidate", "on", ">secret"}
	for _, r := range rules {
		args = append(args, r)
	}
	if err := admin.Do(ctx, args...).Err(); err != nil {
		t.Fatalf("ACL SETUSER candidate %v: %v", rules, err)
	}
	user = redis.NewClient(&redis.Options{Addr: s.Addr, Username: "candidate", Password: "secret"})
	user.AddHook(scriptErrors{t})
	t.Cleanup(func() { user.Close() })
	return admin, user
}

// scriptErrors is a client hook that fails its test when Redis answers a
// script with an error (NOSCRIPT, to which the client sends the script
// itself, aside).
type scriptErrors struct{ t *testing.T }

func (h scriptErrors) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h scriptErrors) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		var re redis.Error
		if strings.HasPrefix(cmd.Name(), "eval") && errors.As(err, &re) && !strings.HasPrefix(err.Error(), "NOSCRIPT") {
			h.t.Errorf("Redis answered a script with an error: %v", err)
		}
		return err
	}
}

func (h scriptErrors) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// elKeys returns the keys of the election name of l: its lock, its leader
// record, and its channel.
func elKeys(l *fencedlock.Locker, name string) (lock, record, channel string) {
	return mustKey(l.Key(name, "lock")), mustKey(l.Key(name, "leader")), mustKey(l.Key(name, "leaders"))
}

// mustKey returns the key of a Locker.Key that cannot fail: a name the
// test chose.
func mustKey(key string, err error) string {
	if err != nil {
		panic(err)
	}
	return key
}

// elNext returns the next leader that seen delivers, failing t when none
// comes within d or seen is closed.
func elNext(t *testing.T, seen <-chan election.Leader, d time.Duration) election.Leader {
	t.Helper()
	select {
	case l, ok := <-seen:
		if !ok {
			t.Fatal("Observe's channel closed")
		}
		return l
	case <-time.After(d):
		t.Fatalf("Observe delivered nothing within %v", d)
		return election.Leader{}
	}
}

// elNothing fails t when seen delivers a leader within d.
func elNothing(t *testing.T, seen <-chan election.Leader, d time.Duration, why string) {
	t.Helper()
	select {
	case l, ok := <-seen:
		if ok {
			t.Fatalf("Observe delivered %+v: %s", l, why)
		}
		t.Fatal("Observe's channel closed")
	case <-time.After(d):
	}
}

// splitClient is a client whose connections go to a server directly or,
// as many as proxied says, through a proxy.
type splitClient struct {
	*redis.Client
	proxied atomic.Int32 // how many of the next connections go through the proxy
	dials   atomic.Int32 // connections made

	mu     sync.Mutex
	direct map[string]bool // guarded by mu: the local addresses of direct connections
}

// elSplitClient returns a splitClient of b's server, closed when t ends,
// whose proxied connections go through p.
func elSplitClient(t *testing.T, b *redistest.Backend, p *redistest.Proxy) *splitClient {
	c := &splitClient{direct: map[string]bool{}}
	c.Client = redis.NewClient(&redis.Options{
		Addr: b.Client.Options().Addr,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c.dials.Add(1)
			through := c.proxied.Add(-1) >= 0
			if through {
				addr = p.Addr()
			}
			conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err == nil && !through {
				c.mu.Lock()
				c.direct[conn.LocalAddr().String()] = true
				c.mu.Unlock()
			}
			return conn, err
		},
	})
	t.Cleanup(func() { c.Close() })
	return c
}

// directSubscriber reports whether the server, asked through admin, has a
// client subscribed to one channel on one of c's direct connections.
func (c *splitClient) directSubscriber(ctx context.Context, admin *redis.Client) bool {
	list, err := admin.ClientList(ctx).Result()
	if err != nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, line := range strings.Split(list, "\n") {
		for _, f := range strings.Fields(line) {
			if addr, ok := strings.CutPrefix(f, "addr="); ok && c.direct[addr] && strings.Contains(line, " sub=1 ") {
				return true
			}
		}
	}
	return false
}

func elCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func elLocker(b *redistest.Backend) *fencedlock.Locker {
	return fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix))
}

// elNoGoroutinesLeft fails t if goroutines of the library or go-redis
// subscriptions still run a second after the test's terms ended.
func elNoGoroutinesLeft(t *testing.T) {
	t.Helper()
	ours := func() []string {
		buf := make([]byte, 1<<22)
		var found []string
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, "fencedlock/fencedlock.(*") || strings.Contains(g, "fencedlock/election.") || strings.Contains(g, "go-redis/v9.(*channel)") {
				found = append(found, g)
			}
		}
		return found
	}
	deadline := time.Now().Add(2 * time.Second)
	for len(ours()) > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if left := ours(); len(left) > 0 {
		t.Errorf("%d goroutines left:\n%s", len(left), strings.Join(left, "\n\n"))
	}
}
