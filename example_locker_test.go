package fencedlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/observe"
)

// Examples of taking and keeping locks: the Locker's calls and options.
// The README's quick start and the examples of fencing writes are in
// example_test.go.

func ExampleLocker_TryAcquire() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	ctx := context.Background()
	locker := fencedlock.New(client)

	a, err := locker.TryAcquire(ctx, "report", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}

	// While A holds the lock, TryAcquire fails at once.
	_, err = locker.TryAcquire(ctx, "report", 30*time.Second)
	fmt.Println("B while A holds it:", errors.Is(err, fencedlock.ErrNotAcquired))

	if err := a.Release(ctx); err != nil {
		log.Fatal(err)
	}
	b, err := locker.TryAcquire(ctx, "report", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("B after A released, token higher than A's:", b.Token() > a.Token())
	// Output:
	// B while A holds it: true
	// B after A released, token higher than A's: true
}

func ExampleLocker_Acquire() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	locker := fencedlock.New(client)

	a, err := locker.TryAcquire(context.Background(), "report", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}

	// Acquire waits while the lock is held, for as long as ctx allows.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err = locker.Acquire(ctx, "report", 30*time.Second)
	cancel()
	fmt.Println("gave up:", errors.Is(err, fencedlock.ErrNotAcquired), errors.Is(err, context.DeadlineExceeded))

	// A releases while B waits: B gets the lock.
	go func() {
		time.Sleep(20 * time.Millisecond)
		if err := a.Release(context.Background()); err != nil {
			log.Print(err)
		}
	}()
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := locker.Acquire(ctx, "report", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("B acquired after A released, with a higher token:", b.Token() > a.Token())
	// Output:
	// gave up: true true
	// B acquired after A released, with a higher token: true
}

func ExampleLock_Refresh() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	ctx := context.Background()
	locker := fencedlock.New(client)

	lock, err := locker.TryAcquire(ctx, "report", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	// The holder refreshes well within the TTL while it works: the lock
	// and its token are kept.
	mr.FastForward(5 * time.Second)
	fmt.Println("refresh:", lock.Refresh(ctx, 10*time.Second))

	// A refresh that comes too late finds the lock gone: stop working.
	mr.FastForward(11 * time.Second)
	err = lock.Refresh(ctx, 10*time.Second)
	fmt.Println("lost:", errors.Is(err, fencedlock.ErrLockLost))
	// Output:
	// refresh: <nil>
	// lost: true
}

// Do is the whole life of a lock in one call: wait for it, keep it with a
// heartbeat, run the work, release. The work's context ends the moment
// the lock is lost.
func ExampleLocker_Do() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	ctx := context.Background()
	locker := fencedlock.New(client)
	store := fencedlock.NewRedisStore(client)

	err := locker.Do(ctx, "report", 10*time.Second, func(ctx context.Context, lock *fencedlock.Lock) error {
		// Pass the token with every write; stop when ctx is done.
		return store.Put(ctx, "report", lock.Token(), []byte("done"))
	})
	fmt.Println("first run:", err)

	// Someone takes the lock's key from under the second run: its context
	// is cancelled with a cause that wraps ErrLockLost.
	err = locker.Do(ctx, "report", 300*time.Millisecond, func(ctx context.Context, lock *fencedlock.Lock) error {
		client.Set(ctx, "fencedlock:{report}:lock", "someone-else:1", time.Minute)
		<-ctx.Done()
		return context.Cause(ctx)
	})
	fmt.Println("second run lost the lock:", errors.Is(err, fencedlock.ErrLockLost))
	// Output:
	// first run: <nil>
	// second run lost the lock: true
}

// With a heartbeat the lock outlives its TTL for as long as the holder
// works; Done tells the holder when the lock is gone.
func ExampleWithHeartbeat() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	ctx := context.Background()
	locker := fencedlock.New(client)

	lock, err := locker.Acquire(ctx, "report", 300*time.Millisecond, fencedlock.WithHeartbeat(100*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	// miniredis expires keys only when told to: let a TTL pass, three
	// times, while the heartbeat refreshes the lock.
	for i := 0; i < 3; i++ {
		time.Sleep(150 * time.Millisecond)
		mr.FastForward(150 * time.Millisecond)
	}
	fmt.Println("held after three TTLs:", lock.Err() == nil)

	mr.Del("fencedlock:{report}:lock") // the lock's key
	<-lock.Done()
	fmt.Println("lost once the key was gone:", errors.Is(lock.Err(), fencedlock.ErrLockLost))
	// Output:
	// held after three TTLs: true
	// lost once the key was gone: true
}

// A lock taken by another library gets fencing tokens from IssueToken.
// Here the "other library" is a plain SET NX PX with a random value; see
// examples/otherlocks for redsync and redislock.
func ExampleLocker_IssueToken() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	ctx := context.Background()
	locker := fencedlock.New(client)
	store := fencedlock.NewRedisStore(client)

	// Worker A takes the lock its own way and asks for a token.
	if err := client.SetArgs(ctx, "locks:report", "a-7f3e", redis.SetArgs{Mode: "NX", TTL: 30 * time.Second}).Err(); err != nil {
		log.Fatal("A could not lock: ", err) // redis.Nil: someone holds it
	}
	tokenA, err := locker.IssueToken(ctx, "locks:report", "a-7f3e")
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Put(ctx, "report", tokenA, []byte("draft by A")); err != nil {
		log.Fatal(err)
	}

	// A pauses; its lock expires, and B takes it.
	mr.FastForward(31 * time.Second)
	if err := client.SetArgs(ctx, "locks:report", "b-91c0", redis.SetArgs{Mode: "NX", TTL: 30 * time.Second}).Err(); err != nil {
		log.Fatal("B could not lock: ", err) // redis.Nil: someone holds it
	}
	tokenB, err := locker.IssueToken(ctx, "locks:report", "b-91c0")
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Put(ctx, "report", tokenB, []byte("final by B")); err != nil {
		log.Fatal(err)
	}

	// A wakes up. Its write is refused, and so is a new token.
	err = store.Put(ctx, "report", tokenA, []byte("draft 2 by A"))
	fmt.Println("A's write:", errors.Is(err, fencedlock.ErrStaleToken))
	_, err = locker.IssueToken(ctx, "locks:report", "a-7f3e")
	fmt.Println("A's token request:", errors.Is(err, fencedlock.ErrLockLost))
	fmt.Println("B's token is higher:", tokenB > tokenA)
	// Output:
	// A's write: true
	// A's token request: true
	// B's token is higher: true
}

// Inspect shows who holds a lock, for how long, and who waits: for
// dashboards and debugging, never as a reason to write.
func ExampleLocker_Inspect() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	ctx := context.Background()

	locker := fencedlock.New(client)
	lock, err := locker.TryAcquire(ctx, "report", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	info, err := locker.Inspect(ctx, "report")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("held: %v, by our token: %v, waiters: %d\n", info.Held, info.Token == lock.Token(), info.Waiters)
	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}
	info, err = locker.Inspect(ctx, "report")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("held: %v, counter at the last grant: %v\n", info.Held, info.Counter == lock.Token())
	// Output:
	// held: true, by our token: true, waiters: 0
	// held: false, counter at the last grant: true
}

// An Observer sees what a Locker does, and ObserveStore what a store
// accepts; here one counts outcomes.
func ExampleWithObserver() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	ctx := context.Background()

	var mu sync.Mutex
	counts := map[string]int{}
	observer := observe.Func(func(ctx context.Context, e observe.Event) context.Context {
		if e.Outcome != observe.None {
			mu.Lock()
			counts[e.Kind.String()+" "+e.Outcome.String()]++
			mu.Unlock()
		}
		return ctx
	})
	locker := fencedlock.New(client, fencedlock.WithObserver(observer))
	store := fencedlock.ObserveStore(fencedlock.NewMemoryStore(), observer)

	old, err := locker.TryAcquire(ctx, "queue", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	if err := old.Release(ctx); err != nil {
		log.Fatal(err)
	}
	lock, err := locker.TryAcquire(ctx, "queue", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	_ = store.Put(ctx, "queue", lock.Token(), []byte("new"))
	_ = store.Put(ctx, "queue", old.Token(), []byte("late")) // refused: stale
	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}
	for _, k := range []string{"acquire_end acquired", "lock_end released", "store_write_end accepted", "store_write_end stale"} {
		fmt.Println(k, counts[k])
	}
	// Output:
	// acquire_end acquired 2
	// lock_end released 2
	// store_write_end accepted 1
	// store_write_end stale 1
}
