package sqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/names"
)

// sqlStater is the method by which PostgreSQL drivers expose an error's
// SQLSTATE: lib/pq's *pq.Error and pgx's *pgconn.PgError have it.
type sqlStater interface{ SQLState() string }

// connectionTrouble reports whether err, an error of a database call,
// says that the database could not be reached or the connection broke:
// a network error, a connection database/sql or the driver gave up on, a
// connection closed mid-answer, or a SQLSTATE of connection trouble
// (class 08 connection exception, 57P01-57P03 the server shutting down
// or not accepting connections yet, 53300 too many connections). Errors
// about the data (a constraint, a syntax error, a serialization failure)
// are not connection trouble.
func connectionTrouble(err error) bool {
	var netErr net.Error
	var state sqlStater
	switch {
	case errors.As(err, &netErr),
		errors.Is(err, driver.ErrBadConn),
		errors.Is(err, sql.ErrConnDone),
		errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF):
		return true
	case errors.As(err, &state):
		code := state.SQLState()
		return strings.HasPrefix(code, "08") ||
			code == "57P01" || code == "57P02" || code == "57P03" ||
			code == "53300"
	}
	return false
}

// dbErr wraps err, the error of a database call of op on resource, step
// naming the part of op that failed ("" or e.g. "commit: "). When ctx has
// ended, or err is connection trouble, the error wraps
// fencedlock.ErrUnavailable too; when ctx has ended, it wraps ctx.Err()
// as well: some drivers report a cancelled query with an error of their
// own (lib/pq: "canceling statement due to user request").
func dbErr(ctx context.Context, op, resource, step string, err error) error {
	where := op
	if resource != "" {
		where += " " + names.Quote(resource)
	}
	cerr := ctx.Err()
	switch {
	case cerr != nil && !errors.Is(err, cerr):
		return fmt.Errorf("sqlstore: %s: %s%w: %w (%w)", where, step, fencedlock.ErrUnavailable, err, cerr)
	case cerr != nil || connectionTrouble(err):
		return fmt.Errorf("sqlstore: %s: %s%w: %w", where, step, fencedlock.ErrUnavailable, err)
	}
	return fmt.Errorf("sqlstore: %s: %s%w", where, step, err)
}

// ended is the error of a call whose ctx ended before the database
// answered: it wraps fencedlock.ErrUnavailable and ctx.Err().
func ended(ctx context.Context, op, resource string) error {
	where := op
	if resource != "" {
		where += " " + names.Quote(resource)
	}
	return fmt.Errorf("sqlstore: %s: %w: no answer from the database before the context ended: %w", where, fencedlock.ErrUnavailable, ctx.Err())
}

// bounded runs work, which uses the database with ctx, and returns its
// error, or, when ctx ends first, returns at once the error of ended and
// leaves work to finish in the background: database/sql and the driver
// may wait for a stalled database long after ctx ended (lib/pq waits for
// the answer to its cancel request). work must not touch what the
// caller keeps after bounded returns. The background work ends when the
// database answers or the connection closes. A context that can never
// end runs work in the caller's goroutine.
//
// A panic in work goes on in the caller's goroutine when the caller is
// still waiting, and in work's goroutine (ending the program, as any
// unrecovered panic does) when the caller has returned. A work that
// calls runtime.Goexit ends the caller's goroutine too.
func bounded(ctx context.Context, op, resource string, work func() error) error {
	if ctx.Done() == nil {
		return work()
	}
	var (
		mu       sync.Mutex
		gaveUp   bool // guarded by mu: the caller returned without work's outcome
		finished = make(chan struct{})
		out      outcome // guarded by mu: work's outcome, set before finished is closed
	)
	go func() {
		normal := false
		defer func() {
			if normal {
				return
			}
			v := recover()
			mu.Lock()
			defer mu.Unlock()
			if gaveUp {
				if v != nil {
					panic(v)
				}
				return
			}
			out = outcome{panicked: v != nil, value: v, goexit: v == nil}
			close(finished)
		}()
		err := work()
		normal = true
		mu.Lock()
		defer mu.Unlock()
		out = outcome{err: err}
		close(finished)
	}()
	select {
	case <-finished:
	case <-ctx.Done():
		mu.Lock()
		select {
		case <-finished:
			// work ended at the same moment: its own outcome is the
			// truer one.
		default:
			gaveUp = true
		}
		mu.Unlock()
		if gaveUp {
			return ended(ctx, op, resource)
		}
	}
	switch {
	case out.panicked:
		panic(out.value)
	case out.goexit:
		runtime.Goexit()
	}
	return out.err
}

// outcome is how the work of bounded ended.
type outcome struct {
	err      error
	panicked bool // value is what it panicked with
	value    any
	goexit   bool // it called runtime.Goexit
}
