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
	"github.com/fencedlock/fencedlock/internal/pgtest"
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

// A Tx whose COMMIT is sent and gets no answer, because its ctx ends
// while the proxy holds the answer back (with or without a cause) or
// the connection breaks before the answer arrives, does not say that
// nothing was committed, nor that the database is unavailable: its error
// matches ErrCommitUnknown and the cause. The transaction was in fact
// committed, fn's rows and the fence alike.
func TestTxCommitOutcomeUnknown(t *testing.T) {
	eachServer(t, testTxCommitOutcomeUnknown)
}

func testTxCommitOutcomeUnknown(t *testing.T, d sqlstore.Dialect) {
	b, p := proxied(t, d)
	e := newTxEnv(t, b)
	e.mustTx("r", 5, "five")
	token := fencedlock.Token(5)
	for _, c := range []struct {
		name   string
		cause  error // nil: a plain cancel
		broken bool  // the connection breaks instead
	}{
		{"ctx cancelled", nil, false},
		{"ctx cancelled with a cause", fencedlock.ErrLockLost, false},
		{"connection broken", nil, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			token++
			ctx, cancel := context.WithCancelCause(e.ctx)
			defer cancel(nil)
			err := e.s.Tx(ctx, "r", token, func(tx *sql.Tx) error {
				if err := e.insert(tx, "r", token, itoa(int64(token))); err != nil {
					return err
				}
				// The COMMIT goes out next, and its answer is held
				// back past the end of ctx, or lost with the
				// connection.
				if c.broken {
					p.DropReplies(1)
				} else {
					p.DelayReplies(time.Second)
					time.AfterFunc(200*time.Millisecond, func() { cancel(c.cause) })
				}
				return nil
			})
			p.DelayReplies(0)
			t.Logf("Tx: %v", err)
			e.expectIdle()
			e.expectFence("r", token)
			if !strings.HasSuffix(e.notes("r"), itoa(int64(token))) {
				t.Fatalf("the transaction was not committed (items %q); the test needs it committed", e.notes("r"))
			}
			if err == nil {
				return // the answer came after all
			}
			if !errors.Is(err, sqlstore.ErrCommitUnknown) {
				t.Errorf("Tx = %v, and the transaction was committed; want nil or an error matching ErrCommitUnknown", err)
			}
			if errors.Is(err, fencedlock.ErrUnavailable) {
				t.Errorf("Tx = %v matches ErrUnavailable, whose advice (try again) would do fn's work twice", err)
			}
			if !c.broken && !errors.Is(err, context.Canceled) {
				t.Errorf("Tx = %v; want it to wrap context.Canceled", err)
			}
			if c.cause != nil && !errors.Is(err, c.cause) {
				t.Errorf("Tx = %v; want it to wrap the cause, %v", err, c.cause)
			}
		})
	}
	e.expectNotes("r", "five,6,7,8")
}

// errCause is the cause with which the tests cancel contexts: the
// Locker's own, when a lock is lost under Locker.Do.
var errCause = fmt.Errorf("the term ended: %w", fencedlock.ErrLockLost)

// expectCause checks that err, the error of a call stopped by a ctx
// cancelled with errCause, wraps errCause and context.Canceled and no
// sentinel of package fencedlock but ErrLockLost, errCause's own.
func expectCause(t *testing.T, what string, err error) {
	t.Helper()
	t.Logf("%s: %v", what, err)
	if !errors.Is(err, errCause) || !errors.Is(err, context.Canceled) {
		t.Errorf("%s = %v; want an error wrapping the cause and context.Canceled", what, err)
	}
	for _, not := range []error{fencedlock.ErrUnavailable, fencedlock.ErrNotFound, fencedlock.ErrStaleToken, fencedlock.ErrInvalidArgument, fencedlock.ErrInvalidToken, sqlstore.ErrCommitUnknown} {
		if errors.Is(err, not) {
			t.Errorf("%s = %v; it matches %v", what, err, not)
		}
	}
}

// callsWith runs every call of s, and NewContext on b, each with a
// context of its own from newCtx, and returns their errors by name. fn
// of Tx reports on ran.
func callsWith(t *testing.T, newCtx func() context.Context, b *backend, s *sqlstore.Store, ran chan<- struct{}) map[string]error {
	errs := map[string]error{
		"Put":   s.Put(newCtx(), "r", 6, []byte("six")),
		"Fence": s.Fence(newCtx(), "r", 6),
		"Tx":    s.Tx(newCtx(), "r", 7, func(*sql.Tx) error { ran <- struct{}{}; return nil }),
	}
	_, _, errs["Get"] = s.Get(newCtx(), "r")
	_, errs["CurrentFence"] = s.CurrentFence(newCtx(), "r")
	_, errs["NewContext"] = sqlstore.NewContext(newCtx(), b.db, b.dialect, sqlstore.WithTable(b.name(t, "fences")))
	return errs
}

// cancelledWith returns a context cancelled with cause (nil: a plain
// cancel), after d.
func cancelledWith(cause error, d time.Duration) context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	if d == 0 {
		cancel(cause)
	} else {
		time.AfterFunc(d, func() { cancel(cause) })
	}
	return ctx
}

// A call whose ctx ended with a cause before it began sends nothing, and
// returns an error wrapping the cause and ctx's error, not ErrUnavailable;
// a ctx cancelled plainly gives ctx.Err() as it is, NewContext's too.
func TestCallsAfterCtxEndedWithCause(t *testing.T) {
	eachDialect(t, func(t *testing.T, b *backend) {
		s := b.newStore(t)
		if err := s.Put(testCtx(t), "r", 5, []byte("five")); err != nil {
			t.Fatal(err)
		}
		ran := make(chan struct{}, 1)
		withCause := func() context.Context { return cancelledWith(errCause, 0) }
		for what, err := range callsWith(t, withCause, b, s, ran) {
			expectCause(t, what, err)
		}
		plain := func() context.Context { return cancelledWith(nil, 0) } // the cause is context.Canceled
		for what, err := range callsWith(t, plain, b, s, ran) {
			if err != context.Canceled {
				t.Errorf("%s with a cancelled ctx = %v; want context.Canceled as it is", what, err)
			}
		}
		select {
		case <-ran:
			t.Error("Tx ran fn with a ctx that had ended")
		default:
		}
		if v, tok, err := s.Get(testCtx(t), "r"); err != nil || string(v) != "five" || tok != 5 {
			t.Errorf("Get = (%q, %d, %v); want (\"five\", 5, nil): nothing written", v, tok, err)
		}
	})
}

// A call waiting on a stalled database whose ctx is cancelled with a
// cause returns at once with an error wrapping the cause and
// context.Canceled, not ErrUnavailable; so does a Tx whose ctx is
// cancelled so while fn waits on the database (as Locker.Do cancels it
// when the lock is lost).
func TestStalledCallsStoppedWithCause(t *testing.T) {
	eachServer(t, func(t *testing.T, d sqlstore.Dialect) {
		b, p := proxied(t, d)
		e := newTxEnv(t, b)
		e.mustTx("r", 5, "five")
		p.Pause()
		const after = 200 * time.Millisecond
		ran := make(chan struct{}, 1)
		for _, cause := range []error{errCause, nil} {
			newCtx := func() context.Context { return cancelledWith(cause, after) }
			start := time.Now()
			errs := callsWith(t, newCtx, b, e.s, ran)
			for what, err := range errs {
				if cause != nil {
					expectCause(t, what, err)
				} else if !errors.Is(err, fencedlock.ErrUnavailable) || !errors.Is(err, context.Canceled) {
					t.Errorf("%s cancelled on a stalled database = %v; want ErrUnavailable and context.Canceled", what, err)
				}
			}
			if limit := time.Duration(len(errs)) * (after + stallBudget); time.Since(start) > limit {
				t.Errorf("%d calls cancelled %v after they began took %v; want at most %v", len(errs), after, time.Since(start).Round(time.Millisecond), limit)
			}
		}
		p.Resume()
		select {
		case <-ran:
			t.Error("Tx ran fn, though the raise of the fence never got an answer")
		default:
		}

		ctx, cancel := context.WithCancelCause(context.Background())
		err := e.s.Tx(ctx, "r", 8, func(tx *sql.Tx) error {
			if err := e.insert(tx, "r", 8, "eight"); err != nil {
				return err
			}
			p.Pause()
			time.AfterFunc(100*time.Millisecond, func() { cancel(errCause) })
			return e.insert(tx, "r", 8, "eight again") // stalls
		})
		expectCause(t, "Tx stopped in fn", err)
		p.Resume()
		e.expectIdle()
		e.expectNotes("r", "five")
	})
}

// A PostgreSQL that takes no writes (a standby; here a session whose
// transactions are read-only by default, whose writes PostgreSQL refuses
// with the same SQLSTATE) makes a write ErrUnavailable, with the
// database's error:
// behind a proxy during a failover, it passes once the proxy reaches the
// new primary.
func TestPostgresReadOnlyIsUnavailable(t *testing.T) {
	b := postgresBackend(t)
	table := b.name(t, "fences")
	s, err := sqlstore.New(b.db, sqlstore.Postgres, sqlstore.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	if err := s.Put(ctx, "r", 5, []byte("five")); err != nil {
		t.Fatal(err)
	}
	ro, err := sql.Open("postgres", pgtest.Shared(t).DSN("")+" default_transaction_read_only=on")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ro.Close() })
	rs, err := sqlstore.New(ro, sqlstore.Postgres, sqlstore.WithTable(table), sqlstore.WithCreateTable(false))
	if err != nil {
		t.Fatal(err)
	}
	for what, err := range map[string]error{
		"Put":   rs.Put(ctx, "r", 6, []byte("six")),
		"Fence": rs.Fence(ctx, "r", 7),
		// (Not Tx: its transaction is READ WRITE, which a read-only
		// default does not refuse; a standby does, with 25006 too.)
	} {
		if !errors.Is(err, fencedlock.ErrUnavailable) || !strings.Contains(err.Error(), "read-only") {
			t.Errorf("%s on a read-only database = %v; want ErrUnavailable with the database's error", what, err)
		}
	}
	if v, tok, err := rs.Get(ctx, "r"); err != nil || string(v) != "five" || tok != 5 {
		t.Errorf("Get = (%q, %d, %v); want (\"five\", 5, nil): reads pass, nothing written", v, tok, err)
	}
}
