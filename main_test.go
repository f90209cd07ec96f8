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
	redistest.Main(m)
}
