package otherlocks_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock"
)

// A bsm/redislock lock fenced with IssueToken. redislock stores its
// random token followed by the lock's metadata as the key's value, so
// the grant's value is Token() + Metadata(). Leave Options.Token unset:
// a token used again by a later grant would get that grant the same
// fencing token.
func Example_redislock() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	ctx := context.Background()

	rl := redislock.New(client)
	locker := fencedlock.New(client)
	store := fencedlock.NewRedisStore(client)
	value := func(l *redislock.Lock) string { return l.Token() + l.Metadata() }

	// Worker A obtains the lock and asks for the grant's token.
	a, err := rl.Obtain(ctx, "locks:report", 10*time.Second, &redislock.Options{Metadata: "worker-a"})
	if err != nil {
		log.Fatal(err)
	}
	tokenA, err := locker.IssueToken(ctx, a.Key(), value(a))
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Put(ctx, "report", tokenA, []byte("draft by A")); err != nil {
		log.Fatal(err)
	}

	// A refresh keeps the grant, and so its token.
	if err := a.Refresh(ctx, 10*time.Second, nil); err != nil {
		log.Fatal(err)
	}
	again, err := locker.IssueToken(ctx, a.Key(), value(a))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("same grant, same token:", again == tokenA)

	// A pauses past the TTL (miniredis's clock moves on); B obtains.
	mr.FastForward(11 * time.Second)
	b, err := rl.Obtain(ctx, "locks:report", 10*time.Second, &redislock.Options{Metadata: "worker-b"})
	if err != nil {
		log.Fatal(err)
	}
	tokenB, err := locker.IssueToken(ctx, b.Key(), value(b))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("new grant, higher token:", tokenB > tokenA)
	if err := store.Put(ctx, "report", tokenB, []byte("final by B")); err != nil {
		log.Fatal(err)
	}

	// A wakes up and writes: the store refuses its token.
	err = store.Put(ctx, "report", tokenA, []byte("draft 2 by A"))
	fmt.Println("A's write refused:", errors.Is(err, fencedlock.ErrStaleToken))
	_, err = locker.IssueToken(ctx, a.Key(), value(a))
	fmt.Println("A's grant is gone:", errors.Is(err, fencedlock.ErrLockLost))

	if err := b.Release(ctx); err != nil {
		log.Fatal(err)
	}
	stored, _, err := store.Get(ctx, "report")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("stored: %s\n", stored)
	// Output:
	// same grant, same token: true
	// new grant, higher token: true
	// A's write refused: true
	// A's grant is gone: true
	// stored: final by B
}
