package fencedlock_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
	"github.com/fencedlock/fencedlock/observe"
)

// The benchmarks run on the real redis-server the tests start;
// docs/benchmarks.md gives the commands that reproduce its figures.

// BenchmarkAcquireRelease measures an uncontended cycle: TryAcquire (lock
// and token in one script) then Release.
func BenchmarkAcquireRelease(b *testing.B) {
	benchCycle(b, func(ctx context.Context, l *fencedlock.Locker) (*fencedlock.Lock, error) {
		return l.TryAcquire(ctx, "bench", 10*time.Second)
	})
}

// BenchmarkAcquireWaitRelease is BenchmarkAcquireRelease with Acquire, the
// call that would wait, taking the free lock at its first attempt.
func BenchmarkAcquireWaitRelease(b *testing.B) {
	benchCycle(b, func(ctx context.Context, l *fencedlock.Locker) (*fencedlock.Lock, error) {
		return l.Acquire(ctx, "bench", 10*time.Second)
	})
}

// BenchmarkAcquireReleaseWithDeadline is BenchmarkAcquireRelease with a
// ctx that has a deadline, as most callers' have: each round trip then
// runs in a goroutine of its own, so that it returns by the deadline
// whatever the client does.
func BenchmarkAcquireReleaseWithDeadline(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	benchCycleCtx(b, ctx, func(ctx context.Context, l *fencedlock.Locker) (*fencedlock.Lock, error) {
		return l.TryAcquire(ctx, "bench", 10*time.Second)
	})
}

// BenchmarkAcquireReleaseWithDeadlineHeeding is
// BenchmarkAcquireReleaseWithDeadline with a client made with
// ContextTimeoutEnabled, which ends round trips at ctx's deadline itself:
// they then run on the caller's goroutine, as under
// context.Background().
func BenchmarkAcquireReleaseWithDeadlineHeeding(b *testing.B) {
	be := redistest.Real(b)
	heeding := redis.NewClient(&redis.Options{Addr: be.Client.Options().Addr, ContextTimeoutEnabled: true})
	defer heeding.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	benchLoop(b, ctx, be.Client, fencedlock.New(heeding, fencedlock.WithPrefix(be.Prefix)), func(ctx context.Context, l *fencedlock.Locker) (*fencedlock.Lock, error) {
		return l.TryAcquire(ctx, "bench", 10*time.Second)
	})
}

// BenchmarkAcquireReleaseObserved is BenchmarkAcquireRelease without an
// observer, with one that does nothing, and with a logger that drops
// every record (slog.LevelError): what WithObserver and WithLogger cost
// on the uncontended path. (The fencedotel module benchmarks its own
// Observer.)
func BenchmarkAcquireReleaseObserved(b *testing.B) {
	try := func(ctx context.Context, l *fencedlock.Locker) (*fencedlock.Lock, error) {
		return l.TryAcquire(ctx, "bench", 10*time.Second)
	}
	noop := observe.Func(func(ctx context.Context, _ observe.Event) context.Context { return ctx })
	quiet := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError}))
	b.Run("none", func(b *testing.B) { benchCycleCtx(b, context.Background(), try) })
	b.Run("noop", func(b *testing.B) { benchCycleCtx(b, context.Background(), try, fencedlock.WithObserver(noop)) })
	b.Run("quiet-logger", func(b *testing.B) { benchCycleCtx(b, context.Background(), try, fencedlock.WithLogger(quiet)) })
}

// benchCycle measures acquire, then Release, on a free lock.
func benchCycle(b *testing.B, acquire func(context.Context, *fencedlock.Locker) (*fencedlock.Lock, error)) {
	benchCycleCtx(b, context.Background(), acquire)
}

// benchCycleCtx is benchCycle with ctx. Besides time and allocations it
// reports what Redis did per cycle: the commands it ran (scripts' inner
// calls included) and its main thread's CPU time, from INFO before and
// after the timed loop.
func benchCycleCtx(b *testing.B, ctx context.Context, acquire func(context.Context, *fencedlock.Locker) (*fencedlock.Lock, error), opts ...fencedlock.Option) {
	be := redistest.Real(b)
	locker := fencedlock.New(be.Client, append([]fencedlock.Option{fencedlock.WithPrefix(be.Prefix)}, opts...)...)
	benchLoop(b, ctx, be.Client, locker, acquire)
}

// benchLoop runs acquire and Release on locker b.N times, and reports
// what the Redis behind admin counted.
func benchLoop(b *testing.B, ctx context.Context, admin *redis.Client, locker *fencedlock.Locker, acquire func(context.Context, *fencedlock.Locker) (*fencedlock.Lock, error)) {
	lock, err := acquire(ctx, locker) // loads the scripts
	if err != nil {
		b.Fatal(err)
	}
	if err := lock.Release(ctx); err != nil {
		b.Fatal(err)
	}
	before := benchRedisCounters(b, admin)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		lock, err := acquire(ctx, locker)
		if err != nil {
			b.Fatal(err)
		}
		if err := lock.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	after := benchRedisCounters(b, admin)
	// The second INFO is one command more.
	b.ReportMetric((after.commands-before.commands-1)/float64(b.N), "redis-cmds/op")
	b.ReportMetric((after.cpu-before.cpu)*1e6/float64(b.N), "redis-cpu-µs/op")
}

// benchCounters are Redis's own counters: commands processed, and the
// main thread's CPU seconds (user + sys; the process's where the server
// does not report its main thread's).
type benchCounters struct{ commands, cpu float64 }

func benchRedisCounters(b *testing.B, c *redis.Client) benchCounters {
	b.Helper()
	info, err := redistest.Info(context.Background(), c, "everything")
	if err != nil {
		b.Fatal(err)
	}
	num := func(name string) float64 {
		v, err := strconv.ParseFloat(info[name], 64)
		if err != nil {
			b.Fatalf("INFO %s: %q", name, info[name])
		}
		return v
	}
	cpu := "used_cpu_user_main_thread"
	sys := "used_cpu_sys_main_thread"
	if _, ok := info[cpu]; !ok {
		cpu, sys = "used_cpu_user", "used_cpu_sys"
	}
	return benchCounters{commands: num("total_commands_processed"), cpu: num(cpu) + num(sys)}
}

// BenchmarkRedisStorePut measures a fenced write of a 128-byte value.
func BenchmarkRedisStorePut(b *testing.B) {
	be := redistest.Real(b)
	ctx := context.Background()
	store := fencedlock.NewRedisStore(be.Client, fencedlock.WithStorePrefix(be.Prefix))
	value := make([]byte, 128)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := store.Put(ctx, "bench", fencedlock.Token(i+1), value); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUpdate measures a read-modify-write of a 128-byte value with
// Update on a RedisStore: the fenced read (fence.lua with 'read', one
// round trip) and the Put (one more). Each op uses a token above the
// last, as a new holder's first Update does, so the fence rises each
// time. Compare with BenchmarkGetPut, the same work without the fence.
func BenchmarkUpdate(b *testing.B) {
	benchReadModifyWrite(b, func(ctx context.Context, store *fencedlock.RedisStore, token fencedlock.Token, value []byte) error {
		return fencedlock.Update(ctx, store, "bench", token, func(old []byte, found bool) ([]byte, error) {
			if !found || len(old) != len(value) {
				b.Fatalf("Update read %d bytes (found %v), want %d", len(old), found, len(value))
			}
			return value, nil
		})
	})
}

// BenchmarkGetPut is BenchmarkUpdate's work unfenced: a Get, then a Put
// of a 128-byte value with a token above the last. A stale holder's
// write can land between the two; the figures show what closing that
// window costs.
func BenchmarkGetPut(b *testing.B) {
	benchReadModifyWrite(b, func(ctx context.Context, store *fencedlock.RedisStore, token fencedlock.Token, value []byte) error {
		old, _, err := store.Get(ctx, "bench")
		if err != nil {
			return err
		}
		if len(old) != len(value) {
			b.Fatalf("Get read %d bytes, want %d", len(old), len(value))
		}
		return store.Put(ctx, "bench", token, value)
	})
}

// benchReadModifyWrite runs op on a RedisStore of a real Redis, with
// tokens rising from 2 and a 128-byte value already written with token
// 1. Besides time and allocations it reports the round trips per op (the
// commands the client sent, counted by a hook), the commands Redis ran
// (scripts' inner calls included) and its main thread's CPU time.
func benchReadModifyWrite(b *testing.B, op func(ctx context.Context, store *fencedlock.RedisStore, token fencedlock.Token, value []byte) error) {
	be := redistest.Real(b)
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: be.Client.Options().Addr})
	defer client.Close()
	trips := &roundTrips{}
	client.AddHook(trips)
	store := fencedlock.NewRedisStore(client, fencedlock.WithStorePrefix(be.Prefix))
	value := make([]byte, 128)
	if err := store.Put(ctx, "bench", 1, value); err != nil {
		b.Fatal(err)
	}
	if err := op(ctx, store, 2, value); err != nil { // loads the scripts
		b.Fatal(err)
	}
	before := benchRedisCounters(b, be.Client)
	sent := trips.n.Load()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := op(ctx, store, fencedlock.Token(i+3), value); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	sent = trips.n.Load() - sent
	after := benchRedisCounters(b, be.Client)
	b.ReportMetric(float64(sent)/float64(b.N), "round-trips/op")
	// The second INFO is one command more.
	b.ReportMetric((after.commands-before.commands-1)/float64(b.N), "redis-cmds/op")
	b.ReportMetric((after.cpu-before.cpu)*1e6/float64(b.N), "redis-cpu-µs/op")
}

// roundTrips is a client hook that counts the round trips the client
// makes: each command, and each pipeline once.
type roundTrips struct{ n atomic.Int64 }

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// BenchmarkRedisStorePutParallel measures fenced writes from many
// goroutines, each on its own resource.
func BenchmarkRedisStorePutParallel(b *testing.B) {
	be := redistest.Real(b)
	ctx := context.Background()
	store := fencedlock.NewRedisStore(be.Client, fencedlock.WithStorePrefix(be.Prefix))
	value := make([]byte, 128)
	var next int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		resource := "bench-" + strconv.FormatInt(atomic.AddInt64(&next, 1), 10)
		var tok fencedlock.Token
		for pb.Next() {
			tok++
			if err := store.Put(ctx, resource, tok, value); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkBaselineSetNXDel is the floor the cycle is measured against: a
// bare SET NX PX and DEL, with no token and no owner check on release (an
// unsafe lock). Same round trips as BenchmarkAcquireRelease.
func BenchmarkBaselineSetNXDel(b *testing.B) {
	be := redistest.Real(b)
	ctx := context.Background()
	key := be.Prefix + ":{bench}:lock"
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		err := be.Client.SetArgs(ctx, key, "owner", redis.SetArgs{Mode: "NX", TTL: 10 * time.Second}).Err()
		if err != nil {
			b.Fatal(err)
		}
		if err := be.Client.Del(ctx, key).Err(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkIssueToken measures IssueToken, one round trip, for a lock of
// another library. same_grant asks again for a grant that has its token;
// new_grant sets a new value on the lock key (a SET, timed too, standing
// for the other library's grant) and asks for its token.
func BenchmarkIssueToken(b *testing.B) {
	be := redistest.Real(b)
	ctx := context.Background()
	locker := fencedlock.New(be.Client, fencedlock.WithPrefix(be.Prefix))
	key := be.Prefix + ":otherlib:{bench}"
	b.Run("same_grant", func(b *testing.B) {
		if err := be.Client.Set(ctx, key, "grant", time.Minute).Err(); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := locker.IssueToken(ctx, key, "grant"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("new_grant", func(b *testing.B) {
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			value := "grant-" + strconv.Itoa(i)
			if err := be.Client.Set(ctx, key, value, time.Minute).Err(); err != nil {
				b.Fatal(err)
			}
			if _, err := locker.IssueToken(ctx, key, value); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkAcquireReleaseReplicated measures the uncontended cycle on a
// master with one replica, without and with WithReplicas(1, ...): the
// cost of waiting for the replica to confirm each grant.
func BenchmarkAcquireReleaseReplicated(b *testing.B) {
	ctx := context.Background()
	master := redistest.Start(b, "--repl-diskless-sync-delay", "0")
	replica := redistest.Start(b)
	mc, rc := master.Client(b), replica.Client(b)
	host, port, err := net.SplitHostPort(master.Addr)
	if err != nil {
		b.Fatal(err)
	}
	if err := rc.Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
		b.Fatal(err)
	}
	foWaitInSync(b, ctx, mc, rc)
	for _, bc := range []struct {
		name string
		opts []fencedlock.Option
	}{
		{"no WAIT", nil},
		{"WithReplicas(1)", []fencedlock.Option{fencedlock.WithReplicas(1, time.Second)}},
	} {
		locker := fencedlock.New(mc, bc.opts...)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				lock, err := locker.TryAcquire(ctx, "bench", 10*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				if err := lock.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
