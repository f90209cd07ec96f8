// Command orderqueue tells the story fencing tokens exist for. Worker A
// holds the lock on an order queue and pauses (a GC pause, a
// stop-the-world) for longer than the lock's TTL. Worker B acquires the
// expired lock and writes. A wakes up, still believes it holds the lock,
// and writes too: the store refuses the write because A's token is lower
// than B's. A acquires again, re-reads the queue and writes its order on
// top of B's, so no update is lost.
//
// By default it runs on an embedded miniredis with a 30s TTL and simulates
// the pause by moving miniredis's clock forward. With -redis host:port it
// runs on that Redis with a 2s TTL and really sleeps past it.
//
// It exits with status 0 when every step goes as told, and with status 1
// and a message naming the step when one does not (for instance, when the
// stale write is accepted), so that CI can run it as a check.
//
// Usage:
//
//	go run ./examples/orderqueue
//	go run ./examples/orderqueue -redis 127.0.0.1:6379
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock"
)

const resource = "order-queue"

func main() {
	addr := flag.String("redis", "", "`host:port` of a Redis to use instead of an embedded miniredis")
	ttl := flag.Duration("ttl", 0, "lock TTL (default 30s on the embedded miniredis, 2s with -redis)")
	prefix := flag.String("prefix", "", "key prefix (default \"fencedlock\" on the embedded miniredis; with -redis a fresh random one, whose keys are deleted at exit)")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "orderqueue: unexpected arguments %q\n", flag.Args())
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*addr, *ttl, *prefix); err != nil {
		fmt.Fprintln(os.Stderr, "orderqueue: FAILED:", err)
		os.Exit(1)
	}
}

// run sets up Redis and tells the story.
func run(addr string, ttl time.Duration, prefix string) error {
	ctx := context.Background()
	s := story{ctx: ctx}
	cleanup := false
	var where string
	if addr == "" {
		mr := miniredis.NewMiniRedis()
		if err := mr.Start(); err != nil {
			return fmt.Errorf("starting miniredis: %w", err)
		}
		defer mr.Close()
		s.client = redis.NewClient(&redis.Options{Addr: mr.Addr()})
		// miniredis never expires keys on its own: FastForward moves its
		// clock, and keys whose TTL runs out are gone.
		s.pause = mr.FastForward
		if ttl == 0 {
			ttl = 30 * time.Second
		}
		if prefix == "" {
			prefix = fencedlock.DefaultPrefix
		}
		where = "an embedded miniredis; the pause moves its clock forward"
	} else {
		s.client = redis.NewClient(&redis.Options{Addr: addr})
		if err := s.client.Ping(ctx).Err(); err != nil {
			s.client.Close()
			return fmt.Errorf("connecting to Redis at %s: %w", addr, err)
		}
		s.pause = time.Sleep
		if ttl == 0 {
			ttl = 2 * time.Second
		}
		if prefix == "" {
			var b [4]byte
			if _, err := rand.Read(b[:]); err != nil {
				return err
			}
			prefix = "fencedlock-example-" + hex.EncodeToString(b[:])
			cleanup = true
		}
		where = "Redis at " + addr + "; the pause is a real sleep"
	}
	defer s.client.Close()
	s.ttl = ttl
	s.locker = fencedlock.New(s.client, fencedlock.WithPrefix(prefix))
	s.store = fencedlock.NewRedisStore(s.client, fencedlock.WithStorePrefix(prefix))
	if cleanup {
		defer func() {
			// Every key of the example is under its random prefix.
			var keys []string
			iter := s.client.Scan(ctx, 0, prefix+":*", 100).Iterator()
			for iter.Next(ctx) {
				keys = append(keys, iter.Val())
			}
			err := iter.Err()
			if err == nil && len(keys) > 0 {
				err = s.client.Del(ctx, keys...).Err()
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "orderqueue: deleting the example's keys:", err)
				return
			}
			fmt.Printf("\ndeleted the example's keys under prefix %q\n", prefix)
		}()
	}

	fmt.Printf("Resource %q on %s.\n", resource, where)
	// The key names follow the layout in docs/redis.md.
	key := func(kind string) string { return prefix + ":{" + resource + "}:" + kind }
	fmt.Printf("  lock   SET %s <owner> NX PX %d  (TTL %v)\n", key("lock"), ttl.Milliseconds(), ttl)
	fmt.Printf("  token  %s, raised in the same script as the SET\n", key("token"))
	fmt.Printf("  store  %s, written only with a token >= the one stored with it\n\n", key("value"))
	return s.tell()
}

// story holds what the two workers share: one Redis, one Locker, one
// fenced store. Both workers run in this goroutine, one step at a time, so
// the interleaving is the same on every run.
type story struct {
	ctx    context.Context
	client *redis.Client
	locker *fencedlock.Locker
	store  *fencedlock.RedisStore
	ttl    time.Duration
	pause  func(time.Duration) // stands for A's stop-the-world pause
}

func (s *story) tell() error {
	ctx := s.ctx

	// A acquires the lock and starts work on the queue.
	a, err := s.locker.TryAcquire(ctx, resource, s.ttl)
	if err != nil {
		return fmt.Errorf("worker A could not acquire the lock: %w", err)
	}
	say("A", "acquired the lock with token %v", a.Token())
	queue, _, err := s.read("A")
	if err != nil {
		return err
	}
	initial := slices.Clone(queue)
	queue = append(queue, 1001)
	if err := s.write("A", a, queue); err != nil {
		return fmt.Errorf("worker A's first write: %w", err)
	}
	queue = append(queue, 1002) // A's next write, prepared before the pause

	// Checking the TTL before writing does not help: the pause can fall
	// between the check and the write.
	left, err := a.TTL(ctx)
	if err != nil {
		return fmt.Errorf("worker A's TTL check: %w", err)
	}
	say("A", "checked its lock: %v left, enough to write order 1002", left.Round(time.Millisecond))
	pause := s.ttl + max(s.ttl/30, 50*time.Millisecond)
	say("A", "pauses (GC, stop-the-world) for %v, longer than the %v TTL; its lock expires in Redis", pause, s.ttl)
	s.pause(pause)

	// B finds the lock free and gets a higher token.
	b, err := s.locker.TryAcquire(ctx, resource, s.ttl)
	if err != nil {
		return fmt.Errorf("worker B could not acquire the lock after A's TTL ran out: %w", err)
	}
	if b.Token() <= a.Token() {
		return fmt.Errorf("worker B's token %v is not higher than A's %v", b.Token(), a.Token())
	}
	say("B", "acquired the lock with token %v, higher than A's %v", b.Token(), a.Token())
	bq, _, err := s.read("B")
	if err != nil {
		return err
	}
	if err := s.write("B", b, append(bq, 1003)); err != nil {
		return fmt.Errorf("worker B's write: %w", err)
	}

	// A wakes up, unaware of the pause, and writes what it prepared.
	say("A", "wakes up, still believes it holds the lock, and writes %s with token %v", show(queue), a.Token())
	err = s.store.Put(ctx, resource, a.Token(), encode(queue))
	var stale *fencedlock.StaleTokenError
	switch {
	case err == nil:
		return errors.New("the store accepted A's stale write: order 1003 is lost")
	case !errors.As(err, &stale):
		return fmt.Errorf("worker A's stale write failed for another reason: %w", err)
	case stale.Token != a.Token() || stale.Current != b.Token():
		return fmt.Errorf("the rejection reports tokens %v < %v, want %v < %v", stale.Token, stale.Current, a.Token(), b.Token())
	}
	say("store", "%d: re-acquire (rejected token %v, the store holds %v)", httpStatus(err), stale.Token, stale.Current)

	// A's lock is gone: Refresh says so. (A heartbeat calling Refresh would
	// have told A, but only after the pause: only the token is safe.)
	err = a.Refresh(ctx, s.ttl)
	if !errors.Is(err, fencedlock.ErrLockLost) {
		return fmt.Errorf("worker A's Refresh returned %v, want ErrLockLost", err)
	}
	say("A", "Refresh: %v; A starts over", err)

	if err := b.Release(ctx); err != nil {
		return fmt.Errorf("worker B's release: %w", err)
	}
	say("B", "released the lock")

	// A starts over: acquire, re-read, retry.
	a2, err := s.locker.TryAcquire(ctx, resource, s.ttl)
	if err != nil {
		return fmt.Errorf("worker A could not acquire the lock again: %w", err)
	}
	if a2.Token() <= b.Token() {
		return fmt.Errorf("worker A's new token %v is not higher than B's %v", a2.Token(), b.Token())
	}
	say("A", "acquired the lock again with token %v", a2.Token())
	queue, token, err := s.read("A")
	if err != nil {
		return err
	}
	if token != b.Token() {
		return fmt.Errorf("worker A re-read a value written with token %v, want B's %v", token, b.Token())
	}
	if err := s.write("A", a2, append(queue, 1002)); err != nil {
		return fmt.Errorf("worker A's retried write: %w", err)
	}
	if err := a2.Release(ctx); err != nil {
		return fmt.Errorf("worker A's release: %w", err)
	}
	say("A", "released the lock")

	final, _, err := s.store.Get(ctx, resource)
	if err != nil {
		return fmt.Errorf("reading the final queue: %w", err)
	}
	want := encode(append(initial, 1001, 1003, 1002))
	if string(final) != string(want) {
		return fmt.Errorf("the queue holds %s, want %s", final, want)
	}
	fmt.Printf("\nOK: the stale write was refused and no order was lost: the queue holds %s\n", final)
	return nil
}

// read returns the queue and the token it was written with; an empty
// queue when nothing was written yet.
func (s *story) read(who string) ([]int, fencedlock.Token, error) {
	v, token, err := s.store.Get(s.ctx, resource)
	if errors.Is(err, fencedlock.ErrNotFound) {
		say(who, "read the queue: empty")
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("worker %s's read: %w", who, err)
	}
	var q []int
	if err := json.Unmarshal(v, &q); err != nil {
		return nil, 0, fmt.Errorf("worker %s's read: the queue holds %q: %w", who, v, err)
	}
	say(who, "read the queue: %s, written with token %v", v, token)
	return q, token, nil
}

// write stores the queue with the lock's token.
func (s *story) write(who string, lock *fencedlock.Lock, q []int) error {
	if err := s.store.Put(s.ctx, resource, lock.Token(), encode(q)); err != nil {
		return err
	}
	say(who, "wrote %s with token %v: accepted", show(q), lock.Token())
	return nil
}

// httpStatus is the status a service answers for a store's error.
func httpStatus(err error) int {
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, fencedlock.ErrStaleToken):
		return http.StatusConflict // lost the lock: re-acquire, re-read, retry
	case errors.Is(err, fencedlock.ErrInvalidToken):
		return http.StatusBadRequest
	case errors.Is(err, fencedlock.ErrNotFound):
		return http.StatusNotFound
	}
	return http.StatusInternalServerError
}

func encode(q []int) []byte {
	if q == nil {
		q = []int{}
	}
	b, err := json.Marshal(q)
	if err != nil {
		panic(err) // a slice of ints always encodes
	}
	return b
}

func show(q []int) string { return string(encode(q)) }

func say(who, format string, args ...any) {
	fmt.Printf("%-6s "+format+"\n", append([]any{who + ":"}, args...)...)
}
