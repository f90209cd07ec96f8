package election_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/election"
)

// Two candidates: the first is elected, the second waits; when the first
// resigns, the second is elected with a higher token. The second term
// fences first: from then on the store refuses the first's late write,
// even before the second has written anything.
func Example() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	ctx := context.Background()
	store := fencedlock.NewRedisStore(client)

	e := election.New(fencedlock.New(client), "scheduler", election.WithTTL(10*time.Second))
	first, err := e.Campaign(ctx, "host-a")
	if err != nil {
		log.Fatal(err)
	}
	leader, err := e.Leader(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("leader:", leader.Value)

	elected := make(chan *election.Term)
	go func() {
		term, err := e.Campaign(ctx, "host-b") // waits for host-a
		if err != nil {
			log.Fatal(err)
		}
		elected <- term
	}()
	if err := store.Put(ctx, "plan", first.Token(), []byte("plan by host-a")); err != nil {
		log.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // host-b queues
	if err := first.Resign(ctx); err != nil {
		log.Fatal(err)
	}
	second := <-elected
	fmt.Println("next leader:", second.Value(), "with a higher token:", second.Token() > first.Token())
	// The term's first step: fence, before relying on anything it reads.
	if err := store.Fence(ctx, "plan", second.Token()); err != nil {
		log.Fatal(err) // ErrStaleToken: a later term has begun
	}
	plan, _, err := store.Get(ctx, "plan")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("host-b reads: %s\n", plan)
	// host-a's late write lands between host-b's read and its write.
	err = store.Put(ctx, "plan", first.Token(), []byte("late plan by host-a"))
	fmt.Println("host-a's late write refused:", errors.Is(err, fencedlock.ErrStaleToken))
	if err := store.Put(ctx, "plan", second.Token(), append(plan, ", revised by host-b"...)); err != nil {
		log.Fatal(err)
	}
	plan, _, err = store.Get(ctx, "plan")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("plan: %s\n", plan)
	if err := second.Resign(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// leader: host-a
	// next leader: host-b with a higher token: true
	// host-b reads: plan by host-a
	// host-a's late write refused: true
	// plan: plan by host-a, revised by host-b
}

// Run campaigns, runs fn while elected, and campaigns again when fn
// returns; an error from fn ends Run after resigning.
func ExampleElection_Run() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	ctx := context.Background()
	store := fencedlock.NewRedisStore(client)

	e := election.New(fencedlock.New(client), "scheduler")
	errStop := errors.New("stop")
	err := e.Run(ctx, "host-a", func(ctx context.Context, term *election.Term) error {
		// The term's first step fences: Update raises the fence with the
		// term's token before it reads the plan, then writes it back.
		err := fencedlock.Update(ctx, store, "plan", term.Token(), func(plan []byte, found bool) ([]byte, error) {
			if !found {
				return []byte("plan by " + term.Value()), nil
			}
			return append(plan, ", revised by "+term.Value()...), nil
		})
		if err != nil {
			return err // ErrStaleToken: a later term has begun
		}
		return errStop // one term is enough here
	})
	fmt.Println("Run:", err)

	plan, _, err := store.Get(ctx, "plan")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("plan: %s\n", plan)
	_, err = e.Leader(ctx)
	fmt.Println("resigned:", errors.Is(err, election.ErrNoLeader))
	// Output:
	// Run: stop
	// plan: plan by host-a
	// resigned: true
}

// Observe delivers the current leader, then each new one.
func ExampleElection_Observe() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	e := election.New(fencedlock.New(client), "scheduler")
	first, err := e.Campaign(ctx, "host-a")
	if err != nil {
		log.Fatal(err)
	}
	leaders := e.Observe(ctx)
	fmt.Println("leader:", (<-leaders).Value)

	if err := first.Resign(ctx); err != nil {
		log.Fatal(err)
	}
	second, err := e.Campaign(ctx, "host-b")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("leader:", (<-leaders).Value)
	if err := second.Resign(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// leader: host-a
	// leader: host-b
}
