package fencedlock

import (
	"context"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/internal/redistest"
)

// Without an observer or a logger, the observed entry points cost no
// allocation beyond the work itself: TryAcquire and Release allocate as
// much as their unobserved bodies.
func TestNoObserverCostsNoAllocation(t *testing.T) {
	be := redistest.Real(t)
	l := New(be.Client, WithPrefix(be.Prefix))
	ctx := context.Background()
	cycle := func(acquire func(context.Context, string, time.Duration) (*Lock, error), release func(*Lock, context.Context) error) func() {
		return func() {
			k, err := acquire(ctx, "allocs", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if err := release(k, ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	cycle(l.TryAcquire, (*Lock).Release)() // loads the scripts
	public := testing.AllocsPerRun(200, cycle(l.TryAcquire, (*Lock).Release))
	inner := testing.AllocsPerRun(200, cycle(l.tryAcquire, (*Lock).releaseLock))
	if public-inner >= 0.5 {
		t.Fatalf("TryAcquire + Release without an observer: %.1f allocations a cycle, against %.1f for their bodies", public, inner)
	}
	t.Logf("allocations a cycle: %.1f (bodies alone: %.1f)", public, inner)

	// Acquire too, which reads its options, and so its call, first.
	acquireBody := func(ctx context.Context, resource string, ttl time.Duration) (*Lock, error) {
		cfg := newAcquireConfig(nil)
		return l.acquire(ctx, resource, ttl, &cfg)
	}
	acquirePublic := func(ctx context.Context, resource string, ttl time.Duration) (*Lock, error) {
		return l.Acquire(ctx, resource, ttl)
	}
	public = testing.AllocsPerRun(200, cycle(acquirePublic, (*Lock).Release))
	inner = testing.AllocsPerRun(200, cycle(acquireBody, (*Lock).releaseLock))
	if public-inner >= 0.5 {
		t.Fatalf("Acquire + Release without an observer: %.1f allocations a cycle, against %.1f for their bodies", public, inner)
	}
	t.Logf("Acquire: allocations a cycle: %.1f (bodies alone: %.1f)", public, inner)
}
