package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lib/pq"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/pgtest"
	"github.com/fencedlock/fencedlock/sqlstore"
)

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
