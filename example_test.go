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
)

// The README's quick start, the package's example, and the examples of
// fencing writes: stores, the fencing rule and getting past a store
// ahead of the counter. The examples of the Locker's calls and options
// are in example_locker_test.go.

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
