package main

import (
	"context"
	"math"
	"testing"
	"time"
)

// ctxWorker records the ctx of every call it gets.
type ctxWorker struct {
	acquires, releases []context.Context
	// acquireLiveAtRelease records, at each release, whether the ctx of
	// the acquire before it was still live.
	acquireLiveAtRelease []bool
}

func (w *ctxWorker) acquire(ctx context.Context) (uint64, error) {
	w.acquires = append(w.acquires, ctx)
	return 1, nil
}

func (w *ctxWorker) release(ctx context.Context) error {
	w.releases = append(w.releases, ctx)
	w.acquireLiveAtRelease = append(w.acquireLiveAtRelease, w.acquires[len(w.acquires)-1].Err() == nil)
	return nil
}

// TestRunCyclesBackground checks that without a timeout every call gets
// context.Background() itself.
func TestRunCyclesBackground(t *testing.T) {
	w := &ctxWorker{}
	if _, ran := runCycles(context.Background(), w, 3, 0, newRecord(3)); ran != 3 {
		t.Fatalf("ran %d cycles, want 3", ran)
	}
	for i := range w.acquires {
		if w.acquires[i] != context.Background() || w.releases[i] != context.Background() {
			t.Errorf("cycle %d: acquire ctx %v, release ctx %v, want context.Background() for both", i, w.acquires[i], w.releases[i])
		}
	}
}

// TestRunCyclesRequestContext checks that with a timeout every call gets
// a ctx of its own with that deadline, that the acquire's is still live
// when the release is called (rueidislock ties its lock to it), and that
// both are cancelled once the cycle is over.
func TestRunCyclesRequestContext(t *testing.T) {
	w := &ctxWorker{}
	before := time.Now()
	if _, ran := runCycles(context.Background(), w, 3, requestTimeout, newRecord(3)); ran != 3 {
		t.Fatalf("ran %d cycles, want 3", ran)
	}
	after := time.Now()
	seen := map[context.Context]bool{}
	for i, ctx := range append(append([]context.Context{}, w.acquires...), w.releases...) {
		deadline, ok := ctx.Deadline()
		if !ok || deadline.Before(before.Add(requestTimeout)) || deadline.After(after.Add(requestTimeout)) {
			t.Errorf("call %d: deadline %v (set %v), want %v after the call", i, deadline, ok, requestTimeout)
		}
		if ctx.Err() == nil {
			t.Errorf("call %d: ctx not cancelled after its cycle", i)
		}
		if seen[ctx] {
			t.Errorf("call %d: a ctx used by an earlier call", i)
		}
		seen[ctx] = true
	}
	for i, live := range w.acquireLiveAtRelease {
		if !live {
			t.Errorf("cycle %d: the acquire's ctx had ended when release was called", i)
		}
	}
}

// allocSink keeps allocWorker's allocations on the heap.
var allocSink any

// allocWorker allocates n heap objects in each call.
type allocWorker struct{ n int }

func (w allocWorker) acquire(context.Context) (uint64, error) {
	for i := 0; i < w.n; i++ {
		allocSink = new([64]byte)
	}
	return 0, nil
}

func (w allocWorker) release(context.Context) error {
	for i := 0; i < w.n; i++ {
		allocSink = new([64]byte)
	}
	return nil
}

// TestAllocsPerCycle checks that runCycles' allocations, less the loop's
// own, are the lock's own: 2n per cycle for a lock that allocates n
// objects per call, with context.Background() and with request ctxs
// alike, and that a lock that allocates nothing gets none.
func TestAllocsPerCycle(t *testing.T) {
	const cycles = 2000
	for _, timeout := range []time.Duration{0, requestTimeout} {
		loop := loopAllocs(timeout)
		for _, n := range []int{0, 3} {
			mallocs, ran := runCycles(context.Background(), allocWorker{n: n}, cycles, timeout, newRecord(cycles))
			got := allocsPerCycle(mallocs, ran, loop)
			if want := float64(2 * n); math.Abs(got-want) > 0.1 {
				t.Errorf("timeout %v, %d allocations per call: %.3f allocations per cycle (loop's own %.3f), want %v", timeout, n, got, loop, want)
			}
		}
	}
	if got := allocsPerCycle(100, 0, 0); !math.IsNaN(got) {
		t.Errorf("allocsPerCycle without cycles = %v, want NaN", got)
	}
}

// TestRunCyclesStops checks that runCycles stops when its stop ctx ends
// and says how many cycles it ran.
func TestRunCyclesStops(t *testing.T) {
	stop, cancel := context.WithCancel(context.Background())
	cancel()
	w := &ctxWorker{}
	if _, ran := runCycles(stop, w, 5, 0, newRecord(5)); ran != 0 || len(w.acquires) != 0 {
		t.Errorf("after stop: ran %d cycles, %d acquires, want none", ran, len(w.acquires))
	}
}
