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

// The README's quick start: every write carries the lock's token, a read
// that will be written back is fenced (Update), and the store refuses the
// write of a holder whose lock has expired.
func Example_staleWriteRefused() {
	ctx := context.Background()
	mr, err := miniredis.Run() // an embedded Redis; use your own Redis's address
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()}) // any redis.UniversalClient
	defer client.Close()
	locker := fencedlock.New(client)
	store := fencedlock.NewRedisStore(client) // or sqlstore, or your own Store

	a, err := locker.TryAcquire(ctx, "order-queue", 10*time.Second)
	if err != nil {
		log.Fatal(err) // ErrNotAcquired: another owner holds it
	}
	fmt.Println("A writes:", store.Put(ctx, "order-queue", a.Token(), []byte("orders: 1001")))

	// A pauses (GC, SIGSTOP) past its TTL: the lock expires and B takes it.
	mr.FastForward(11 * time.Second)
	b, err := locker.TryAcquire(ctx, "order-queue", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	// B reads the queue and writes it back with its order: Update fences
	// the read with B's token, so no older token can write in between.
	err = fencedlock.Update(ctx, store, "order-queue", b.Token(), func(queue []byte, found bool) ([]byte, error) {
		return append(queue, ", 1003"...), nil
	})
	fmt.Println("B adds 1003:", err)

	// A resumes, still believing it holds the lock, and writes: refused.
	err = store.Put(ctx, "order-queue", a.Token(), []byte("orders: 1001, 1002"))
	fmt.Println("A's late write refused:", errors.Is(err, fencedlock.ErrStaleToken))
	queue, _, err := store.Get(ctx, "order-queue")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("the queue: %s\n", queue)
	// Output:
	// A writes: <nil>
	// B adds 1003: <nil>
	// A's late write refused: true
	// the queue: orders: 1001, 1003
}

// A holder that reads, then writes back what it read, must fence its
// read. Here A's lock (token 41) expired while A was paused, and B holds
// the lock with token 42; A wakes and writes between B's read and B's
// write. With Get then Put, the store takes A's write, tells A it is
// saved, and B's write then loses it. With Update, B's read raises the
// store's fence to 42: A's write is refused, A learns it lost the lock,
// and adds its order again under a new lock.
func ExampleUpdate() {
	ctx := context.Background()
	const a, b, a2 = fencedlock.Token(41), fencedlock.Token(42), fencedlock.Token(43)

	// Unfenced: B reads with Get, and writes with Put.
	unfenced := fencedlock.NewMemoryStore()
	_ = unfenced.Put(ctx, "order-queue", a, []byte("orders: 1001"))
	queue, _, _ := unfenced.Get(ctx, "order-queue") // B reads
	fmt.Println("unfenced, A saves 1002:", unfenced.Put(ctx, "order-queue", a, []byte("orders: 1001, 1002")))
	fmt.Println("unfenced, B adds 1003:", unfenced.Put(ctx, "order-queue", b, append(queue, ", 1003"...)))
	queue, _, _ = unfenced.Get(ctx, "order-queue")
	fmt.Printf("unfenced: %s\n", queue)

	// Fenced: B reads and writes with Update.
	store := fencedlock.NewMemoryStore()
	_ = store.Put(ctx, "order-queue", a, []byte("orders: 1001"))
	err := fencedlock.Update(ctx, store, "order-queue", b, func(queue []byte, found bool) ([]byte, error) {
		// A wakes here, between B's read and B's write.
		err := store.Put(ctx, "order-queue", a, []byte("orders: 1001, 1002"))
		fmt.Println("fenced, A's write refused:", errors.Is(err, fencedlock.ErrStaleToken))
		return append(queue, ", 1003"...), nil
	})
	fmt.Println("fenced, B adds 1003:", err)
	// A acquires again (token 43), reads the queue again, adds 1002.
	err = fencedlock.Update(ctx, store, "order-queue", a2, func(queue []byte, found bool) ([]byte, error) {
		return append(queue, ", 1002"...), nil
	})
	fmt.Println("fenced, A adds 1002 again:", err)
	queue, _, _ = store.Get(ctx, "order-queue")
	fmt.Printf("fenced: %s\n", queue)
	// Output:
	// unfenced, A saves 1002: <nil>
	// unfenced, B adds 1003: <nil>
	// unfenced: orders: 1001, 1003
	// fenced, A's write refused: true
	// fenced, B adds 1003: <nil>
	// fenced, A adds 1002 again: <nil>
	// fenced: orders: 1001, 1003, 1002
}

// The quick start: acquire a lock, write with its token, release.
func Example() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	// Any redis.UniversalClient: a single node, Sentinel or Cluster.
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	ctx := context.Background()

	locker := fencedlock.New(client)
	store := fencedlock.NewRedisStore(client) // or your own fenced Store

	lock, err := locker.TryAcquire(ctx, "order-queue", 30*time.Second)
	if err != nil {
		log.Fatal(err) // errors.Is(err, fencedlock.ErrNotAcquired): someone else holds it
	}
	// Every write carries the lock's token. The store refuses a token
	// lower than one it has accepted, so a holder whose lock expired while
	// it was paused cannot overwrite a newer holder's work.
	if err := store.Put(ctx, "order-queue", lock.Token(), []byte("orders: 1001")); err != nil {
		log.Fatal(err) // errors.Is(err, fencedlock.ErrStaleToken): lock lost, acquire again
	}
	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}

	value, token, err := store.Get(ctx, "order-queue")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s, written with the lock's token: %v\n", value, token == lock.Token())
	// Output:
	// orders: 1001, written with the lock's token: true
}

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

// A holder pauses past its TTL, a new holder takes over, and the old
// holder's late write is refused.
func ExampleStaleTokenError() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	// A new token counter is seeded from the Redis clock (TIME) in
	// microseconds. Fix miniredis's clock so the tokens printed are the
	// same on every run.
	mr.SetTime(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	ctx := context.Background()
	locker := fencedlock.New(client)
	store := fencedlock.NewRedisStore(client)

	a, err := locker.TryAcquire(ctx, "order-queue", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Put(ctx, "order-queue", a.Token(), []byte("orders: 1001")); err != nil {
		log.Fatal(err)
	}

	// A pauses (a GC pause, SIGSTOP) for longer than its TTL: the lock
	// expires and B acquires it.
	mr.FastForward(31 * time.Second)
	b, err := locker.TryAcquire(ctx, "order-queue", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Put(ctx, "order-queue", b.Token(), []byte("orders: 1001, 1003")); err != nil {
		log.Fatal(err)
	}

	// A resumes and, still believing it holds the lock, writes. The store
	// refuses: A must acquire again, re-read and retry (over HTTP: 409).
	err = store.Put(ctx, "order-queue", a.Token(), []byte("orders: 1001, 1002"))
	var stale *fencedlock.StaleTokenError
	if errors.As(err, &stale) {
		fmt.Println("rejected token:", stale.Token)
		fmt.Println("store holds:   ", stale.Current)
	}
	fmt.Println("ErrStaleToken:", errors.Is(err, fencedlock.ErrStaleToken))
	fmt.Println(err)

	value, _, err := store.Get(ctx, "order-queue")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("value: %s\n", value)
	// Output:
	// rejected token: 1704067200000001
	// store holds:    1704067200000002
	// ErrStaleToken: true
	// fencedlock: stale fencing token 1704067200000001 for resource "order-queue": store holds 1704067200000002
	// value: orders: 1001, 1003
}

// Redis lost the token counter and the clock that re-seeded it is behind:
// the store refuses the new holder's writes until Advance raises the
// counter past the store's token.
func ExampleLocker_Advance() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	t0 := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	mr.SetTime(t0)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	ctx := context.Background()
	locker := fencedlock.New(client)
	store := fencedlock.NewMemoryStore() // storage outside Redis

	lock, err := locker.TryAcquire(ctx, "ledger", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Put(ctx, "ledger", lock.Token(), []byte("v1")); err != nil {
		log.Fatal(err)
	}
	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}

	// The counter is lost (a failover to a replica that missed it, say)
	// and the Redis clock that re-seeds it is an hour behind. The key
	// names are listed in docs/redis.md.
	mr.Del("fencedlock:{ledger}:token")
	mr.SetTime(t0.Add(-time.Hour))

	lock, err = locker.TryAcquire(ctx, "ledger", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	err = store.Put(ctx, "ledger", lock.Token(), []byte("v2"))
	var stale *fencedlock.StaleTokenError
	if !errors.As(err, &stale) {
		log.Fatalf("want a stale token error, got %v", err)
	}
	fmt.Println("rejected:", stale.Token, "store holds:", stale.Current)

	// Safety held: the write was refused. Raise the counter past the
	// store's token, then acquire again.
	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}
	if err := locker.Advance(ctx, "ledger", stale.Current); err != nil {
		log.Fatal(err)
	}
	lock, err = locker.TryAcquire(ctx, "ledger", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("new token:", lock.Token())
	fmt.Println("write error:", store.Put(ctx, "ledger", lock.Token(), []byte("v2")))
	// Output:
	// rejected: 1704063600000001 store holds: 1704067200000001
	// new token: 1704067200000002
	// write error: <nil>
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

// A Store of your own applies the rule with CheckToken inside its own
// transaction, and keeps the token with the value. Here the transaction
// is a mutex around two maps; in SQL it is a transaction that reads the
// token with SELECT ... FOR UPDATE and updates value and token together.
func ExampleCheckToken() {
	var (
		mu     sync.Mutex
		values = map[string]string{}
		tokens = map[string]fencedlock.Token{}
	)
	put := func(resource string, token fencedlock.Token, value string) error {
		mu.Lock()
		defer mu.Unlock()
		if err := fencedlock.CheckToken(resource, token, tokens[resource]); err != nil {
			return err // nothing changes
		}
		values[resource] = value
		tokens[resource] = token
		return nil
	}

	fmt.Println(put("queue", 7, "a"))   // first write
	fmt.Println(put("queue", 7, "b"))   // equal passes: one holder, many writes
	fmt.Println(put("queue", 8, "c"))   // higher passes: a newer holder
	fmt.Println(put("queue", 7, "old")) // lower is refused
	err := put("queue", 0, "none")      // zero is no token
	fmt.Println(errors.Is(err, fencedlock.ErrInvalidToken))
	fmt.Println(values["queue"], tokens["queue"])
	// Output:
	// <nil>
	// <nil>
	// <nil>
	// fencedlock: stale fencing token 7 for resource "queue": store holds 8
	// true
	// c 8
}

func ExampleMemoryStore() {
	var store fencedlock.MemoryStore // the zero value is ready to use
	ctx := context.Background()

	fmt.Println(store.Put(ctx, "config", 5, []byte("v1")))
	fmt.Println(store.Put(ctx, "config", 5, []byte("v2")))
	err := store.Put(ctx, "config", 4, []byte("late"))
	fmt.Println(errors.Is(err, fencedlock.ErrStaleToken))

	value, token, err := store.Get(ctx, "config")
	fmt.Printf("%s %d %v\n", value, token, err)

	_, _, err = store.Get(ctx, "missing")
	fmt.Println(errors.Is(err, fencedlock.ErrNotFound))
	// Output:
	// <nil>
	// <nil>
	// true
	// v2 5 <nil>
	// true
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
