package call

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Bounds of the background cleanups of one Cleanups.
const (
	// Timeout bounds one cleanup unless its caller gives it a longer
	// budget: work that must happen after the call that needs it
	// returned, such as releasing a lock whose grant reply was lost.
	Timeout = time.Second
	// grace is how long a call whose ctx has ended still waits for its
	// cleanup to answer, so that on a Redis that answers, the caller
	// learns how it went.
	grace = 5 * time.Millisecond
	// MaxRunning is how many cleanups may run at once; beyond it, one is
	// not started and the call's error says so.
	MaxRunning = 64
)

// ErrPending is Run's report that the cleanup goes on after the call.
var ErrPending = errors.New("it goes on in the background")

// ErrNotStarted is Run's report that MaxRunning cleanups were running:
// fn was not started.
var ErrNotStarted = fmt.Errorf("%d cleanups are already running, so it was not started", MaxRunning)

// Cleanups runs the cleanups of one owner (a Locker, an election), at
// most MaxRunning at once. The zero Cleanups is not usable: make one with
// NewCleanups. It is safe for concurrent use.
type Cleanups struct {
	slots chan struct{} // a slot per cleanup running
	// warn logs what no caller hears of: a cleanup not started, or one
	// that failed after its call returned.
	warn func(msg, resource string, attrs ...any)
}

// NewCleanups returns a Cleanups that logs through warn, which may be
// nil.
func NewCleanups(warn func(msg, resource string, attrs ...any)) *Cleanups {
	if warn == nil {
		warn = func(string, string, ...any) {}
	}
	return &Cleanups{slots: make(chan struct{}, MaxRunning), warn: warn}
}

// Run runs fn, cleaning up after the call of ctx on resource, within
// budget of its own (Timeout for most), even when ctx has ended. It waits
// for fn while ctx lasts (and a few milliseconds after) and returns fn's
// error, nil when it succeeded, or an error wrapping ErrPending when ctx
// ended first: fn goes on, and its failure is logged. When MaxRunning
// cleanups are running it does not start fn, and says so.
func (c *Cleanups) Run(ctx context.Context, resource, what string, budget time.Duration, fn func(context.Context) error) error {
	select {
	case c.slots <- struct{}{}:
	default:
		c.warn("fencedlock: cleanup not started: too many running", resource, "cleanup", what, "running", MaxRunning)
		return ErrNotStarted
	}
	var (
		mu      sync.Mutex
		waiting = true // guarded by mu: the caller takes the result
		result  = make(chan error, 1)
	)
	go func() {
		defer func() { <-c.slots }()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), budget)
		defer cancel()
		err := fn(cctx)
		mu.Lock()
		defer mu.Unlock()
		if waiting {
			result <- err
		} else if err != nil {
			c.warn("fencedlock: background cleanup failed", resource, "cleanup", what, "err", err)
		}
	}()
	var late <-chan time.Time
	done := ctx.Done()
	for {
		select {
		case err := <-result:
			return err
		case <-done:
			t := time.NewTimer(grace)
			defer t.Stop()
			late, done = t.C, nil
		case <-late:
			mu.Lock()
			defer mu.Unlock()
			select {
			case err := <-result:
				return err
			default:
				waiting = false
				return ErrPending
			}
		}
	}
}

// Report adds to err, the error of a call, the outcome of its cleanup
// what (cerr from Run), and the harm left if it failed. A cleanup's
// failure, and ErrPending, are wrapped: errors.Is sees them.
func Report(err error, what, harm string, cerr error) error {
	switch {
	case cerr == nil:
		return err
	case errors.Is(cerr, ErrPending):
		return fmt.Errorf("%w (%s: %w; if it fails, %s)", err, what, cerr, harm)
	}
	return fmt.Errorf("%w (%s failed too, so %s: %w)", err, what, harm, cerr)
}
