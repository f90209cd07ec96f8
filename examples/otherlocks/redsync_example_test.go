package otherlocks_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock"
)

// A redsync mutex fenced with IssueToken: the mutex's name is the lock
// key and its random value identifies the grant. (A WithGenValueFunc that
// returns the same value for later grants would get them the same
// fencing token.)
func Example_redsync() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	ctx := context.Background()

	rs := redsync.New(goredis.NewPool(client))
	locker := fencedlock.New(client)
	store := fencedlock.NewRedisStore(client)

	// Worker A locks with redsync and asks for the grant's token.
	a := rs.NewMutex("locks:invoice-42", redsync.WithExpiry(8*time.Second))
	if err := a.LockContext(ctx); err != nil {
		log.Fatal(err)
	}
	tokenA, err := locker.IssueToken(ctx, a.Name(), a.Value())
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Put(ctx, "invoice-42", tokenA, []byte("draft by A")); err != nil {
		log.Fatal(err)
	}

	// Extending keeps the grant, and so its token.
	if _, err := a.ExtendContext(ctx); err != nil {
		log.Fatal(err)
	}
	again, err := locker.IssueToken(ctx, a.Name(), a.Value())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("same grant, same token:", again == tokenA)

	// A pauses past the expiry (miniredis's clock moves on); B locks.
	mr.FastForward(9 * time.Second)
	b := rs.NewMutex("locks:invoice-42", redsync.WithExpiry(8*time.Second))
	if err := b.LockContext(ctx); err != nil {
		log.Fatal(err)
	}
	tokenB, err := locker.IssueToken(ctx, b.Name(), b.Value())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("new grant, higher token:", tokenB > tokenA)
	if err := store.Put(ctx, "invoice-42", tokenB, []byte("sent by B")); err != nil {
		log.Fatal(err)
	}

	// A wakes up and writes: the store refuses its token.
	err = store.Put(ctx, "invoice-42", tokenA, []byte("draft 2 by A"))
	var stale *fencedlock.StaleTokenError
	if errors.As(err, &stale) {
		fmt.Println("A's write refused: token", stale.Token == tokenA, "below", stale.Current == tokenB)
	}
	_, err = locker.IssueToken(ctx, a.Name(), a.Value())
	fmt.Println("A's grant is gone:", errors.Is(err, fencedlock.ErrLockLost))

	if ok, err := b.UnlockContext(ctx); !ok || err != nil {
		log.Fatal("unlock: ", err)
	}
	value, _, err := store.Get(ctx, "invoice-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("stored: %s\n", value)
	// Output:
	// same grant, same token: true
	// new grant, higher token: true
	// A's write refused: token true below true
	// A's grant is gone: true
	// stored: sent by B
}
