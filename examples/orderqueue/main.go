// Command orderqueue tells the story fencing tokens exist for. Worker A
// holds the lock on an order queue and pauses (a GC pause, a
// stop-the-world) for longer than the lock's TTL. Worker B acquires the
// expired lock, reads the queue, and works on it. A wakes up, still
// believes it holds the lock, and writes, between B's read and B's write.
// B fenced its read with its token, so the store refuses A's write
// because A's token is lower than the fence. B writes, and A acquires
// again, re-reads the queue and adds its order on top of B's, so no order
// is lost.
//
// Then it tells the same steps with B's read unfenced, a plain Get: A's
// write is accepted, because the store has seen no token above A's yet,
// and B's write, made from what B read before it, overwrites it. A was
// told its order was saved, and it is gone.
//
// By default it runs on an embedded miniredis with a 30s TTL and simulates
// the pause by moving miniredis's clock forward. With -redis host:port it
// runs on that Redis with a 2s TTL and really sleeps past it.
//
// It exits with status 0 when every step goes as told, and with status 1
// and a message naming the step when one does not (for instance, when the
// stale write is accepted although B fenced its read), so that CI can run
// it as a check.
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
	fmt.Printf("  store  %s: the value, the token that wrote it, and the fence,\n", key("value"))
	fmt.Printf("         the highest token that wrote or fenced it; a Put or Fence below the fence is refused\n\n")
	if err := s.fenced(); err != nil {
		return err
	}
	return s.unfenced()
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

// fenced tells the story with every read that is written back fenced:
// A's Update, A's read before its pause, and B's read (Fence, then Get;
// Update does both, and the Put, in one call).
func (s *story) fenced() error {
	ctx := s.ctx
	fmt.Println("1. Every read that is written back is fenced with the reader's token.")

	// A acquires the lock and adds order 1001.
	a, err := s.acquire("A", resource)
	if err != nil {
		return err
	}
	initial, err := s.update("A", resource, a, 1001)
	if err != nil {
		return fmt.Errorf("worker A's first Update: %w", err)
	}

	// A starts on order 1002: it reads the queue and prepares its write.
	queue, err := s.read("A", resource, a, true)
	if err != nil {
		return err
	}
	queue = append(queue, 1002)
	b, err := s.pauseA(resource, a)
	if err != nil {
		return err
	}

	// B reads the queue, fencing it with its token first.
	bq, err := s.read("B", resource, b, true)
	if err != nil {
		return err
	}
	bq = append(bq, 1003)

	// A wakes up, unaware of the pause, and writes what it prepared,
	// between B's read and B's write.
	say("A", "wakes up, still believes it holds the lock, and writes %s with token %v", show(queue), a.Token())
	err = s.store.Put(ctx, resource, a.Token(), encode(queue))
	var stale *fencedlock.StaleTokenError
	switch {
	case err == nil:
		return errors.New("the store accepted A's stale write after B fenced its read: B's write will overwrite order 1002")
	case !errors.As(err, &stale):
		return fmt.Errorf("worker A's stale write failed for another reason: %w", err)
	case stale.Token != a.Token() || stale.Current != b.Token():
		return fmt.Errorf("the rejection reports tokens %v < %v, want %v < %v", stale.Token, stale.Current, a.Token(), b.Token())
	}
	say("store", "refused: %d, re-acquire (rejected token %v, the fence B's read raised is %v)", httpStatus(err), stale.Token, stale.Current)

	if err := s.write("B", resource, b, bq); err != nil {
		return fmt.Errorf("worker B's write: %w", err)
	}

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

	// A starts over: acquire, re-read, retry, in one Update.
	a2, err := s.acquire("A", resource)
	if err != nil {
		return fmt.Errorf("worker A could not acquire the lock again: %w", err)
	}
	if a2.Token() <= b.Token() {
		return fmt.Errorf("worker A's new token %v is not higher than B's %v", a2.Token(), b.Token())
	}
	if _, err := s.update("A", resource, a2, 1002); err != nil {
		return fmt.Errorf("worker A's retried Update: %w", err)
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
	fmt.Printf("OK: the stale write was refused and no order was lost: the queue holds %s\n\n", final)
	return nil
}

// unfenced tells the same steps on another resource with B's read a
// plain Get, to show what the fence prevents: A's write is accepted, and
// B's write overwrites it.
func (s *story) unfenced() error {
	ctx := s.ctx
	res := resource + "-unfenced"
	fmt.Printf("2. The same steps on %q, with B's read a plain Get, unfenced.\n", res)
	a, err := s.acquire("A", res)
	if err != nil {
		return err
	}
	if _, err := s.update("A", res, a, 1001); err != nil {
		return fmt.Errorf("worker A's first Update: %w", err)
	}
	queue, err := s.read("A", res, a, true)
	if err != nil {
		return err
	}
	queue = append(queue, 1002)
	b, err := s.pauseA(res, a)
	if err != nil {
		return err
	}
	bq, err := s.read("B", res, b, false)
	if err != nil {
		return err
	}
	bq = append(bq, 1003)
	say("A", "wakes up, still believes it holds the lock, and writes %s with token %v", show(queue), a.Token())
	if err := s.store.Put(ctx, res, a.Token(), encode(queue)); err != nil {
		return fmt.Errorf("the store refused A's write before any token above A's reached it: %w", err)
	}
	say("store", "accepted: the highest token it has seen is still A's; A is told order 1002 is saved")
	if err := s.write("B", res, b, bq); err != nil {
		return fmt.Errorf("worker B's write: %w", err)
	}
	if err := b.Release(ctx); err != nil {
		return fmt.Errorf("worker B's release: %w", err)
	}
	final, _, err := s.store.Get(ctx, res)
	if err != nil {
		return fmt.Errorf("reading the final queue: %w", err)
	}
	if string(final) != show([]int{1001, 1003}) {
		return fmt.Errorf("the unfenced queue holds %s, want [1001,1003]", final)
	}
	fmt.Printf("LOST: the queue holds %s; order 1002, which A was told was saved, is gone, and nobody was told\n", final)
	fmt.Println("\nOK: a read that is written back must be fenced (fencedlock.Update, or Store.Fence before the read).")
	return nil
}

// update adds order to the queue in res with Update and lock's token,
// and returns the queue it read.
func (s *story) update(who, res string, lock *fencedlock.Lock, order int) ([]int, error) {
	var read []int
	err := fencedlock.Update(s.ctx, s.store, res, lock.Token(), func(v []byte, found bool) ([]byte, error) {
		q, err := s.decode(who, v, found)
		if err != nil {
			return nil, err
		}
		read = slices.Clone(q)
		say(who, "Update fenced with token %v, read %s, adds order %d", lock.Token(), show(q), order)
		return encode(append(q, order)), nil
	})
	if err != nil {
		return nil, err
	}
	say(who, "Update wrote %s with token %v: accepted", show(append(slices.Clone(read), order)), lock.Token())
	return read, nil
}

// acquire takes the lock on res for who.
func (s *story) acquire(who, res string) (*fencedlock.Lock, error) {
	lock, err := s.locker.TryAcquire(s.ctx, res, s.ttl)
	if err != nil {
		return nil, fmt.Errorf("worker %s could not acquire the lock: %w", who, err)
	}
	say(who, "acquired the lock on %q with token %v", res, lock.Token())
	return lock, nil
}

// pauseA pauses A past a's TTL, after a TTL check that cannot help, and
// returns B's lock on res, acquired during the pause.
func (s *story) pauseA(res string, a *fencedlock.Lock) (*fencedlock.Lock, error) {
	// Checking the TTL before writing does not help: the pause can fall
	// between the check and the write.
	left, err := a.TTL(s.ctx)
	if err != nil {
		return nil, fmt.Errorf("worker A's TTL check: %w", err)
	}
	say("A", "checked its lock: %v left, enough to write order 1002", left.Round(time.Millisecond))
	pause := s.ttl + max(s.ttl/30, 50*time.Millisecond)
	say("A", "pauses (GC, stop-the-world) for %v, longer than the %v TTL; its lock expires in Redis", pause, s.ttl)
	s.pause(pause)

	// B finds the lock free and gets a higher token.
	b, err := s.acquire("B", res)
	if err != nil {
		return nil, fmt.Errorf("after A's TTL ran out: %w", err)
	}
	if b.Token() <= a.Token() {
		return nil, fmt.Errorf("worker B's token %v is not higher than A's %v", b.Token(), a.Token())
	}
	return b, nil
}

// read returns the queue res holds; an empty queue when nothing was
// written yet. With fence, it raises the store's fence to lock's token
// first, so that no lower token can write until who writes.
func (s *story) read(who, res string, lock *fencedlock.Lock, fence bool) ([]int, error) {
	how := "Get (unfenced)"
	if fence {
		if err := s.store.Fence(s.ctx, res, lock.Token()); err != nil {
			return nil, fmt.Errorf("worker %s's fence: %w", who, err)
		}
		how = fmt.Sprintf("Fence with token %v, then Get", lock.Token())
	}
	v, token, err := s.store.Get(s.ctx, res)
	found := err == nil
	if errors.Is(err, fencedlock.ErrNotFound) {
		err = nil
	}
	if err != nil {
		return nil, fmt.Errorf("worker %s's read: %w", who, err)
	}
	q, err := s.decode(who, v, found)
	if err != nil {
		return nil, err
	}
	if found {
		say(who, "%s: read %s, written with token %v", how, v, token)
	} else {
		say(who, "%s: the queue is empty", how)
	}
	return q, nil
}

// decode returns the queue in v; an empty one when nothing was written.
func (s *story) decode(who string, v []byte, found bool) ([]int, error) {
	if !found {
		return nil, nil
	}
	var q []int
	if err := json.Unmarshal(v, &q); err != nil {
		return nil, fmt.Errorf("worker %s's read: the queue holds %q: %w", who, v, err)
	}
	return q, nil
}

// write stores the queue in res with the lock's token.
func (s *story) write(who, res string, lock *fencedlock.Lock, q []int) error {
	if err := s.store.Put(s.ctx, res, lock.Token(), encode(q)); err != nil {
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
