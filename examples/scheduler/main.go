// Command scheduler runs a nightly report as a singleton job: two
// instances of a service campaign for the office "report-scheduler" with
// election.Run, and only the leader runs the job. The job writes the
// report's run log to a fenced store with its term's token.
//
// Instance A is elected and writes run 1. Running run 2, it pauses (a GC
// pause, a stopped VM) past its lease: the lease runs out in Redis, A's
// heartbeat finds its term lost, and instance B is elected and writes run
// 2. A wakes up, unaware, and sends its late write of run 2 with its old
// token: the store refuses it as stale, and the log holds each run once.
// The stale error tells A that its term is over, and A's Run campaigns
// again. B writes run 3 and ends its term; the next candidate elected
// writes run 4. Both stop when the schedule is done.
//
// Everything runs on an embedded miniredis, whose clock the pause moves
// forward. The program exits with status 0 when every step goes as told,
// and with status 1 and a message naming the step when one does not, so
// that CI can run it as a check.
//
// Usage:
//
//	go run ./examples/scheduler
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/election"
)

const (
	office = "report-scheduler"
	lease  = 2 * time.Second
	runs   = 4
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "scheduler:", err)
		os.Exit(1)
	}
}

// scheduler is what the instances share: the store and the story's
// schedule, which says who should run each run.
type scheduler struct {
	mr    *miniredis.Miniredis
	store *fencedlock.RedisStore

	mu      sync.Mutex
	next    int           // the next run to write
	done    chan struct{} // closed when the last run is written
	paused  chan struct{} // closed once A has paused
	resumed chan struct{} // closed when A may wake up
	stale   chan error    // A's refused late write
}

func run() error {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		return fmt.Errorf("starting miniredis: %w", err)
	}
	defer mr.Close()
	storeClient := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer storeClient.Close()
	s := &scheduler{
		mr: mr, store: fencedlock.NewRedisStore(storeClient), next: 1,
		done: make(chan struct{}), paused: make(chan struct{}), resumed: make(chan struct{}),
		stale: make(chan error, 1),
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	start := func(name string) {
		client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		e := election.New(fencedlock.New(client), office, election.WithTTL(lease))
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer client.Close()
			errs <- e.Run(ctx, name, func(ctx context.Context, term *election.Term) error {
				return s.job(ctx, name, term)
			})
		}()
	}
	start("A")
	if err := s.waitFor(ctx, 1); err != nil { // A leads first
		return err
	}
	start("B")

	// A pauses in run 2 past its lease: move the clock past it.
	select {
	case <-s.paused:
	case <-ctx.Done():
		return errors.New("instance A never paused")
	}
	say("--", "A is paused; %v pass, longer than its %v lease", lease+time.Second, lease)
	mr.FastForward(lease + time.Second)

	select {
	case err := <-s.stale:
		if !errors.Is(err, fencedlock.ErrStaleToken) {
			return fmt.Errorf("the late write of A: %v, want a stale token error", err)
		}
	case <-ctx.Done():
		return errors.New("the late write of A never came")
	}
	select {
	case <-s.done:
	case <-ctx.Done():
		return errors.New("the schedule did not finish")
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, context.Canceled) {
			return fmt.Errorf("election.Run returned %v, want context.Canceled", err)
		}
	}

	log, _, err := s.store.Get(context.Background(), "report-log")
	if err != nil {
		return err
	}
	entries := strings.Split(string(log), "; ")
	if len(entries) != runs || entries[0] != "run 1 by A" || entries[1] != "run 2 by B" || entries[2] != "run 3 by B" || !strings.HasPrefix(entries[3], "run 4 by ") {
		return fmt.Errorf("the report log holds %q, want runs 1 to %d once each, 1 by A, 2 and 3 by B", log, runs)
	}
	fmt.Printf("\nOK: the log holds each run once: %s\n", log)
	return nil
}

// job is one term's work: it writes runs while the term lasts. Each
// instance writes as the story says (A: runs 1 and 4, B: 2 and 3); A
// pauses in run 2.
func (s *scheduler) job(ctx context.Context, name string, term *election.Term) error {
	say(name, "elected with token %v", term.Token())
	for {
		s.mu.Lock()
		n := s.next
		s.mu.Unlock()
		if n > runs {
			<-ctx.Done() // nothing left: hold the office until stopped
			return nil
		}
		if name == "A" && n == 2 {
			return s.pausedRun(term)
		}
		if err := s.write(ctx, name, n, term); err != nil {
			return err
		}
		if name == "B" && n == 3 {
			say(name, "ends its term after run 3")
			return nil // Run resigns: the next candidate is elected at once
		}
	}
}

// pausedRun is A's run 2: it stops (a GC pause) past its lease, then,
// unaware, sends its write with its old token.
func (s *scheduler) pausedRun(term *election.Term) error {
	say("A", "starts run 2 and pauses")
	close(s.paused)
	<-s.resumed
	say("A", "wakes up, still believes it leads with token %v, and writes run 2", term.Token())
	err := s.write(context.Background(), "A", 2, term)
	say("A", "its write is refused: %v", err)
	s.stale <- err
	return err // stale: the term is over, and Run campaigns again
}

// write appends run n to the report log with the term's token.
func (s *scheduler) write(ctx context.Context, name string, n int, term *election.Term) error {
	old, _, err := s.store.Get(ctx, "report-log")
	if err != nil && !errors.Is(err, fencedlock.ErrNotFound) {
		return err
	}
	entries := []string{}
	if len(old) > 0 {
		entries = strings.Split(string(old), "; ")
	}
	entries = append(entries, fmt.Sprintf("run %d by %s", n, name))
	if err := s.store.Put(ctx, "report-log", term.Token(), []byte(strings.Join(entries, "; "))); err != nil {
		return err
	}
	say(name, "wrote run %d with token %v", n, term.Token())
	s.mu.Lock()
	s.next = n + 1
	if n == 2 && name == "B" {
		close(s.resumed) // B has written run 2: A may wake up
	}
	if n == runs {
		close(s.done)
	}
	s.mu.Unlock()
	return nil
}

// waitFor waits until run n is written.
func (s *scheduler) waitFor(ctx context.Context, n int) error {
	for {
		s.mu.Lock()
		written := s.next > n
		s.mu.Unlock()
		if written {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("run %d was never written", n)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func say(who, format string, args ...any) {
	fmt.Printf("%-3s "+format+"\n", append([]any{who + ":"}, args...)...)
}
