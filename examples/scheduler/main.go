// Command scheduler runs a nightly report as a singleton job: two
// instances of a service campaign for the office "report-scheduler" with
// election.Run, and only the leader runs the job. The job keeps the
// report's run log in a fenced store: it reads the log to find the next
// run, and appends it with its term's token.
//
// The first thing each term does is fence the log with its token
// (Store.Fence), before it relies on anything it reads: otherwise a
// deposed leader's write, still on its way, could land between the new
// leader's read and its write, be accepted, and be overwritten. Each run
// is then one Update, which reads the log and appends the run with the
// same token.
//
// Instance A is elected and writes run 1. Running run 2, it reads the
// log and pauses (a GC pause, a stopped VM) past its lease: the lease
// runs out in Redis, A's heartbeat finds its term lost, and instance B is
// elected, fences the log, and reads it. A wakes up, unaware, and sends
// its late write of run 2 with its old token, between B's read and B's
// write: the store refuses it as stale, because B's fence is above it,
// and the log holds each run once. The stale error tells A that its term
// is over, and A's Run campaigns again. B writes runs 2 and 3 and ends
// its term; the next candidate elected writes run 4. Both stop when the
// schedule is done.
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
	logKey = "report-log" // the store's resource: the runs written, "; "-separated
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

	mu       sync.Mutex
	next     int           // the next run to write
	done     chan struct{} // closed when the last run is written
	paused   chan struct{} // closed once A has paused
	resumed  chan struct{} // closed when A may wake up
	stale    chan error    // A's refused late write
	lateDone chan struct{} // closed once A's late write has returned
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
		stale: make(chan error, 1), lateDone: make(chan struct{}),
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

	log, _, err := s.store.Get(context.Background(), logKey)
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

// job is one term's work: it fences the log, then writes runs while the
// term lasts. Each instance writes as the story says: A pauses in run 2,
// and B ends its term after run 3.
func (s *scheduler) job(ctx context.Context, name string, term *election.Term) error {
	say(name, "elected with token %v", term.Token())
	// The term's first step: fence the log with the term's token, before
	// relying on anything read from it, so that no write of an earlier
	// term lands between this term's reads and its writes.
	if err := s.store.Fence(ctx, logKey, term.Token()); err != nil {
		return err // stale: a later term has begun; Run campaigns again
	}
	say(name, "fenced the log with token %v: from now on the store refuses every earlier term's write", term.Token())
	for {
		entries, err := s.readLog(ctx)
		if err != nil {
			return err
		}
		n := len(entries) + 1
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

// readLog returns the runs the log holds. The term fenced the log first,
// so no earlier term can change it after this read.
func (s *scheduler) readLog(ctx context.Context) ([]string, error) {
	old, _, err := s.store.Get(ctx, logKey)
	if err != nil && !errors.Is(err, fencedlock.ErrNotFound) {
		return nil, err
	}
	return splitLog(old), nil
}

// pausedRun is A's run 2: Update reads the log, and between the read and
// the write A stops (a GC pause) past its lease; it wakes, unaware, and
// its Update writes with its old token.
func (s *scheduler) pausedRun(term *election.Term) error {
	// A real pause stops the heartbeat too, so A's write would go out with
	// a live ctx. Here the heartbeat runs on and ends the term's ctx
	// during the pause, so A's Update uses a ctx of its own.
	err := fencedlock.Update(context.Background(), s.store, logKey, term.Token(), func(old []byte, found bool) ([]byte, error) {
		say("A", "starts run 2: Update read the log (%d run) with token %v, and A pauses", len(splitLog(old)), term.Token())
		close(s.paused)
		<-s.resumed
		say("A", "wakes up, still believes it leads with token %v, and writes run 2", term.Token())
		return []byte(strings.Join(append(splitLog(old), "run 2 by A"), "; ")), nil
	})
	say("A", "its write is refused: %v", err)
	s.stale <- err
	close(s.lateDone)
	return err // stale: the term is over, and Run campaigns again
}

// write appends run n to the log with the term's token, in one Update.
func (s *scheduler) write(ctx context.Context, name string, n int, term *election.Term) error {
	err := fencedlock.Update(ctx, s.store, logKey, term.Token(), func(old []byte, found bool) ([]byte, error) {
		entries := splitLog(old)
		if len(entries) != n-1 {
			return nil, fmt.Errorf("run %d: the log holds %d runs, want %d: it changed after the term fenced it", n, len(entries), n-1)
		}
		if name == "B" && n == 2 {
			// B has read the log: A wakes up now, and its late write lands
			// between B's read and B's write.
			say(name, "Update read the log (%d run) with token %v for run 2", len(entries), term.Token())
			close(s.resumed)
			<-s.lateDone
		}
		return []byte(strings.Join(append(entries, fmt.Sprintf("run %d by %s", n, name)), "; ")), nil
	})
	if err != nil {
		return err
	}
	say(name, "wrote run %d with token %v", n, term.Token())
	s.mu.Lock()
	s.next = n + 1
	if n == runs {
		close(s.done)
	}
	s.mu.Unlock()
	return nil
}

// splitLog returns the runs in the log's value.
func splitLog(v []byte) []string {
	if len(v) == 0 {
		return nil
	}
	return strings.Split(string(v), "; ")
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
