package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/sqlstore"
)

// stallBudget is how long past its deadline a call may take.
const stallBudget = 50 * time.Millisecond

// timed runs call with a context of timeout, and returns its error and
// how long it took. A call still running 20 s later fails the test.
func timed(t *testing.T, timeout time.Duration, call func(ctx context.Context) error) (time.Duration, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- call(ctx) }()
	select {
	case err := <-done:
		return time.Since(start), err
	case <-time.After(20 * time.Second):
		t.Fatalf("the call is still running 20 s after it started, with a %v deadline", timeout)
		return 0, nil
	}
}

// expectStalled checks that a call on a stalled database returned within
// its deadline plus stallBudget with an error wrapping both
// fencedlock.ErrUnavailable and context.DeadlineExceeded.
func expectStalled(t *testing.T, what string, timeout, took time.Duration, err error) {
	t.Helper()
	t.Logf("%s on a stalled database: %v after %v", what, err, took.Round(time.Millisecond))
	if took > timeout+stallBudget {
		t.Errorf("%s took %v with a %v deadline; want at most %v", what, took.Round(time.Millisecond), timeout, timeout+stallBudget)
	}
	if !errors.Is(err, fencedlock.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("%s = %v; want an error wrapping ErrUnavailable and context.DeadlineExceeded", what, err)
	}
	for _, not := range []error{fencedlock.ErrNotFound, fencedlock.ErrStaleToken, fencedlock.ErrInvalidArgument, fencedlock.ErrInvalidToken} {
		if errors.Is(err, not) {
			t.Errorf("%s = %v; it matches %v", what, err, not)
		}
	}
}

// Every call on a PostgreSQL server that accepts connections but never
// answers returns by its deadline, with ErrUnavailable and the deadline's
// error; the work left in the background ends once the connection is
// closed, and returns its connections to the pool.
func TestStalledPostgres(t *testing.T) {
	const timeout = 300 * time.Millisecond
	b, p := proxiedPostgres(t)
	s := b.newStore(t) // through the proxy, while it forwards
	ctx := testCtx(t)
	if err := s.Put(ctx, "r", 5, []byte("five")); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	p.stall()

	took, err := timed(t, timeout, func(ctx context.Context) error { return s.Put(ctx, "r", 6, []byte("six")) })
	expectStalled(t, "Put", timeout, took, err)
	took, err = timed(t, timeout, func(ctx context.Context) error { _, _, err := s.Get(ctx, "r"); return err })
	expectStalled(t, "Get", timeout, took, err)
	took, err = timed(t, timeout, func(ctx context.Context) error { _, err := s.Fence(ctx, "r"); return err })
	expectStalled(t, "Fence", timeout, took, err)
	ran := make(chan struct{}, 1)
	took, err = timed(t, timeout, func(ctx context.Context) error {
		return s.Tx(ctx, "r", 7, func(*sql.Tx) error { ran <- struct{}{}; return nil })
	})
	expectStalled(t, "Tx", timeout, took, err)
	took, err = timed(t, timeout, func(ctx context.Context) error {
		_, err := sqlstore.NewContext(ctx, b.db, b.dialect, sqlstore.WithTable(b.name(t, "fences")))
		return err
	})
	expectStalled(t, "NewContext", timeout, took, err)

	// Nothing left behind once the connections close.
	p.close()
	deadline := time.Now().Add(10 * time.Second)
	for b.db.Stats().InUse != 0 || runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("10 s after the connections closed: %d connections in use, %d goroutines (%d before the stall):\n%s",
				b.db.Stats().InUse, runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-ran:
		t.Error("Tx ran fn, though the raise of the fence never got an answer")
	default:
	}
}
