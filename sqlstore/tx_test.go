package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lib/pq"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/pgtest"
	"github.com/fencedlock/fencedlock/sqlstore"
)

// txEnv is a Store and a table "items" that Tx's fn writes to.
type txEnv struct {
	*backend
	t     *testing.T
	ctx   context.Context
	s     *sqlstore.Store
	items string
}

func newTxEnv(t *testing.T, b *backend) *txEnv {
	t.Helper()
	e := &txEnv{backend: b, t: t, ctx: testCtx(t), s: b.newStore(t), items: b.name(t, "items")}
	b.exec(t, `CREATE TABLE `+e.items+` (resource TEXT NOT NULL, token BIGINT NOT NULL, note TEXT NOT NULL)`)
	return e
}

// insert is what fn does: it adds an item in tx.
func (e *txEnv) insert(tx *sql.Tx, resource string, token fencedlock.Token, note string) error {
	_, err := tx.ExecContext(e.ctx, e.sql(`INSERT INTO `+e.items+` (resource, token, note) VALUES ($1, $2, $3)`), resource, int64(token), note)
	return err
}

// tx runs Tx with an fn that inserts note, and reports whether fn ran.
func (e *txEnv) tx(resource string, token fencedlock.Token, note string) (ran bool, err error) {
	err = e.s.Tx(e.ctx, resource, token, func(tx *sql.Tx) error {
		ran = true
		return e.insert(tx, resource, token, note)
	})
	return ran, err
}

// mustTx runs tx and fails the test unless it was accepted.
func (e *txEnv) mustTx(resource string, token fencedlock.Token, note string) {
	e.t.Helper()
	if ran, err := e.tx(resource, token, note); err != nil || !ran {
		e.t.Fatalf("Tx(%q, %d) = %v, fn ran: %v; want it accepted", resource, token, err, ran)
	}
}

// txCancelledInFn runs a Tx whose fn inserts note and then cancels the
// Tx's context, so that it ends before the commit, and returns its error.
func (e *txEnv) txCancelledInFn(resource string, token fencedlock.Token, note string) error {
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	return e.s.Tx(ctx, resource, token, func(tx *sql.Tx) error {
		if err := e.insert(tx, resource, token, note); err != nil {
			return err
		}
		cancel()
		return nil
	})
}

// txFailingCommit runs a Tx whose fn inserts note and a row that breaks a
// deferred foreign key, so that its commit fails, and returns its error.
func (e *txEnv) txFailingCommit(resource string, token fencedlock.Token, note string) error {
	e.t.Helper()
	parent, child := e.name(e.t, "parent"), e.name(e.t, "child")
	e.exec(e.t, `CREATE TABLE `+parent+` (id INTEGER PRIMARY KEY)`)
	e.exec(e.t, `CREATE TABLE `+child+` (parent_id INTEGER REFERENCES `+parent+` (id) DEFERRABLE INITIALLY DEFERRED)`)
	return e.s.Tx(e.ctx, resource, token, func(tx *sql.Tx) error {
		if err := e.insert(tx, resource, token, note); err != nil {
			return err
		}
		// No parent 42: the deferred foreign key fails at commit.
		_, err := tx.ExecContext(e.ctx, e.sql(`INSERT INTO `+child+` (parent_id) VALUES ($1)`), 42)
		return err
	})
}

// holdFence starts a Tx on resource with token whose fn waits, and
// returns once that Tx holds the fence's lock (failing t if it returned
// without running fn). free lets fn return fnErr; it may be called more
// than once, from any goroutine. done then gives the holding Tx's error.
func (e *txEnv) holdFence(t *testing.T, resource string, token fencedlock.Token, fnErr error) (free func(), done <-chan error) {
	t.Helper()
	holding, release := make(chan struct{}), make(chan struct{})
	result := make(chan error, 1)
	go func() {
		result <- e.s.Tx(e.ctx, resource, token, func(*sql.Tx) error {
			close(holding)
			<-release
			return fnErr
		})
	}()
	select {
	case <-holding:
	case err := <-result:
		t.Fatalf("Tx(%q, %d) = %v without running fn; want it to hold the lock", resource, token, err)
	}
	var once sync.Once
	return func() { once.Do(func() { close(release) }) }, result
}

// notes returns the notes of resource's committed items, in insertion
// order.
func (e *txEnv) notes(resource string) string {
	e.t.Helper()
	rows, err := e.db.QueryContext(e.ctx, e.sql(`SELECT note FROM `+e.items+` WHERE resource = $1 ORDER BY token, note`), resource)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	var notes []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			e.t.Fatal(err)
		}
		notes = append(notes, n)
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return strings.Join(notes, ",")
}

func (e *txEnv) expectNotes(resource, want string) {
	e.t.Helper()
	if got := e.notes(resource); got != want {
		e.t.Errorf("items of %q = %q; want %q", resource, got, want)
	}
}

func (e *txEnv) expectFence(resource string, want fencedlock.Token) {
	e.t.Helper()
	got, err := e.s.CurrentFence(e.ctx, resource)
	if want == 0 {
		if !errors.Is(err, fencedlock.ErrNotFound) {
			e.t.Errorf("CurrentFence(%q) = (%d, %v); want ErrNotFound", resource, got, err)
		}
		return
	}
	if err != nil || got != want {
		e.t.Errorf("CurrentFence(%q) = (%d, %v); want %d", resource, got, err, want)
	}
}

// expectStale checks that err is the StaleTokenError of token against
// current.
func expectStale(t *testing.T, err error, resource string, token, current fencedlock.Token) {
	t.Helper()
	var se *fencedlock.StaleTokenError
	if !errors.As(err, &se) {
		t.Errorf("error = %v; want a *fencedlock.StaleTokenError", err)
		return
	}
	if se.Resource != resource || se.Token != token || se.Current != current {
		t.Errorf("StaleTokenError{%q, Token %d, Current %d}; want {%q, Token %d, Current %d}", se.Resource, se.Token, se.Current, resource, token, current)
	}
	if !errors.Is(err, fencedlock.ErrStaleToken) {
		t.Errorf("errors.Is(%v, ErrStaleToken) = false", err)
	}
}

// expectIdle checks that Tx left no transaction open: every connection
// went back to the pool, and none of the pool's connections is still in a
// transaction.
func (e *txEnv) expectIdle() {
	e.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for e.db.Stats().InUse != 0 {
		if time.Now().After(deadline) {
			e.t.Errorf("%d connections still in use: a transaction was left open", e.db.Stats().InUse)
			return
		}
		time.Sleep(time.Millisecond)
	}
	// Take every idle connection at once (database/sql hands out idle
	// connections before it opens new ones) and ask each whether it is
	// in a transaction.
	n := e.db.Stats().Idle
	conns := make([]*sql.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < n; i++ {
		c, err := e.db.Conn(e.ctx)
		if err != nil {
			e.t.Fatalf("taking connection %d of %d from the pool: %v", i+1, n, err)
		}
		conns = append(conns, c)
		in, err := inTransaction(e.ctx, e.dialect, c)
		if err != nil {
			e.t.Errorf("connection %d of %d: %v", i+1, n, err)
		} else if in {
			e.t.Errorf("connection %d of %d of the pool is still in a transaction", i+1, n)
		}
	}
}

// inTransaction reports whether c is in a transaction, leaving it as it
// was when it is not. SQLite refuses BEGIN in a transaction; PostgreSQL
// refuses SAVEPOINT outside one (SQLSTATE 25P01), and in a failed one
// (25P02); MariaDB says so in @@in_transaction (MySQL has no such
// variable: the tests run on MariaDB).
func inTransaction(ctx context.Context, d sqlstore.Dialect, c *sql.Conn) (bool, error) {
	if d == sqlstore.MySQL {
		var in bool
		if err := c.QueryRowContext(ctx, `SELECT @@in_transaction`).Scan(&in); err != nil {
			return false, fmt.Errorf("SELECT @@in_transaction: %w", err)
		}
		return in, nil
	}
	if d == sqlstore.SQLite {
		_, err := c.ExecContext(ctx, `BEGIN`)
		if err != nil {
			if strings.Contains(err.Error(), "within a transaction") {
				return true, nil
			}
			return false, fmt.Errorf("BEGIN: %w", err)
		}
		if _, err := c.ExecContext(ctx, `ROLLBACK`); err != nil {
			return false, fmt.Errorf("ROLLBACK: %w", err)
		}
		return false, nil
	}
	_, err := c.ExecContext(ctx, `SAVEPOINT expect_idle`)
	var pqErr *pq.Error
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &pqErr) && pqErr.Code == "25P01":
		return false, nil
	case errors.As(err, &pqErr) && pqErr.Code == "25P02":
		return true, nil
	}
	return false, fmt.Errorf("SAVEPOINT: %w", err)
}

func TestTxStaleToken(t *testing.T) {
	eachDialect(t, func(t *testing.T, b *backend) {
		e := newTxEnv(t, b)
		e.mustTx("r", 10, "ten")
		for _, tok := range []fencedlock.Token{9, 1} {
			ran, err := e.tx("r", tok, "stale")
			if ran {
				t.Errorf("Tx(token %d) after Tx(token 10) ran fn", tok)
			}
			expectStale(t, err, "r", tok, 10)
		}
		e.expectNotes("r", "ten")
		e.expectFence("r", 10)
		e.expectIdle()
	})
}

func TestTxEqualAndHigherToken(t *testing.T) {
	eachDialect(t, func(t *testing.T, b *backend) {
		e := newTxEnv(t, b)
		e.mustTx("r", 10, "a")
		e.mustTx("r", 10, "b")
		e.mustTx("r", 11, "c")
		e.expectNotes("r", "a,b,c")
		e.expectFence("r", 11)
		// Resources are fenced apart.
		e.mustTx("other", 1, "d")
		e.expectNotes("other", "d")
		e.expectFence("other", 1)
		e.expectIdle()
	})
}

func TestTxFnErrorRollsBack(t *testing.T) {
	eachDialect(t, func(t *testing.T, b *backend) {
		e := newTxEnv(t, b)
		e.mustTx("r", 5, "five")
		boom := errors.New("boom")
		err := e.s.Tx(e.ctx, "r", 10, func(tx *sql.Tx) error {
			if err := e.insert(tx, "r", 10, "ten"); err != nil {
				return err
			}
			return fmt.Errorf("fn failed: %w", boom)
		})
		if !errors.Is(err, boom) || err.Error() != "fn failed: boom" {
			t.Fatalf("Tx = %v; want fn's error as it is", err)
		}
		e.expectNotes("r", "five")
		// The fence was rolled back too: a token below 10 passes.
		e.expectFence("r", 5)
		e.mustTx("r", 7, "seven")
		e.expectNotes("r", "five,seven")

		// On a resource Tx never used, the rollback leaves no fence.
		err = e.s.Tx(e.ctx, "new", 3, func(tx *sql.Tx) error { return boom })
		if !errors.Is(err, boom) {
			t.Fatalf("Tx = %v; want boom", err)
		}
		e.expectFence("new", 0)
		if _, _, err := e.s.Get(e.ctx, "new"); !errors.Is(err, fencedlock.ErrNotFound) {
			t.Errorf("Get after a failed Tx = %v; want ErrNotFound", err)
		}
		e.expectIdle()
	})
}

func TestTxFnPanicRollsBack(t *testing.T) {
	eachDialect(t, func(t *testing.T, b *backend) {
		e := newTxEnv(t, b)
		e.mustTx("r", 5, "five")
		type sentinel struct{ msg string }
		var recovered any
		func() {
			defer func() { recovered = recover() }()
			e.s.Tx(e.ctx, "r", 10, func(tx *sql.Tx) error {
				if err := e.insert(tx, "r", 10, "ten"); err != nil {
					t.Error(err)
				}
				panic(sentinel{"in fn"})
			})
		}()
		if recovered != (sentinel{"in fn"}) {
			t.Fatalf("recovered %v from Tx; want fn's panic value", recovered)
		}
		e.expectIdle()
		e.expectNotes("r", "five")
		e.expectFence("r", 5)
		e.mustTx("r", 7, "seven")
		e.expectNotes("r", "five,seven")
	})
}

func TestTxContext(t *testing.T) {
	eachDialect(t, func(t *testing.T, b *backend) {
		e := newTxEnv(t, b)
		e.mustTx("r", 5, "five")

		t.Run("cancelled before", func(t *testing.T) {
			ctx, cancel := context.WithCancel(e.ctx)
			cancel()
			err := e.s.Tx(ctx, "r", 6, func(*sql.Tx) error {
				t.Error("fn ran with a cancelled context")
				return nil
			})
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Tx with a cancelled context = %v; want context.Canceled", err)
			}
		})

		t.Run("cancelled in fn", func(t *testing.T) {
			err := e.txCancelledInFn("r", 6, "six")
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Tx whose context was cancelled before the commit = %v; want an error wrapping context.Canceled", err)
			}
		})

		// The context bounds the wait for a lock another Tx holds. SQLite's
		// busy handler does not watch the context, so there the wait ends
		// at the busy timeout: PostgreSQL and MySQL only.
		deadline := func(t *testing.T) {
			free, done := e.holdFence(t, "r", 5, nil)
			ctx, cancel := context.WithTimeout(e.ctx, 100*time.Millisecond)
			defer cancel()
			err := e.s.Tx(ctx, "r", 8, func(*sql.Tx) error {
				t.Error("fn ran while another Tx held the lock")
				return nil
			})
			t.Logf("Tx whose deadline passed waiting for the lock: %v", err)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Tx whose deadline passed waiting for the lock = %v; want a deadline error", err)
			}
			free()
			if err := <-done; err != nil {
				t.Errorf("the Tx holding the lock = %v", err)
			}
		}
		if b.dialect != sqlstore.SQLite {
			t.Run("deadline waiting for the lock", deadline)
		}

		e.expectNotes("r", "five")
		e.expectFence("r", 5)
		e.expectIdle()
	})
}

// A Tx waits for another Tx on the resource to end, and then sees the
// fence that one committed.
func TestTxWaitsForLock(t *testing.T) {
	eachDialect(t, func(t *testing.T, b *backend) {
		e := newTxEnv(t, b)
		holding, release := make(chan struct{}), make(chan struct{})
		first := make(chan error, 1)
		go func() {
			first <- e.s.Tx(e.ctx, "r", 10, func(tx *sql.Tx) error {
				close(holding)
				<-release
				return e.insert(tx, "r", 10, "ten")
			})
		}()
		select {
		case <-holding:
		case err := <-first:
			t.Fatalf("Tx(10) = %v without running fn; want it to hold the lock", err)
		}
		defer func() {
			select {
			case <-release:
			default:
				close(release)
			}
		}()
		second := make(chan error, 1)
		var ran bool
		go func() {
			var err error
			ran, err = e.tx("r", 9, "nine")
			second <- err
		}()
		select {
		case err := <-second:
			t.Fatalf("Tx(9) returned %v while Tx(10) held the lock", err)
		case <-time.After(100 * time.Millisecond):
		}
		close(release)
		if err := <-first; err != nil {
			t.Fatalf("Tx(10) = %v", err)
		}
		err := <-second
		expectStale(t, err, "r", 9, 10)
		if ran {
			t.Error("Tx(9) ran fn")
		}
		e.expectNotes("r", "ten")
		e.expectIdle()
	})
}

// Tx and Put share the fence; Get reads only what Put wrote.
func TestTxAndPut(t *testing.T) {
	eachDialect(t, func(t *testing.T, b *backend) {
		e := newTxEnv(t, b)
		ctx := e.ctx

		// A fence raised by Tx alone: no value yet.
		e.mustTx("r", 10, "ten")
		if v, tok, err := e.s.Get(ctx, "r"); !errors.Is(err, fencedlock.ErrNotFound) {
			t.Errorf("Get after Tx only = (%q, %d, %v); want ErrNotFound", v, tok, err)
		}
		expectStale(t, e.s.Put(ctx, "r", 9, []byte("nine")), "r", 9, 10)
		if _, _, err := e.s.Get(ctx, "r"); !errors.Is(err, fencedlock.ErrNotFound) {
			t.Errorf("Get after a refused Put = %v; want ErrNotFound", err)
		}
		if err := e.s.Put(ctx, "r", 10, []byte("ten")); err != nil {
			t.Fatalf("Put with the fence's token = %v; want it accepted", err)
		}

		// A Tx with a higher token raises the fence, not the value.
		e.mustTx("r", 12, "twelve")
		if v, tok, err := e.s.Get(ctx, "r"); err != nil || string(v) != "ten" || tok != 10 {
			t.Errorf("Get after Put(10) and Tx(12) = (%q, %d, %v); want (\"ten\", 10)", v, tok, err)
		}
		expectStale(t, e.s.Put(ctx, "r", 11, []byte("eleven")), "r", 11, 12)
		ran, err := e.tx("r", 11, "eleven")
		expectStale(t, err, "r", 11, 12)
		if ran {
			t.Error("Tx(11) after Tx(12) ran fn")
		}

		// A Put with a higher token fences Tx.
		if err := e.s.Put(ctx, "r", 20, []byte("twenty")); err != nil {
			t.Fatal(err)
		}
		ran, err = e.tx("r", 15, "fifteen")
		expectStale(t, err, "r", 15, 20)
		if ran {
			t.Error("Tx(15) after Put(20) ran fn")
		}
		e.mustTx("r", 20, "twenty")
		if v, tok, err := e.s.Get(ctx, "r"); err != nil || string(v) != "twenty" || tok != 20 {
			t.Errorf("Get = (%q, %d, %v); want (\"twenty\", 20)", v, tok, err)
		}
		e.expectNotes("r", "ten,twelve,twenty")
		e.expectFence("r", 20)
		e.expectIdle()
	})
}

// fn may read and write through tx, the Store's table too, and sees the
// fence it raised.
func TestTxSeesItsFence(t *testing.T) {
	eachDialect(t, func(t *testing.T, b *backend) {
		e := newTxEnv(t, b)
		e.mustTx("r", 3, "three")
		err := e.s.Tx(e.ctx, "r", 8, func(tx *sql.Tx) error {
			var fence int64
			if err := tx.QueryRowContext(e.ctx, e.sql(`SELECT fence FROM `+e.s.Table()+` WHERE resource = $1`), "r").Scan(&fence); err != nil {
				return err
			}
			if fence != 8 {
				t.Errorf("fence inside Tx(8) = %d; want 8", fence)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// A commit that fails (a deferred constraint) is returned, and rolls back
// fn's writes and the fence.
func TestTxCommitFailure(t *testing.T) {
	eachDialect(t, func(t *testing.T, b *backend) {
		if b.dialect == sqlstore.MySQL {
			t.Skip("MySQL has no deferred constraints, nor anything else that fails a COMMIT on a working connection; TestStalledInFn has a commit whose connection breaks")
		}
		e := newTxEnv(t, b)
		e.mustTx("r", 5, "five")
		err := e.txFailingCommit("r", 10, "ten")
		if err == nil || !strings.Contains(err.Error(), "commit") {
			t.Fatalf("Tx whose commit fails = %v; want the commit's error", err)
		}
		e.expectIdle()
		e.expectNotes("r", "five")
		e.expectFence("r", 5)
		// Every connection of the pool still works: none was left in a
		// transaction.
		for i := 0; i < 4; i++ {
			e.mustTx("r", fencedlock.Token(6+i), fmt.Sprint(6+i))
		}
		e.expectNotes("r", "five,6,7,8,9")
	})
}

// memoryBackend returns an in-memory SQLite database with one connection,
// at dsn with "%s" replaced by a fresh name.
func memoryBackend(t *testing.T, dsn string) *backend {
	t.Helper()
	b := &backend{dialect: sqlstore.SQLite}
	db, err := sql.Open("sqlite", strings.ReplaceAll(dsn, "%s", b.name(t, "mem")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	b.db = db
	return b
}

// An in-memory SQLite database lives as long as a connection to it: with
// one connection, Tx must not close it when ctx ends before the commit or
// when the commit fails, or the database is gone.
func TestTxInMemorySQLite(t *testing.T) {
	for _, dsn := range []struct{ name, dsn string }{
		{"memory", "file::memory:?_pragma=foreign_keys(1)"},
		{"memdb", "file:/%s?vfs=memdb&_pragma=foreign_keys(1)"},
	} {
		dsn := dsn
		t.Run(dsn.name, func(t *testing.T) {
			t.Run("cancelled before commit", func(t *testing.T) {
				e := newTxEnv(t, memoryBackend(t, dsn.dsn))
				if err := e.s.Put(e.ctx, "r", 5, []byte("five")); err != nil {
					t.Fatal(err)
				}
				e.mustTx("r", 5, "five")
				err := e.txCancelledInFn("r", 6, "six")
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("Tx whose context was cancelled before the commit = %v; want context.Canceled", err)
				}
				e.expectSurvived()
			})

			t.Run("commit fails", func(t *testing.T) {
				e := newTxEnv(t, memoryBackend(t, dsn.dsn))
				if err := e.s.Put(e.ctx, "r", 5, []byte("five")); err != nil {
					t.Fatal(err)
				}
				e.mustTx("r", 5, "five")
				err := e.txFailingCommit("r", 6, "six")
				if err == nil || !strings.Contains(err.Error(), "commit") {
					t.Fatalf("Tx whose commit fails = %v; want the commit's error", err)
				}
				e.expectSurvived()
			})
		})
	}
}

// expectSurvived checks, after a failed Tx(6) on resource "r" that had
// Put(5, "five") and Tx(5, "five"), that the database is still there, as
// it was, and that the connection is out of the failed transaction.
func (e *txEnv) expectSurvived() {
	e.t.Helper()
	e.expectIdle()
	if v, tok, err := e.s.Get(e.ctx, "r"); err != nil || string(v) != "five" || tok != 5 {
		e.t.Fatalf("Get after the failed Tx = (%q, %d, %v); want (\"five\", 5, nil)", v, tok, err)
	}
	e.expectFence("r", 5)
	e.expectNotes("r", "five")
	e.mustTx("r", 7, "seven")
	e.expectNotes("r", "five,seven")
	e.expectFence("r", 7)
	e.expectIdle()
}

// A Put or a Fence waits for a Tx on its resource to end, and then meets
// the fence the Tx committed, or the one before it when the Tx rolled
// back.
func TestPutAndFenceWaitForTx(t *testing.T) {
	eachDialect(t, func(t *testing.T, b *backend) {
		for _, op := range []string{"Put", "Fence"} {
			op := op
			t.Run(op, func(t *testing.T) {
				for _, commit := range []bool{true, false} {
					commit := commit
					name := "commit"
					if !commit {
						name = "rollback"
					}
					t.Run(name, func(t *testing.T) { testWaitsForTx(t, b, op, commit) })
				}
			})
		}
	})
}

// testWaitsForTx runs op ("Put" or "Fence") with token 7 on a resource
// with Put(5), while a Tx(10) holds it, and checks what op met once the
// Tx committed, or rolled back.
func testWaitsForTx(t *testing.T, b *backend, op string, commit bool) {
	e := newTxEnv(t, b)
	if err := e.s.Put(e.ctx, "r", 5, []byte("five")); err != nil {
		t.Fatal(err)
	}
	call := func() error {
		if op == "Put" {
			return e.s.Put(e.ctx, "r", 7, []byte("seven"))
		}
		return e.s.Fence(e.ctx, "r", 7)
	}
	holding, release := make(chan struct{}), make(chan struct{})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	rollback := errors.New("rolled back by fn")
	txDone := make(chan error, 1)
	go func() {
		txDone <- e.s.Tx(e.ctx, "r", 10, func(tx *sql.Tx) error {
			if err := e.insert(tx, "r", 10, "ten"); err != nil {
				return err
			}
			close(holding)
			<-release
			if !commit {
				return rollback
			}
			return nil
		})
	}()
	select {
	case <-holding:
	case err := <-txDone:
		t.Fatalf("Tx(10) = %v without holding the lock", err)
	}
	opDone := make(chan error, 1)
	go func() { opDone <- call() }()
	select {
	case err := <-opDone:
		t.Fatalf("%s(7) returned %v while Tx(10) held the lock", op, err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	txErr, opErr := <-txDone, <-opDone
	// A Fence writes no value: Get returns Put(5)'s unless Put(7) was
	// accepted.
	value, token := "five", fencedlock.Token(5)
	if commit {
		if txErr != nil {
			t.Fatalf("Tx(10) = %v", txErr)
		}
		expectStale(t, opErr, "r", 7, 10)
		e.expectFence("r", 10)
		e.expectNotes("r", "ten")
	} else {
		if !errors.Is(txErr, rollback) {
			t.Fatalf("Tx(10) = %v; want fn's error", txErr)
		}
		if opErr != nil {
			t.Fatalf("%s(7) after Tx(10) rolled back = %v; want it accepted", op, opErr)
		}
		if op == "Put" {
			value, token = "seven", 7
		}
		e.expectFence("r", 7)
		e.expectNotes("r", "")
	}
	if v, tok, err := e.s.Get(e.ctx, "r"); err != nil || string(v) != value || tok != token {
		t.Errorf("Get = (%q, %d, %v); want (%q, %d, nil)", v, tok, err, value, token)
	}
	e.expectIdle()
}

// Under REPEATABLE READ, a Tx, a Put or a Fence that waited for a Tx on
// its resource fails with a serialization error (SQLSTATE 40001), as the
// package documentation says, and writes nothing; a retry meets the fence.
func TestPostgresRepeatableRead(t *testing.T) {
	e := newTxEnv(t, postgresBackend(t))
	db, err := sql.Open("postgres", pgtest.Shared(t).DSN("")+" default_transaction_isolation='repeatable read'")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var level string
	if err := db.QueryRowContext(e.ctx, `SHOW transaction_isolation`).Scan(&level); err != nil || level != "repeatable read" {
		t.Fatalf("transaction_isolation = %q, %v; want repeatable read", level, err)
	}
	rr, err := sqlstore.New(db, sqlstore.Postgres, sqlstore.WithTable(e.s.Table()))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.s.Put(e.ctx, "r", 5, []byte("five")); err != nil {
		t.Fatal(err)
	}
	var ran bool
	calls := []struct {
		name string
		call func() error
	}{
		{"Put(7)", func() error { return rr.Put(e.ctx, "r", 7, []byte("seven")) }},
		{"Fence(8)", func() error { return rr.Fence(e.ctx, "r", 8) }},
		{"Tx(12)", func() error {
			return rr.Tx(e.ctx, "r", 12, func(*sql.Tx) error {
				ran = true
				return nil
			})
		}},
	}
	for _, c := range calls {
		c := c
		free, txDone := e.holdFence(t, "r", 10, nil)
		done := make(chan error, 1)
		go func() { done <- c.call() }()
		time.Sleep(100 * time.Millisecond)
		free()
		if err := <-txDone; err != nil {
			t.Fatalf("Tx(10) = %v", err)
		}
		err := <-done
		var pqErr *pq.Error
		if !errors.As(err, &pqErr) || pqErr.Code != "40001" {
			t.Errorf("%s that waited for Tx(10) under REPEATABLE READ = %v; want SQLSTATE 40001", c.name, err)
		}
	}
	if ran {
		t.Error("Tx(12) that waited under REPEATABLE READ ran fn")
	}
	// Nothing was written; retries meet the fence.
	e.expectFence("r", 10)
	if v, tok, err := e.s.Get(e.ctx, "r"); err != nil || string(v) != "five" || tok != 5 {
		t.Errorf("Get = (%q, %d, %v); want (\"five\", 5, nil)", v, tok, err)
	}
	expectStale(t, calls[0].call(), "r", 7, 10)
	expectStale(t, calls[1].call(), "r", 8, 10)
	if err := calls[2].call(); err != nil || !ran {
		t.Errorf("Tx(12) retried = %v, fn ran: %v; want it accepted", err, ran)
	}
	e.expectFence("r", 12)
	e.expectIdle()
}

// A Tx holds up only the calls on its own resource in the database
// servers: while one holds the lock of resource "m", Put and Tx on
// resources next to it, new ones among them (whose names sort just
// before and after "m", where a lock on a gap of the index would block
// their insertion), go through. SQLite has one writer at a time: not
// there.
func TestTxDoesNotHoldUpOtherResources(t *testing.T) {
	eachServer(t, func(t *testing.T, d sqlstore.Dialect) {
		for _, existing := range []bool{true, false} {
			existing := existing
			name := "existing row"
			if !existing {
				name = "new row"
			}
			t.Run(name, func(t *testing.T) {
				e := newTxEnv(t, serverBackend(t, d))
				for _, r := range []string{"a", "k", "m", "o", "z"} {
					if existing || r != "m" {
						e.mustTx(r, 5, "five")
					}
				}
				free, held := e.holdFence(t, "m", 6, nil)
				defer func() {
					free()
					if err := <-held; err != nil {
						t.Errorf("Tx(m) = %v", err)
					}
				}()
				ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
				defer cancel()
				for _, r := range []string{"a", "k", "l", "ma", "m\x01", "n", "o", "z", "zz"} {
					if err := e.s.Put(ctx, r, 7, []byte("seven")); err != nil {
						t.Errorf("Put(%q) while a Tx held resource \"m\" = %v", r, err)
					}
					if err := e.s.Tx(ctx, r, 8, func(*sql.Tx) error { return nil }); err != nil {
						t.Errorf("Tx(%q) while a Tx held resource \"m\" = %v", r, err)
					}
				}
			})
		}
	})
}

// A Tx whose ctx ends while it waits for the lock of another Tx never
// runs fn once it has returned, even when the lock comes free just after:
// fn would run unbeknown to the caller. The lock comes free from 2 ms
// before the Tx's deadline to 2 ms after. A Tx whose lock came free only
// after it returned cannot have begun fn before it returned (the holder
// keeps the lock until then), so any run of its fn is a late one. (Where
// the lock came free first, fn may rightly run, and is not counted.)
func TestTxGivingUpNeverRunsFnLate(t *testing.T) {
	eachServer(t, func(t *testing.T, d sqlstore.Dialect) {
		e := newTxEnv(t, serverBackend(t, d))
		type round struct {
			freedAfterReturn atomic.Bool // set before the lock is freed
			ran              atomic.Bool
		}
		rounds := make([]*round, txLateRounds)
		for i := range rounds {
			rd := &round{}
			rounds[i] = rd
			r := fmt.Sprintf("r%d", i)
			free, done := e.holdFence(t, r, 5, nil)
			var returned atomic.Bool
			timeout := 20 * time.Millisecond
			ctx, cancel := context.WithTimeout(e.ctx, timeout)
			freed := time.AfterFunc(timeout+time.Duration(i%5-2)*time.Millisecond, func() {
				rd.freedAfterReturn.Store(returned.Load())
				free()
			})
			_ = e.s.Tx(ctx, r, 8, func(*sql.Tx) error { // nil when the lock came free before the deadline
				rd.ran.Store(true)
				return nil
			})
			returned.Store(true)
			cancel()
			if freed.Stop() {
				rd.freedAfterReturn.Store(true)
				free()
			}
			if err := <-done; err != nil {
				t.Fatalf("the Tx holding the lock = %v", err)
			}
		}
		time.Sleep(500 * time.Millisecond) // the background work of the Txs that gave up
		late, after := 0, 0
		for _, rd := range rounds {
			if rd.freedAfterReturn.Load() {
				after++
				if rd.ran.Load() {
					late++
				}
			}
		}
		t.Logf("%d of %d Txs saw the lock come free only after they returned", after, txLateRounds)
		if late > 0 {
			t.Errorf("fn ran in %d of the %d Txs whose lock came free after they had returned", late, after)
		}
	})
}

// txLateRounds is how many Txs give up in TestTxGivingUpNeverRunsFnLate.
// The race it looks for is rare: TestBoundedGatedBeginsOnlyWhileTheCallerWaits
// checks the gate that closes it deterministically.
const txLateRounds = 100
