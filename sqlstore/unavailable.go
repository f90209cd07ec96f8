package sqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
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
// or not accepting connections yet, 53300 too many connections), or a
// MySQL error of the kind (see mysqlConnectionErrors); or that the
// server takes no writes now (readOnly). Errors about the
// data (a constraint, a syntax error, a serialization failure, a
// deadlock, a lock wait timeout) are not connection trouble.
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
	case readOnly(err):
		return true
	case errors.As(err, &state):
		code := state.SQLState()
		return strings.HasPrefix(code, "08") ||
			code == "57P01" || code == "57P02" || code == "57P03" ||
			code == "53300"
	}
	if n := mysqlErrorNumber(err); n != 0 {
		return mysqlConnectionErrors[n]
	}
	return hasMessage(err, mysqlInvalidConn)
}

// readOnly reports whether err says that the server takes no writes now:
// a standby or a read-only replica, as behind a proxy during a failover
// (SQLSTATE 25006, a read-only transaction; MySQL's 1290, read_only or
// super_read_only, and 1836, read-only mode). The statement, or the
// COMMIT, that got it wrote nothing: MySQL checks read_only again at
// COMMIT, and rolls the transaction back.
func readOnly(err error) bool {
	var state sqlStater
	if errors.As(err, &state) {
		return state.SQLState() == "25006"
	}
	switch mysqlErrorNumber(err) {
	case erOptionPreventsStatement, erReadOnlyMode:
		return true
	}
	return false
}

// The MySQL error numbers of readOnly.
const (
	erOptionPreventsStatement = 1290 // ER_OPTION_PREVENTS_STATEMENT: the server runs with read_only or super_read_only (the other options it names refuse no statement of the Store)
	erReadOnlyMode            = 1836 // ER_READ_ONLY_MODE (MySQL)
)

// mysqlConnectionErrors are the MySQL and MariaDB error numbers that say
// the server is going away, or does not take the connection, or that the
// connection broke: ErrUnavailable. The rest, among them 1205 (a lock
// wait timeout: the row is held by a long transaction, the database
// answers) and 1213 (a deadlock, which Put, Fence and Tx try again where
// they can), are errors about the work, as those of the other dialects that
// are not connection trouble.
var mysqlConnectionErrors = map[uint16]bool{
	1040: true, // ER_CON_COUNT_ERROR: too many connections
	1053: true, // ER_SERVER_SHUTDOWN: shutting down; MySQL sends it too to a statement whose connection KILL ended
	1152: true, // ER_ABORTING_CONNECTION
	1158: true, // ER_NET_READ_ERROR
	1159: true, // ER_NET_READ_INTERRUPTED
	1160: true, // ER_NET_ERROR_ON_WRITE
	1161: true, // ER_NET_WRITE_INTERRUPTED
	1203: true, // ER_TOO_MANY_USER_CONNECTIONS: max_user_connections
	1226: true, // ER_USER_LIMIT_REACHED: an account's connection or query quota
	1927: true, // ER_CONNECTION_KILLED (MariaDB): KILL ended the connection
	3032: true, // ER_SERVER_OFFLINE_MODE
	3169: true, // ER_SESSION_WAS_KILLED (MySQL)
	4031: true, // ER_CLIENT_INTERACTION_TIMEOUT (MySQL 8.0.24+): the server closed an idle connection. (MariaDB's 4031 is about triggers, which no statement of the Store touches.)
	// The numbers of the C client library, for drivers built on it.
	2002: true, // CR_CONNECTION_ERROR
	2003: true, // CR_CONN_HOST_ERROR
	2006: true, // CR_SERVER_GONE_ERROR
	2013: true, // CR_SERVER_LOST
	2055: true, // CR_SERVER_LOST_EXTENDED
}

// mysqlInvalidConn is the message of github.com/go-sql-driver/mysql's
// ErrInvalidConn, which it returns, as it is, when the connection breaks
// while it reads an answer or ends a transaction.
const mysqlInvalidConn = "invalid connection"

// mysqlErrorNumber returns the MySQL error number that err, or an error
// it wraps, carries as github.com/go-sql-driver/mysql's *MySQLError does:
// a struct named MySQLError, of a package whose path ends in "mysql",
// with a uint16 field Number. It returns 0 when there is none. The
// package reads the field by reflection, so as not to depend on the
// driver.
func mysqlErrorNumber(err error) uint16 {
	var n uint16
	walk(err, func(e error) bool {
		v := reflect.ValueOf(e)
		if v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return false
			}
			v = v.Elem()
		}
		t := v.Type()
		if v.Kind() != reflect.Struct || t.Name() != "MySQLError" || !strings.HasSuffix(t.PkgPath(), "mysql") {
			return false
		}
		f := v.FieldByName("Number")
		if !f.IsValid() || f.Kind() != reflect.Uint16 {
			return false
		}
		n = uint16(f.Uint())
		return true
	})
	return n
}

// hasMessage reports whether err, or an error it wraps, has the message
// msg.
func hasMessage(err error, msg string) bool {
	return walk(err, func(e error) bool {
		// A nil pointer's Error method may dereference it.
		if v := reflect.ValueOf(e); v.Kind() == reflect.Pointer && v.IsNil() {
			return false
		}
		return e.Error() == msg
	})
}

// walk calls f on err and on every error it wraps, depth first, as
// errors.Is does, until f returns true; it reports whether f did.
func walk(err error, f func(error) bool) bool {
	for err != nil {
		if f(err) {
			return true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if walk(e, f) {
					return true
				}
			}
			return false
		default:
			return false
		}
	}
	return false
}

// where names a call of op on resource ("" for none) in an error.
func where(op, resource string) string {
	if resource == "" {
		return op
	}
	return op + " " + names.Quote(resource)
}

// cause returns the cause with which ctx ended, when it ended with one
// that is not just its own error (a CancelCauseFunc's argument, or
// WithDeadlineCause's cause), and nil when ctx has not ended or ended
// plainly.
func cause(ctx context.Context) error {
	cerr := ctx.Err()
	if cerr == nil {
		return nil
	}
	if c := context.Cause(ctx); c != nil && c != cerr {
		return c
	}
	return nil
}

// endedWithCause is the error of a ctx that ended with a cause (see
// cause): it wraps the cause and ctx.Err(), and says so.
func endedWithCause(ctx context.Context, c error) error {
	if cerr := ctx.Err(); !errors.Is(c, cerr) {
		return fmt.Errorf("the context ended: %w (%w)", c, cerr)
	}
	return fmt.Errorf("the context ended: %w", c)
}

// notSent is the error of a call of op on resource whose ctx had ended
// before it sent anything: ctx.Err() as it is, or, when ctx ended with a
// cause, an error wrapping the cause and ctx.Err(), and not
// fencedlock.ErrUnavailable: nothing is wrong with the database.
func notSent(ctx context.Context, op, resource string) error {
	c := cause(ctx)
	if c == nil {
		return ctx.Err()
	}
	return fmt.Errorf("sqlstore: %s: nothing sent: %w", where(op, resource), endedWithCause(ctx, c))
}

// dbErr wraps err, the error of a database call of op on resource, step
// naming the part of op that failed ("" or e.g. "commit: "). When ctx has
// ended, or err is connection trouble, the error wraps
// fencedlock.ErrUnavailable too; when ctx has ended, it wraps ctx.Err()
// as well: some drivers report a cancelled query with an error of their
// own (lib/pq: "canceling statement due to user request"). When ctx
// ended with a cause (see cause), the error wraps the cause and
// ctx.Err() instead of ErrUnavailable: the call stopped because its
// caller said so, not because the database failed.
func dbErr(ctx context.Context, op, resource, step string, err error) error {
	w := where(op, resource)
	if c := cause(ctx); c != nil {
		return fmt.Errorf("sqlstore: %s: %s%w: %w", w, step, endedWithCause(ctx, c), err)
	}
	cerr := ctx.Err()
	switch {
	case cerr != nil && !errors.Is(err, cerr):
		return fmt.Errorf("sqlstore: %s: %s%w: %w (%w)", w, step, fencedlock.ErrUnavailable, err, cerr)
	case cerr != nil || connectionTrouble(err):
		return fmt.Errorf("sqlstore: %s: %s%w: %w", w, step, fencedlock.ErrUnavailable, err)
	}
	return fmt.Errorf("sqlstore: %s: %s%w", w, step, err)
}

// ended is the error of a call whose ctx ended before the database
// answered: it wraps fencedlock.ErrUnavailable and ctx.Err(), or, when
// ctx ended with a cause, the cause and ctx.Err() instead.
func ended(ctx context.Context, op, resource string) error {
	if c := cause(ctx); c != nil {
		return fmt.Errorf("sqlstore: %s: no answer from the database before %w", where(op, resource), endedWithCause(ctx, c))
	}
	return fmt.Errorf("sqlstore: %s: %w: no answer from the database before the context ended: %w", where(op, resource), fencedlock.ErrUnavailable, ctx.Err())
}

// commitUnknown is the error of Tx (op "tx") on resource whose COMMIT
// may have been sent and got no answer, so that whether it committed is
// unknown: the connection broke (err, not nil), or ctx ended while it
// was on its way (err is then the commit's error, or nil when Tx gave up
// waiting for it). It wraps ErrCommitUnknown and err, and ctx.Err() and
// the cause with which ctx ended, if any; not fencedlock.ErrUnavailable,
// whose advice, to try again, could do fn's work twice.
func commitUnknown(ctx context.Context, op, resource string, err error) error {
	w := where(op, resource)
	var why error
	switch c := cause(ctx); {
	case c != nil:
		why = endedWithCause(ctx, c)
	case ctx.Err() != nil:
		why = fmt.Errorf("the context ended: %w", ctx.Err())
	}
	switch {
	case err == nil:
		return fmt.Errorf("sqlstore: %s: %w: the COMMIT was sent, and no answer came before %w", w, ErrCommitUnknown, why)
	case why == nil:
		return fmt.Errorf("sqlstore: %s: %w: the connection broke during the COMMIT: %w", w, ErrCommitUnknown, err)
	case errors.Is(err, ctx.Err()):
		return fmt.Errorf("sqlstore: %s: %w: during the COMMIT, %w", w, ErrCommitUnknown, why)
	}
	return fmt.Errorf("sqlstore: %s: %w: during the COMMIT, %w: %w", w, ErrCommitUnknown, why, err)
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
	return boundedStages(ctx, op, resource, func(func(stage) bool) error { return work() })
}

// stage is how far Tx's work has gone, which tells what its caller,
// giving up when ctx ends, must report.
type stage int

const (
	// beforeCommit: nothing is committed unless the work goes on to
	// the commit, which it does only while the caller waits.
	beforeCommit stage = iota
	// inFn: fn runs; the work commits only while the caller waits.
	inFn
	// committing: the COMMIT is on its way; whether it commits is
	// unknown until the database answers.
	committing
)

// boundedStages is bounded for a work with steps that must not begin
// once the caller has returned (Tx's fn and its commit): work calls
// enter with the stage of each just before it begins it, and skips it
// when enter returns false. enter and the caller's giving up exclude
// each other, so each step either begins while the caller still waits,
// or never. A caller that gives up while the work is committing
// returns the error of commitUnknown instead of ended.
func boundedStages(ctx context.Context, op, resource string, work func(enter func(stage) bool) error) error {
	if ctx.Done() == nil {
		return work(func(stage) bool { return true })
	}
	var (
		mu       sync.Mutex
		gaveUp   bool           // guarded by mu: the caller returned without work's outcome
		reached  = beforeCommit // guarded by mu: the last stage work entered
		finished = make(chan struct{})
		out      outcome // guarded by mu: work's outcome, set before finished is closed
	)
	enter := func(s stage) bool {
		mu.Lock()
		defer mu.Unlock()
		if gaveUp {
			return false
		}
		reached = s
		return true
	}
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
		err := work(enter)
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
		at := reached
		mu.Unlock()
		switch {
		case gaveUp && at == committing:
			return commitUnknown(ctx, op, resource, nil)
		case gaveUp:
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
