package call

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock/internal/racetest"
)

// Bounded returns f's result, or ctx's error as soon as ctx ends, and
// sends nothing once ctx has ended.
func TestBounded(t *testing.T) {
	v, err := Bounded(context.Background(), false, func(context.Context) (int, error) { return 7, nil })
	require.NoError(t, err)
	assert.Equal(t, 7, v)

	ended, cancel := context.WithCancel(context.Background())
	cancel()
	ran := false
	_, err = Bounded(ended, false, func(context.Context) (int, error) { ran = true; return 0, nil })
	var ns *NotSentError
	require.ErrorAs(t, err, &ns)
	assert.ErrorIs(t, err, context.Canceled)
	assert.False(t, ran, "f ran although ctx had ended")
	assert.True(t, Unsent(err, true))
	assert.True(t, Unsent(err, false))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	release := make(chan struct{})
	defer close(release)
	start := time.Now()
	_, err = Bounded(ctx, false, func(context.Context) (int, error) { <-release; return 1, nil })
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), time.Second, "Bounded waited for f past ctx")
	assert.False(t, Unsent(err, false), "f may have sent its command")
}

// With a client that heeds deadlines and a ctx that has one, Bounded runs
// f on the caller's goroutine (no goroutine, no allocation) and reports
// the connection's timeout at the deadline as ctx's error; a ctx that can
// only be cancelled still gets a goroutine, so that the cancel is heeded
// at once.
func TestBoundedHeeds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	f := func(context.Context) (int, error) { return 7, nil }
	allocs := testing.AllocsPerRun(100, func() {
		if v, err := Bounded(ctx, true, f); v != 7 || err != nil {
			t.Fatalf("Bounded = %d, %v", v, err)
		}
	})
	assert.Zero(t, allocs, "Bounded allocated although the client heeds ctx's deadline")
	caller := goroutineID()
	var ran string
	_, _ = Bounded(ctx, true, func(context.Context) (int, error) { ran = goroutineID(); return 0, nil })
	assert.Equal(t, caller, ran, "Bounded started a goroutine although the client heeds ctx's deadline")
	_, _ = Bounded(ctx, false, func(context.Context) (int, error) { ran = goroutineID(); return 0, nil })
	assert.NotEqual(t, caller, ran, "without heeds, f must run in a goroutine of its own")
	_, _ = BoundedOn(ctx, false, 0, func(context.Context, int) (int, error) { ran = goroutineID(); return 0, nil })
	assert.NotEqual(t, caller, ran, "without heeds, f must run in a goroutine of its own")

	// The connection's deadline is ctx's: its timeout comes back as ctx's
	// error, and a reply that came is kept.
	short, cancelShort := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancelShort()
	timeout := &net.OpError{Op: "read", Err: errTimeout{}}
	_, err := Bounded(short, true, func(ctx context.Context) (int, error) {
		d, _ := ctx.Deadline()
		time.Sleep(time.Until(d))
		return 0, timeout
	})
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.False(t, Unsent(err, false), "f may have sent its command")
	_, err = Bounded(short, true, func(context.Context) (int, error) { return 0, replyErr("ERR late") })
	var ns *NotSentError
	assert.ErrorAs(t, err, &ns, "ctx had ended: nothing may be sent")
	long, cancelLong := context.WithTimeout(context.Background(), time.Hour)
	defer cancelLong()
	_, err = Bounded(long, true, func(context.Context) (int, error) { return 0, replyErr("ERR refused") })
	assert.EqualError(t, err, "ERR refused")
	_, err = Bounded(long, true, func(context.Context) (int, error) { return 0, timeout })
	assert.Same(t, timeout, err, "the client's own timeout, before ctx's deadline, is the client's error")

	// Cancel without a deadline: f runs apart, and Bounded returns at the
	// cancel.
	cancellable, cancelNow := context.WithCancel(context.Background())
	release := make(chan struct{})
	defer close(release)
	time.AfterFunc(20*time.Millisecond, cancelNow)
	start := time.Now()
	_, err = Bounded(cancellable, true, func(context.Context) (int, error) { <-release; return 1, nil })
	assert.ErrorIs(t, err, context.Canceled)
	assert.Less(t, time.Since(start), time.Second, "Bounded waited for f past the cancel")
}

// goroutineID returns the number of the goroutine that calls it.
func goroutineID() string {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	return strings.Fields(string(b))[1]
}

// A round trip run apart allocates nothing once warm: its job, result
// and channel come from a pool. (Not under the race detector, whose
// sync.Pool drops what it is given at random.)
func TestApartAllocatesNothing(t *testing.T) {
	if racetest.Enabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	ctx.Done()
	f := func(_ context.Context, a [3]any) (any, error) { return a[1], nil }
	allocs := testing.AllocsPerRun(1000, func() {
		if v, err := BoundedOn(ctx, false, [3]any{nil, 7, nil}, f); v != 7 || err != nil {
			t.Fatalf("BoundedOn = %v, %v", v, err)
		}
	})
	assert.Zero(t, allocs)
}

// Jobs are reused: a caller that left at the end of its ctx, while its
// round trip still runs, never sees another call's result, nor another
// caller its late one; many at once, more than the channel that starts
// them holds, each get their own.
func TestApartKeepsEachCallsResult(t *testing.T) {
	f := func(ctx context.Context, n int) (int, error) {
		if n < 0 {
			<-ctx.Done()
			time.Sleep(20 * time.Millisecond) // the caller leaves first, mostly
			return n, errors.New("late")
		}
		return n * 2, nil
	}
	var wg sync.WaitGroup
	var left atomic.Int32
	for g := 0; g < 200; g++ {
		g := g
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; i <= 20; i++ {
				n := g*1000 + i
				if i%5 == 0 {
					ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
					v, err := BoundedOn(ctx, false, -n, f)
					cancel()
					switch {
					case v == 0 && errors.Is(err, context.DeadlineExceeded):
						left.Add(1)
					case v != -n || err == nil || err.Error() != "late":
						// not its own answer, which may come with the
						// end of ctx
						t.Errorf("BoundedOn(%d) left at its deadline got %d, %v", -n, v, err)
					}
					continue
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				v, err := BoundedOn(ctx, false, n, f)
				cancel()
				if v != 2*n || err != nil {
					t.Errorf("BoundedOn(%d) = %d, %v; want %d", n, v, err, 2*n)
				}
			}
		}()
	}
	wg.Wait()
	assert.Positive(t, left.Load(), "no call left before its round trip ended")
	// the round trips of the calls that left end, and put their jobs back
	time.Sleep(100 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := 1; i <= 100; i++ {
		v, err := BoundedOn(ctx, false, i, f)
		require.NoError(t, err)
		require.Equal(t, 2*i, v)
	}
}

// An answer that comes with the end of ctx (f returns as ctx ends, and
// its goroutine tells so before the caller has seen the end) is the
// call's result, and the job it came in is clean when it is reused: the
// next call through the same pool gets its own result, not a stale
// signal of this one.
func TestApartKeepsAnAnswerThatCameWithTheEnd(t *testing.T) {
	came := 0
	for i := 1; i <= 2000; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		v, err := BoundedOn(ctx, false, i, func(_ context.Context, n int) (int, error) {
			cancel() // ctx ends as f returns
			return n, nil
		})
		switch {
		case err == nil && v == i:
			came++
		case errors.Is(err, context.Canceled) && v == 0:
		default:
			t.Fatalf("BoundedOn(%d) at the end of ctx = %d, %v", i, v, err)
		}
		lasting, stop := context.WithTimeout(context.Background(), time.Minute)
		v, err = BoundedOn(lasting, false, -i, func(_ context.Context, n int) (int, error) { return n, nil })
		stop()
		if err != nil || v != -i {
			t.Fatalf("BoundedOn(%d) after a call whose ctx ended with its answer = %d, %v", -i, v, err)
		}
	}
	assert.Positive(t, came, "no answer came with the end of ctx")
}

// A job put back in its pool refers to nothing of its call: neither the
// argument nor the result of a round trip is kept alive by the pool,
// whether the caller took the result or left at the end of ctx.
func TestApartKeepsNothingAlive(t *testing.T) {
	type big [1 << 16]byte
	collected := func(t *testing.T, call func(a *big)) {
		t.Helper()
		gone := make(chan struct{}, 2)
		func() {
			a := new(big)
			runtime.SetFinalizer(a, func(*big) { gone <- struct{}{} })
			call(a)
		}()
		time.Sleep(200 * time.Millisecond) // a round trip left behind ends
		runtime.GC()                       // one GC: a pooled job survives it
		select {
		case <-gone:
		case <-time.After(2 * time.Second):
			t.Fatal("the argument of a finished round trip is still alive")
		}
	}
	t.Run("answered", func(t *testing.T) {
		collected(t, func(a *big) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			v, err := BoundedOn(ctx, false, a, func(_ context.Context, a *big) (*big, error) { return a, nil })
			require.NoError(t, err)
			require.Same(t, a, v)
		})
	})
	t.Run("left", func(t *testing.T) {
		collected(t, func(a *big) {
			ctx, cancel := context.WithCancel(context.Background())
			release := make(chan struct{})
			go func() { time.Sleep(5 * time.Millisecond); cancel() }()
			_, err := BoundedOn(ctx, false, a, func(ctx context.Context, a *big) (*big, error) {
				<-ctx.Done()
				<-release
				return a, errors.New("late")
			})
			require.ErrorIs(t, err, context.Canceled)
			close(release)
		})
	})
}

type errTimeout struct{}

func (errTimeout) Error() string   { return "i/o timeout" }
func (errTimeout) Timeout() bool   { return true }
func (errTimeout) Temporary() bool { return true }

// Heeds is true only for go-redis clients made with ContextTimeoutEnabled
// that set deadlines on their connections.
func TestHeeds(t *testing.T) {
	for _, c := range []struct {
		name   string
		client any
		want   bool
	}{
		{"client", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), false},
		{"client heeding", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}), true},
		{"failover heeding", redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true}), true},
		{"cluster", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}), false},
		{"cluster heeding", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true}), true},
		{"ring heeding", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}, ContextTimeoutEnabled: true}), true},
		{"ring", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}}), false},
		{"client heeding, no read deadlines", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, ReadTimeout: -2}), false},
		{"client heeding, no write deadlines", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, WriteTimeout: -2}), false},
		{"client heeding, no timeouts of its own", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, ReadTimeout: -1, WriteTimeout: -1}), true},
		{"failover heeding, no read deadlines", redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true, ReadTimeout: -2}), false},
		{"cluster heeding, no read deadlines", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true, ReadTimeout: -2}), false},
		{"cluster heeding, no write deadlines", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true, WriteTimeout: -2}), false},
		{"ring heeding, no read deadlines", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}, ContextTimeoutEnabled: true, ReadTimeout: -2}), false},
		{"nil client", (*redis.Client)(nil), false},
		{"nil", nil, false},
		{"other", struct{}{}, false},
	} {
		assert.Equal(t, c.want, Heeds(c.client), c.name)
		if cl, ok := c.client.(interface{ Close() error }); ok && c.client != (*redis.Client)(nil) {
			_ = cl.Close()
		}
	}
}

// Err wraps ctx's cause when it says more than ctx's error; Cause tells
// it apart.
func TestErrAndCause(t *testing.T) {
	assert.NoError(t, Err(context.Background()))
	assert.NoError(t, Cause(context.Background()))

	plain, cancel := context.WithCancel(context.Background())
	cancel()
	assert.Equal(t, context.Canceled, Err(plain))
	assert.NoError(t, Cause(plain))

	lost := errors.New("lock lost")
	caused, cancelCause := context.WithCancelCause(context.Background())
	cancelCause(lost)
	assert.ErrorIs(t, Err(caused), lost)
	assert.ErrorIs(t, Err(caused), context.Canceled)
	assert.Equal(t, lost, Cause(caused))

	past, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	assert.Equal(t, context.DeadlineExceeded, Ended(past))
}

// NotNow is true for what a restart, a failover or a reshard answers,
// and false for what no wait ends.
func TestNotNow(t *testing.T) {
	reply := func(msg string) error { return replyErr(msg) }
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, true},
		{fmt.Errorf("wrapped: %w", syscall.ECONNRESET), true},
		{io.EOF, true},
		{io.ErrUnexpectedEOF, true},
		{redis.ErrPoolTimeout, true},
		{reply("LOADING Redis is loading the dataset in memory"), true},
		{reply("READONLY You can't write against a read only replica."), true},
		{reply("MASTERDOWN Link with MASTER is down"), true},
		{reply("CLUSTERDOWN The cluster is down"), true},
		{reply("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{reply("MOVED 3999 127.0.0.1:6381"), true},
		{reply("ASK 3999 127.0.0.1:6381"), true},
		{reply("BUSY Redis is busy running a script."), true},
		{reply("NOREPLICAS Not enough good replicas to write."), true},
		// Redis 5 and 6.2 wrap the error of a command inside a script.
		{reply("ERR Error running script (call to f_4066): @user_script:260: @user_script: 260: -READONLY You can't write against a read only replica. "), true},
		{reply("ERR Error running script (call to f_4066): @user_script:12: -LOADING Redis is loading the dataset in memory"), true},
		{reply("ERR Error running script (call to f_4066): @user_script:13: @user_script: 13: The user executing the script can't run this command or subcommand"), false},
		{reply("ERR Error running script (call to f_4066): @user_script:9: -OOM command not allowed"), false},
		{reply("ASKING is not a reply"), false},
		{reply("OOM command not allowed when used memory > 'maxmemory'."), false},
		{reply("NOPERM this user has no permissions to run the 'time' command"), false},
		{reply("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{redis.ErrClosed, false},
		{errors.New("something else"), false},
		{nil, false},
	} {
		assert.Equal(t, c.want, NotNow(c.err), "%v", c.err)
	}
}

// Redirected tells a Cluster's redirects from other replies; a
// ClusterClient follows them, other clients do not.
func TestRedirected(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{replyErr("MOVED 3999 127.0.0.1:6381"), true},
		{fmt.Errorf("fencedlock: backend unavailable: acquire: %w", replyErr("ASK 3999 127.0.0.1:6381")), true},
		{replyErr("ASKING is not a reply"), false},
		{replyErr("TRYAGAIN Multiple keys request during rehashing of slot"), false},
		{errors.New("MOVED 3999 127.0.0.1:6381"), false}, // not a reply of Redis
		{nil, false},
	} {
		assert.Equal(t, c.want, Redirected(c.err), "%v", c.err)
	}
	assert.True(t, FollowsRedirects(redis.NewClusterClient(&redis.ClusterOptions{})))
	assert.False(t, FollowsRedirects(redis.NewClient(&redis.Options{})))
	assert.False(t, FollowsRedirects(nil))
	assert.True(t, ReadsReplicas(redis.NewClusterClient(&redis.ClusterOptions{ReadOnly: true})))
	assert.True(t, ReadsReplicas(redis.NewClusterClient(&redis.ClusterOptions{RouteRandomly: true})))
	assert.False(t, ReadsReplicas(redis.NewClusterClient(&redis.ClusterOptions{})))
	assert.False(t, ReadsReplicas(redis.NewClient(&redis.Options{})))
	assert.False(t, ReadsReplicas((*redis.ClusterClient)(nil)))
	assert.False(t, ReadsReplicas(nil))
}

// Unanswered tells a command that may have run from one that never went
// out and from an error reply. For a client that resends, a failure to
// connect may follow a copy that was sent: only a ctx that had ended
// before proves nothing went out.
func TestUnanswered(t *testing.T) {
	for _, resends := range []bool{false, true} {
		assert.True(t, Unanswered(io.EOF, resends))
		assert.True(t, Unanswered(context.DeadlineExceeded, resends))
		assert.False(t, Unanswered(replyErr("ERR no"), resends), "an error reply")
		assert.False(t, Unanswered(&NotSentError{context.Canceled}, resends))
	}
	never := []error{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, redis.ErrPoolTimeout, redis.ErrClosed, redis.ErrPoolExhausted}
	for _, err := range never {
		assert.False(t, Unanswered(err, false), "%v: never connected, and not resent", err)
		assert.True(t, Unanswered(err, true), "%v: an earlier copy may have gone out", err)
	}
	assert.True(t, IsReply(fmt.Errorf("x: %w", replyErr("ERR no"))))
}

// Resends tells the clients that send each command once (MaxRetries -1;
// for a Cluster, MaxRedirects -1 with MaxRetries unset or -1) from the
// rest.
func TestResends(t *testing.T) {
	for _, c := range []struct {
		client any
		want   bool
	}{
		{redis.NewClient(&redis.Options{}), true},
		{redis.NewClient(&redis.Options{MaxRetries: 1}), true},
		{redis.NewClient(&redis.Options{MaxRetries: -1}), false},
		{redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", MaxRetries: -1}), false},
		{redis.NewRing(&redis.RingOptions{}), true},
		{redis.NewRing(&redis.RingOptions{MaxRetries: -1}), false},
		{redis.NewClusterClient(&redis.ClusterOptions{}), true},
		{redis.NewClusterClient(&redis.ClusterOptions{MaxRetries: -1}), true},
		{redis.NewClusterClient(&redis.ClusterOptions{MaxRedirects: -1}), false},
		{redis.NewClusterClient(&redis.ClusterOptions{MaxRedirects: -1, MaxRetries: 2}), true},
		{redis.NewClusterClient(&redis.ClusterOptions{MaxRedirects: -1, MaxRetries: -1}), false},
		{(*redis.Client)(nil), true},
		{struct{ redis.UniversalClient }{}, true},
	} {
		assert.Equal(t, c.want, Resends(c.client), "%T", c.client)
		switch cl := c.client.(type) {
		case *redis.Client:
			if cl != nil {
				cl.Close()
			}
		case *redis.Ring:
			cl.Close()
		case *redis.ClusterClient:
			cl.Close()
		}
	}
}

// replyErr is an error reply of Redis, as go-redis returns one.
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}
