package fencedlock

// Faults of a Lock's life after its grant: a heartbeat beside the
// caller's own Refresh, a Lock whose lease ran out by the local clock
// while Redis kept its key, and Do's release refused by the Locker's
// cleanup limit.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock/internal/call"
	"github.com/fencedlock/fencedlock/internal/redistest"
	"github.com/fencedlock/fencedlock/internal/script"
)

// isScript reports whether cmd runs s, by its SHA1 (EVALSHA) or its
// source (EVAL).
func isScript(cmd redis.Cmder, s *script.Script) bool {
	args := cmd.Args()
	return len(args) > 1 && (args[1] == s.EvalSHA(nil)[1] || args[1] == s.Source())
}

// refreshTTLArg returns the TTL in milliseconds a refresh command asks
// for.
func refreshTTLArg(cmd redis.Cmder) (int64, bool) {
	args := cmd.Args()
	if len(args) < 7 {
		return 0, false
	}
	ms, ok := args[6].(int64)
	return ms, ok
}

// hookFunc is a go-redis hook that runs process around each command.
type hookFunc func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error

func (h hookFunc) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h hookFunc) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h hookFunc) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { return h(ctx, cmd, next) }
}

// hookedLocker returns a Locker on b's server whose client runs h.
func hookedLocker(t *testing.T, b *redistest.Backend, h hookFunc, opts *redis.Options) *Locker {
	t.Helper()
	o := redis.Options{Addr: b.Client.Options().Addr}
	if opts != nil {
		o = *opts
		o.Addr = b.Client.Options().Addr
	}
	c := redis.NewClient(&o)
	c.AddHook(h)
	t.Cleanup(func() { c.Close() })
	return New(c, WithPrefix(b.Prefix))
}

type callerKey struct{}

// The heartbeat's refreshes stall (a connection that no longer answers)
// while the caller's own Refresh calls succeed: the heartbeat must not
// end the Lock by the lease's end it read before them.
func TestHeartbeatDoesNotEndALockTheCallerRefreshed(t *testing.T) {
	b := redistest.Real(t)
	l := hookedLocker(t, b, func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if isScript(cmd, refreshScript) && ctx.Value(callerKey{}) == nil {
			select {
			case <-ctx.Done():
				cmd.SetErr(ctx.Err())
				return ctx.Err()
			case <-time.After(2 * time.Second):
			}
		}
		return next(ctx, cmd)
	}, nil)
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), callerKey{}, true), 20*time.Second)
	defer cancel()

	const ttl = 300 * time.Millisecond
	lock, err := l.Acquire(ctx, "r", ttl, WithHeartbeat(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(ctx)
	start := time.Now()
	for time.Since(start) < time.Second {
		if err := lock.Refresh(ctx, ttl); err != nil {
			t.Fatalf("after %v: Refresh: %v", time.Since(start).Round(time.Millisecond), err)
		}
		if err := lock.Err(); err != nil {
			t.Fatalf("after %v, a Lock its caller refreshes every 50 ms ended: %v", time.Since(start).Round(time.Millisecond), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A heartbeat refresh sent while the caller's Refresh for a new TTL is on
// its way must not take the heartbeat back to the old TTL.
func TestHeartbeatGoesOnWithTheTTLOfARefreshItOverlapped(t *testing.T) {
	b := redistest.Real(t)
	const newTTL = 5 * time.Second
	var once sync.Once
	l := hookedLocker(t, b, func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if ms, ok := refreshTTLArg(cmd); ok && isScript(cmd, refreshScript) && ms == newTTL.Milliseconds() {
			// the caller's Refresh, held back before it is sent
			once.Do(func() { time.Sleep(250 * time.Millisecond) })
		}
		return next(ctx, cmd)
	}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	lock, err := l.Acquire(ctx, "r", 300*time.Millisecond, WithHeartbeat(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release(context.Background())
	if err := lock.Refresh(ctx, newTTL); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	time.Sleep(600 * time.Millisecond)
	_, ttl, _ := lock.lease()
	pttl := b.Client.PTTL(ctx, l.key("r", "lock")).Val()
	if ttl != newTTL || pttl < time.Second {
		t.Fatalf("Refresh(%v) returned nil, but the heartbeat goes on with TTL %v; the key's PTTL is %v", newTTL, ttl, pttl)
	}
	if err := lock.Err(); err != nil {
		t.Fatalf("the Lock ended: %v", err)
	}
}

// A Refresh that Redis ran (this owner's key, kept an hour) but whose
// answer came after the lease ran out by the local clock ends the Lock as
// lost; its Release must still delete the key, which nobody holds.
func TestReleaseOfALockThatRanOutDeletesItsKey(t *testing.T) {
	b := redistest.Real(t)
	l := hookedLocker(t, b, func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		err := next(ctx, cmd)
		if ms, ok := refreshTTLArg(cmd); ok && isScript(cmd, refreshScript) && ms == time.Hour.Milliseconds() {
			time.Sleep(400 * time.Millisecond) // the answer comes late
		}
		return err
	}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// Loaded, so that the refresh runs at once (not after a NOSCRIPT and
	// the hook's pause, when the key has expired).
	if err := b.Client.ScriptLoad(ctx, refreshLua).Err(); err != nil {
		t.Fatal(err)
	}
	lock, err := l.TryAcquire(ctx, "r", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	done := lock.Done() // watched: the expiry timer ends it at its lease
	rerr := lock.Refresh(ctx, time.Hour)
	if !errors.Is(rerr, ErrLockLost) {
		t.Fatalf("Refresh answered after the lease ran out: %v, want ErrLockLost", rerr)
	}
	select {
	case <-done:
	default:
		t.Fatal("Done is open after the lease ran out")
	}
	if !strings.Contains(rerr.Error(), "TTL of 300ms") {
		t.Errorf("the loss names another TTL than the lease's (300ms): %v", rerr)
	}
	if n := b.Client.Exists(ctx, l.key("r", "lock")).Val(); n != 1 {
		t.Fatalf("before Release the key is gone (Refresh: %v): nothing for Release to delete", rerr)
	}
	// A Release whose ctx has ended sends nothing, and does not use up
	// the one that deletes the key.
	ended, end := context.WithCancel(ctx)
	end()
	if err := lock.Release(ended); !errors.Is(err, ErrLockLost) {
		t.Fatalf("Release with an ended ctx after the lease ran out: %v, want its loss", err)
	}
	if err := lock.Release(ctx); !errors.Is(err, ErrLockLost) {
		t.Fatalf("Release after the lease ran out: %v, want its loss", err)
	}
	if n := b.Client.Exists(ctx, l.key("r", "lock")).Val(); n != 0 {
		t.Fatalf("after Release, the lock's key is still there (PTTL %v), this owner's, with nobody holding it", b.Client.PTTL(ctx, l.key("r", "lock")).Val())
	}
	// Another Release sends nothing more, and says the same.
	if err := lock.Release(ctx); !errors.Is(err, ErrLockLost) {
		t.Fatalf("second Release: %v, want the loss", err)
	}
}

// More Do calls end at once than the Locker runs cleanups: the release of
// the last is not started in the background. While ctx lasts, Do releases
// it itself; once ctx has ended, its heartbeat must stop all the same, so
// that the lock ends with its TTL instead of being kept for ever.
func TestDoWhoseReleaseIsNotStartedStopsItsHeartbeat(t *testing.T) {
	for _, ended := range []bool{false, true} {
		t.Run(fmt.Sprintf("ctx ended %v", ended), func(t *testing.T) { doReleaseNotStarted(t, ended) })
	}
}

func doReleaseNotStarted(t *testing.T, ctxEnded bool) {
	b := redistest.Real(t)
	var slow atomic.Bool
	l := hookedLocker(t, b, func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if slow.Load() && isScript(cmd, releaseScript) {
			time.Sleep(500 * time.Millisecond)
		}
		return next(ctx, cmd)
	}, &redis.Options{PoolSize: 200})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	doCtx, endDo := context.WithCancel(ctx)
	defer endDo()
	// Loaded, so that a release is slowed once, not again for an EVAL
	// after a NOSCRIPT.
	if err := b.Client.ScriptLoad(ctx, releaseLua).Err(); err != nil {
		t.Fatal(err)
	}

	const n = call.MaxRunning + 1
	ttl := 600 * time.Millisecond
	if !ctxEnded {
		ttl = 5 * time.Second // not gone by expiry before the checks
	}
	var started, wg sync.WaitGroup
	gate := make(chan struct{})
	started.Add(n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			err := l.Do(doCtx, fmt.Sprintf("r%d", i), ttl, func(context.Context, *Lock) error {
				started.Done()
				<-gate
				return nil
			})
			if err != nil {
				t.Errorf("Do %d: %v", i, err)
			}
		}(i)
	}
	started.Wait()
	slow.Store(true)
	if ctxEnded {
		endDo()
	}
	close(gate)
	wg.Wait()
	held := func() []string {
		var held []string
		for i := 0; i < n; i++ {
			if b.Client.Exists(ctx, l.key(fmt.Sprintf("r%d", i), "lock")).Val() == 1 {
				held = append(held, fmt.Sprintf("r%d", i))
			}
		}
		return held
	}
	if !ctxEnded {
		// Each Do returned once its release was done.
		if h := held(); len(h) > 0 {
			t.Fatalf("Do returned within its ctx, and the lock is still held: %v", h)
		}
		return
	}
	time.Sleep(4 * ttl)
	slow.Store(false)
	if h := held(); len(h) > 0 {
		t.Fatalf("%v after every Do returned, still locked in Redis, kept by a heartbeat: %v", 4*ttl, h)
	}
}

// An unconfirmed grant (WithReplicas, on a server without replicas)
// whose lease ran out during WAIT is released once: its Release deletes
// the key, and nothing sends the release script again.
func TestUnconfirmedGrantThatRanOutIsReleasedOnce(t *testing.T) {
	b := redistest.Real(t)
	var releases atomic.Int32
	c := redis.NewClient(&redis.Options{Addr: b.Client.Options().Addr})
	c.AddHook(hookFunc(func(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
		if isScript(cmd, releaseScript) {
			releases.Add(1)
		}
		return next(ctx, cmd)
	}))
	t.Cleanup(func() { c.Close() })
	l := New(c, WithPrefix(b.Prefix), WithReplicas(1, time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Client.ScriptLoad(ctx, releaseLua).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx, "r", 200*time.Millisecond); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("TryAcquire: %v, want ErrNotReplicated", err)
	}
	time.Sleep(100 * time.Millisecond) // a cleanup left in the background has run
	if n := releases.Load(); n != 1 {
		t.Errorf("the release script was sent %d times for one unconfirmed grant, want 1", n)
	}
	if b.Client.Exists(ctx, l.key("r", "lock")).Val() != 0 {
		t.Error("the unconfirmed grant's key is still there")
	}
}
