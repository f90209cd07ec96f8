package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
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

// Every call on a PostgreSQL or MySQL server that accepts connections but
// never answers returns by its deadline, with ErrUnavailable and the
// deadline's error; the work left in the background ends once the
// connection is closed, and returns its connections to the pool.
func TestStalledServer(t *testing.T) {
	eachServer(t, testStalledServer)
}

func testStalledServer(t *testing.T, d sqlstore.Dialect) {
	const timeout = 300 * time.Millisecond
	b, p := proxied(t, d)
	s := b.newStore(t) // through the proxy, while it forwards
	ctx := testCtx(t)
	if err := s.Put(ctx, "r", 5, []byte("five")); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	p.Pause()

	took, err := timed(t, timeout, func(ctx context.Context) error { return s.Put(ctx, "r", 6, []byte("six")) })
	expectStalled(t, "Put", timeout, took, err)
	took, err = timed(t, timeout, func(ctx context.Context) error { _, _, err := s.Get(ctx, "r"); return err })
	expectStalled(t, "Get", timeout, took, err)
	took, err = timed(t, timeout, func(ctx context.Context) error { _, err := s.CurrentFence(ctx, "r"); return err })
	expectStalled(t, "CurrentFence", timeout, took, err)
	took, err = timed(t, timeout, func(ctx context.Context) error { return s.Fence(ctx, "r", 6) })
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
	p.Close()
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

// A Tx whose database stalls while fn runs returns by its deadline, and
// its transaction is doomed: once the database answers again, fn's
// statements fail, nothing of it is committed, and the connection goes
// back to the pool outside any transaction (or, in MySQL, whose driver
// closes a connection whose ctx ended, is closed).
func TestStalledInFn(t *testing.T) {
	eachServer(t, testStalledInFn)
}

func testStalledInFn(t *testing.T, d sqlstore.Dialect) {
	const timeout = 300 * time.Millisecond
	b, p := proxied(t, d)
	e := newTxEnv(t, b)
	e.mustTx("r", 5, "five")

	fnDone := make(chan error, 1)
	took, err := timed(t, timeout, func(ctx context.Context) error {
		return e.s.Tx(ctx, "r", 7, func(tx *sql.Tx) error {
			if err := e.insert(tx, "r", 7, "seven"); err != nil {
				fnDone <- err
				return err
			}
			p.Pause()
			err := e.insert(tx, "r", 7, "seven again") // stalls
			if err == nil {
				err = e.insert(tx, "r", 7, "seven once more")
			}
			fnDone <- err
			return err
		})
	})
	expectStalled(t, "Tx stalled in fn", timeout, took, err)

	p.Resume()
	select {
	case err := <-fnDone:
		t.Logf("fn's statements after the deadline: %v", err)
		if err == nil {
			t.Error("fn's statements all succeeded after Tx returned; want them to fail")
		}
	case <-time.After(15 * time.Second):
		t.Fatal("fn still running 15 s after the database answered again")
	}
	e.expectIdle()
	e.expectNotes("r", "five")
	e.expectFence("r", 5)
	e.mustTx("r", 8, "eight")
	e.expectNotes("r", "five,eight")
}

// A SQLite database whose write lock another connection holds stalls
// writers until the busy timeout (10 s in these tests), which
// modernc.org/sqlite does not cut short when ctx ends: Put, Fence and Tx
// return by their deadline all the same.
func TestStalledSQLite(t *testing.T) {
	const timeout = 300 * time.Millisecond
	b := sqliteBackend(t)
	s := b.newStore(t)
	ctx := testCtx(t)
	if err := s.Put(ctx, "r", 5, []byte("five")); err != nil {
		t.Fatal(err)
	}
	holder, err := b.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := holder.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	took, err := timed(t, timeout, func(ctx context.Context) error { return s.Put(ctx, "r", 6, []byte("six")) })
	expectStalled(t, "Put", timeout, took, err)
	took, err = timed(t, timeout, func(ctx context.Context) error { return s.Fence(ctx, "r", 6) })
	expectStalled(t, "Fence", timeout, took, err)
	took, err = timed(t, timeout, func(ctx context.Context) error {
		return s.Tx(ctx, "r", 7, func(*sql.Tx) error {
			t.Error("fn ran while another connection held the write lock")
			return nil
		})
	})
	expectStalled(t, "Tx", timeout, took, err)
	if _, err := holder.ExecContext(ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	holder.Close()

	// The abandoned Put and Fence may still take effect once they get
	// the lock (the Tx cannot: its context has ended); either way the
	// fence is respected and the pool is left idle.
	deadline := time.Now().Add(15 * time.Second)
	for b.db.Stats().InUse != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still in use 15 s after the lock was released", b.db.Stats().InUse)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if f, err := s.CurrentFence(ctx, "r"); err != nil || (f != 5 && f != 6) {
		t.Errorf("CurrentFence = (%d, %v); want 5, or 6 if the abandoned Put or Fence went through", f, err)
	}
}

// A database that cannot be reached gives errors wrapping ErrUnavailable
// with the cause, and none of the errors about the data.
func TestUnreachableServer(t *testing.T) {
	eachServer(t, testUnreachableServer)
}

func testUnreachableServer(t *testing.T, d sqlstore.Dialect) {
	b, p := proxied(t, d)
	s := b.newStore(t)
	ctx := testCtx(t)
	if err := s.Put(ctx, "r", 5, []byte("five")); err != nil {
		t.Fatal(err)
	}
	p.Close() // the port is closed, the pool's connections dropped

	check := func(what string, err error) {
		t.Helper()
		t.Logf("%s: %v", what, err)
		if !errors.Is(err, fencedlock.ErrUnavailable) {
			t.Errorf("%s = %v; want an error wrapping ErrUnavailable", what, err)
		}
		for _, not := range []error{fencedlock.ErrNotFound, fencedlock.ErrStaleToken, fencedlock.ErrInvalidArgument, fencedlock.ErrInvalidToken, context.DeadlineExceeded} {
			if errors.Is(err, not) {
				t.Errorf("%s = %v; it matches %v", what, err, not)
			}
		}
	}
	check("Put", s.Put(ctx, "r", 6, []byte("six")))
	_, _, err := s.Get(ctx, "r")
	check("Get", err)
	_, _, err = s.Get(ctx, "never-written")
	check("Get of a resource never written", err)
	_, err = s.CurrentFence(ctx, "r")
	check("CurrentFence", err)
	if want := `sqlstore: current fence "r": `; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("CurrentFence = %v; want a message starting %q", err, want)
	}
	err = s.Fence(ctx, "r", 6)
	check("Fence", err)
	if want := `sqlstore: fence "r": `; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Fence = %v; want a message starting %q", err, want)
	}
	check("Tx", s.Tx(ctx, "r", 7, func(*sql.Tx) error {
		t.Error("Tx ran fn on an unreachable database")
		return nil
	}))
	_, err = sqlstore.NewContext(ctx, b.db, b.dialect, sqlstore.WithTable(b.name(t, "fences")))
	check("NewContext", err)
	check("Put with context.Background()", s.Put(context.Background(), "r", 6, []byte("six")))
	check("Fence with context.Background()", s.Fence(context.Background(), "r", 6))
}

// The errors fn returns pass through Tx as they are, even those that
// look like connection trouble.
func TestTxFnErrorNotUnavailable(t *testing.T) {
	eachDialect(t, func(t *testing.T, b *backend) {
		e := newTxEnv(t, b)
		mine := fmt.Errorf("fn read a truncated file: %w", io.ErrUnexpectedEOF)
		err := e.s.Tx(e.ctx, "r", 3, func(*sql.Tx) error { return mine })
		if err != mine {
			t.Errorf("Tx = %v; want fn's error itself", err)
		}
		if errors.Is(err, fencedlock.ErrUnavailable) {
			t.Errorf("Tx = %v; fn's error was made to match ErrUnavailable", err)
		}
	})
}

// fn runs in a goroutine of Tx's own when ctx can end; a runtime.Goexit
// in fn (t.FailNow, say) still ends the caller's goroutine, after the
// rollback, as it would if fn ran there.
func TestTxFnGoexit(t *testing.T) {
	eachDialect(t, func(t *testing.T, b *backend) {
		e := newTxEnv(t, b)
		returned := make(chan bool, 1)
		go func() {
			ended := true
			defer func() { returned <- ended }()
			e.s.Tx(e.ctx, "r", 3, func(tx *sql.Tx) error {
				if err := e.insert(tx, "r", 3, "three"); err != nil {
					return err
				}
				runtime.Goexit()
				return nil
			})
			ended = false // not reached
		}()
		select {
		case ended := <-returned:
			if !ended {
				t.Error("Tx returned after fn called runtime.Goexit; want the caller's goroutine to end")
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Tx still running 10 s after fn called runtime.Goexit")
		}
		e.expectIdle()
		e.expectNotes("r", "")
		e.expectFence("r", 0)
	})
}
