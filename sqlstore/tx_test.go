package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
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
	got, err := e.s.Fence(e.ctx, resource)
	if want == 0 {
		if !errors.Is(err, fencedlock.ErrNotFound) {
			e.t.Errorf("Fence(%q) = (%d, %v); want ErrNotFound", resource, got, err)
		}
		return
	}
	if err != nil || got != want {
		e.t.Errorf("Fence(%q) = (%d, %v); want %d", resource, got, err, want)
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

// expectIdle checks that every connection went back to the pool: Tx
// ended its transaction.
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
			ctx, cancel := context.WithCancel(e.ctx)
			defer cancel()
			err := e.s.Tx(ctx, "r", 6, func(tx *sql.Tx) error {
				if err := e.insert(tx, "r", 6, "six"); err != nil {
					return err
				}
				cancel()
				return nil
			})
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Tx whose context was cancelled before the commit = %v; want an error wrapping context.Canceled", err)
			}
		})

		// The context bounds the wait for a lock another Tx holds. SQLite's
		// busy handler does not watch the context, so there the wait ends
		// at the busy timeout: PostgreSQL only.
		deadline := func(t *testing.T) {
			holding, release := make(chan struct{}), make(chan struct{})
			done := make(chan error, 1)
			go func() {
				done <- e.s.Tx(e.ctx, "r", 5, func(*sql.Tx) error {
					close(holding)
					<-release
					return nil
				})
			}()
			select {
			case <-holding:
			case err := <-done:
				t.Fatalf("Tx(5) = %v without running fn; want it to hold the lock", err)
			}
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
			close(release)
			if err := <-done; err != nil {
				t.Errorf("the Tx holding the lock = %v", err)
			}
		}
		if b.dialect == sqlstore.Postgres {
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
		e := newTxEnv(t, b)
		parent, child := b.name(t, "parent"), b.name(t, "child")
		b.exec(t, `CREATE TABLE `+parent+` (id INTEGER PRIMARY KEY)`)
		b.exec(t, `CREATE TABLE `+child+` (parent_id INTEGER REFERENCES `+parent+` (id) DEFERRABLE INITIALLY DEFERRED)`)
		e.mustTx("r", 5, "five")
		err := e.s.Tx(e.ctx, "r", 10, func(tx *sql.Tx) error {
			if err := e.insert(tx, "r", 10, "ten"); err != nil {
				return err
			}
			// No parent 42: the deferred foreign key fails at commit.
			_, err := tx.ExecContext(e.ctx, e.sql(`INSERT INTO `+child+` (parent_id) VALUES ($1)`), 42)
			return err
		})
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
