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
