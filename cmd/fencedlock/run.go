package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/election"
	"github.com/fencedlock/fencedlock/internal/call"
	"github.com/fencedlock/fencedlock/internal/script"
)

// runFlags are the flags of run beside the Redis ones.
type runFlags struct {
	ttl       time.Duration
	wait      time.Duration
	killAfter time.Duration
	leader    bool
	timeout   time.Duration // -redis-timeout, of redisFlags
}

// run is "fencedlock run [flags] RESOURCE -- CMD [ARGS...]".
func run(args []string) int {
	c := newCommand("run", "[flags] RESOURCE -- CMD [ARGS...]")
	fs, conn := c.flags, &c.redis
	var f runFlags
	fs.DurationVar(&f.ttl, "ttl", 30*time.Second, "the lock's TTL: how long Redis keeps it after the last heartbeat (with -leader, the term's lease)")
	fs.DurationVar(&f.wait, "wait", 0, "how long to wait for the lock while another owner holds it; 0 tries once (with -leader, how long to campaign; 0 campaigns until elected)")
	fs.DurationVar(&f.killAfter, "kill-after", 10*time.Second, "how long CMD has to exit after SIGTERM (or a signal passed on) before SIGKILL")
	fs.BoolVar(&f.leader, "leader", false, "run CMD as the leader of the election named RESOURCE, with the term's token")
	if code, ok := c.parse(args); !ok {
		return code
	}
	f.timeout = conn.timeout
	rest := fs.Args()
	var err error
	switch {
	case len(rest) == 0:
		err = errors.New("missing RESOURCE and CMD")
	case len(rest) == 1 || rest[1] != "--":
		err = fmt.Errorf("want -- after RESOURCE %q, then CMD (flags go before RESOURCE)", rest[0])
	case len(rest) == 2:
		err = errors.New("missing CMD after --")
	case rest[2] == "":
		err = errors.New("CMD is empty after --")
	case f.ttl <= 0:
		err = fmt.Errorf("-ttl %v: must be above 0", f.ttl)
	case f.wait < 0:
		err = fmt.Errorf("-wait %v: must be 0 or more", f.wait)
	case f.killAfter <= 0:
		err = fmt.Errorf("-kill-after %v: must be above 0", f.killAfter)
	}
	if err != nil {
		return c.usageError(err)
	}
	resource, argv := rest[0], rest[2:]
	client, err := conn.client()
	if err != nil {
		return c.usageError(err)
	}
	defer client.Close()
	locker := conn.locker(client)

	sigs, stopSignals := notifySignals()
	defer stopSignals()
	h, code := take(locker, resource, f, sigs)
	if h == nil {
		return code
	}
	// A signal that came as the lock was taken: CMD does not start.
	select {
	case sig := <-sigs:
		end(h, f.timeout)
		report(fmt.Errorf("%s before CMD started", signalName(sig)))
		return signalStatus(sig)
	default:
	}
	j, err := startJob(argv, jobEnv(os.Environ(), h.token, resource))
	if err != nil {
		end(h, f.timeout)
		report(fmt.Errorf("starting CMD: %w", err))
		return startStatus(err)
	}
	e := supervise(j, h, sigs, f.killAfter)
	if e.lost != nil {
		// The loss was said. Ending the lock sends something only when
		// its lease ran out by the local clock: Redis may still keep the
		// key, for nobody, and it is deleted if it is still this one's
		// (see Lock.Release); any failure of that is not said.
		ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
		_ = h.end(ctx)
		cancel()
		return exitFailure
	}
	if err := end(h, f.timeout); errors.Is(err, fencedlock.ErrLockLost) {
		report(fmt.Errorf("lost before CMD exited with status %d: %w", e.status, err))
		return exitFailure
	}
	return e.status
}

// take acquires the lock on resource, or campaigns for the election of
// that name, with a heartbeat. It gives up when a signal comes. It
// returns the lock or term, or nil and the exit status after printing
// why.
func take(locker *fencedlock.Locker, resource string, f runFlags, sigs <-chan os.Signal) (*holding, int) {
	bound := f.wait
	if bound == 0 && !f.leader {
		bound = f.timeout // one attempt, bounded like any call
	}
	ctx, cancel := context.WithCancel(context.Background())
	if bound > 0 {
		ctx, cancel = context.WithTimeout(context.Background(), bound)
	}
	defer cancel()
	type result struct {
		h   *holding
		err error
	}
	taken := make(chan result, 1)
	go func() {
		h, err := acquire(ctx, locker, resource, f)
		taken <- result{h, err}
	}()
	var interrupted os.Signal
	for {
		select {
		case sig := <-sigs:
			if interrupted == nil {
				interrupted = sig
				cancel()
			}
		case r := <-taken:
			switch {
			case interrupted != nil:
				if r.h != nil {
					end(r.h, f.timeout)
				}
				report(fmt.Errorf("%s while waiting for %q", signalName(interrupted), resource))
				awaitCleanup(r.err)
				return nil, signalStatus(interrupted)
			case r.err == nil:
				return r.h, 0
			case f.wait > 0 && errors.Is(r.err, fencedlock.ErrNotAcquired) && errors.Is(r.err, context.DeadlineExceeded):
				report(fmt.Errorf("gave up after -wait %v: %w", f.wait, r.err))
			default:
				report(r.err)
			}
			awaitCleanup(r.err)
			return nil, exitCode(r.err)
		}
	}
}

// awaitCleanup waits, when err says that a cleanup goes on in the
// background (the release of a grant whose reply was lost), for as long
// as that cleanup may take: exiting now would cut it off, and leave the
// lock to nobody until its TTL ends.
func awaitCleanup(err error) {
	if errors.Is(err, call.ErrPending) {
		time.Sleep(call.Timeout + 10*time.Millisecond)
	}
}

// acquire takes the lock, or the election's term, and keeps it: with
// -wait, Acquire's heartbeat keeps the lock; without, TryAcquire takes it
// and a keeper refreshes it (see keepLock).
func acquire(ctx context.Context, locker *fencedlock.Locker, resource string, f runFlags) (*holding, error) {
	if f.leader {
		e := election.New(locker, resource, election.WithTTL(f.ttl))
		for pause := 100 * time.Millisecond; ; pause = min(2*pause, 5*time.Second) {
			term, err := e.Campaign(ctx, candidate())
			if err == nil {
				return &holding{token: term.Token(), done: term.Done(), err: term.Err, end: term.Resign}, nil
			}
			if !campaignAgain(locker.Client(), err) || ctx.Err() != nil {
				return nil, err
			}
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, err
			case <-t.C:
			}
		}
	}
	if f.wait == 0 {
		// One attempt: TryAcquire has no heartbeat, so a keeper of
		// fencedlock's own refreshes the lock.
		sent := time.Now()
		lock, err := locker.TryAcquire(ctx, resource, f.ttl)
		if err != nil {
			return nil, err
		}
		return keepLock(lock, f.ttl, sent), nil
	}
	lock, err := locker.Acquire(ctx, resource, f.ttl, fencedlock.WithHeartbeat(0))
	if err != nil {
		return nil, err
	}
	return &holding{token: lock.Token(), done: lock.Done(), err: lock.Err, end: lock.Release}, nil
}

// campaignAgain reports whether a campaign that failed with err is tried
// again while -wait lasts: Redis could not be reached, did not answer in
// time (the elected candidate's announcement too) or answered that it
// cannot now (loading, failing over), or the term was lost or not
// confirmed by replicas before it began. Not for an error reply that
// stays until an operator acts: a wrong password, an ACL refusal, out of
// memory, a Cluster redirect (MOVED) to a client that follows none.
func campaignAgain(client redis.UniversalClient, err error) bool {
	if errors.Is(err, fencedlock.ErrUnavailable) {
		return call.NotNow(err) && script.Refusal(err, "", "") == nil &&
			(call.FollowsRedirects(client) || !call.Redirected(err))
	}
	return errors.Is(err, fencedlock.ErrLockLost) || errors.Is(err, fencedlock.ErrNotReplicated)
}

// candidate is the value a leader campaigns with, which election.Leader
// reports: the host name and the process ID.
func candidate() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
}

// end releases the lock, or resigns the term, within timeout. A failure
// other than a loss is printed: the lock then ends when its TTL runs out.
func end(h *holding, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := h.end(ctx)
	if err != nil && !errors.Is(err, fencedlock.ErrLockLost) {
		report(fmt.Errorf("releasing: %w (the lock ends when its TTL runs out)", err))
	}
	return err
}
