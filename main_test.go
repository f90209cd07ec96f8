package fencedlock_test

import (
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

func TestMain(m *testing.M) {
	// Subscriptions of waiters linger a second in production; tests that
	// check for leftover goroutines need not wait that long.
	fencedlock.SetSubscriptionLinger(50 * time.Millisecond)
	// A Locker that issued a token checks the grant's lock key at the
	// latest a minute later, and forgets it only then; in tests, whose
	// clients close as they end, within 20 ms.
	fencedlock.SetIssuedKeeping(10*time.Millisecond, 20*time.Millisecond)
	redistest.Main(m)
}
