package sqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/lib/pq"

	"github.com/fencedlock/fencedlock"
)

// lib/pq's errors carry their SQLSTATE by the method connectionTrouble
// looks for.
var _ sqlStater = (*pq.Error)(nil)

// stateErr is a driver error with a SQLSTATE, as pgx's are.
type stateErr string

func (e stateErr) Error() string    { return "state " + string(e) }
func (e stateErr) SQLState() string { return string(e) }

func TestConnectionTrouble(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, true},
		{fmt.Errorf("read: %w", io.EOF), true},
		{io.ErrUnexpectedEOF, true},
		{driver.ErrBadConn, true},
		{sql.ErrConnDone, true},
		{&pq.Error{Code: "08006"}, true},  // connection_failure
		{&pq.Error{Code: "08001"}, true},  // sqlclient_unable_to_establish_sqlconnection
		{&pq.Error{Code: "57P01"}, true},  // admin_shutdown
		{stateErr("57P02"), true},         // crash_shutdown
		{stateErr("57P03"), true},         // cannot_connect_now
		{stateErr("53300"), true},         // too_many_connections
		{&pq.Error{Code: "25006"}, true},  // read_only_sql_transaction: a standby
		{&pq.Error{Code: "23505"}, false}, // unique_violation
		{&pq.Error{Code: "40001"}, false}, // serialization_failure
		{&pq.Error{Code: "57014"}, false}, // query_canceled
		{stateErr("42P01"), false},        // undefined_table
		{sql.ErrNoRows, false},
		{sql.ErrTxDone, false},
		{errors.New("SQL logic error: no such table"), false},
		// MySQL and MariaDB, through go-sql-driver/mysql.
		{mysql.ErrInvalidConn, true},
		{fmt.Errorf("commit: %w", mysql.ErrInvalidConn), true},
		{&mysql.MySQLError{Number: 1040}, true},                        // too many connections
		{&mysql.MySQLError{Number: 1290}, true},                        // read_only: a replica
		{&mysql.MySQLError{Number: 1836}, true},                        // read-only mode (MySQL)
		{&mysql.MySQLError{Number: 1053}, true},                        // server shutdown; KILL in MySQL
		{&mysql.MySQLError{Number: 1927}, true},                        // connection killed (MariaDB)
		{&mysql.MySQLError{Number: 3169}, true},                        // session killed (MySQL)
		{&mysql.MySQLError{Number: 4031}, true},                        // idle connection closed (MySQL)
		{fmt.Errorf("put: %w", &mysql.MySQLError{Number: 1161}), true}, // net write interrupted
		{errors.Join(errors.New("a"), &mysql.MySQLError{Number: 1203}), true},
		{&mysql.MySQLError{Number: 1205}, false}, // lock wait timeout
		{&mysql.MySQLError{Number: 1213}, false}, // deadlock
		{&mysql.MySQLError{Number: 1062}, false}, // duplicate entry
		{&mysql.MySQLError{Number: 1146}, false}, // no such table
		{&mysql.MySQLError{Number: 1317}, false}, // query interrupted (KILL QUERY)
		{&mysql.MySQLError{Number: 3819}, false}, // check constraint violated
		{mysql.ErrPktSync, false},
		{fmt.Errorf("invalid connection %w", errors.New("x")), false}, // the message, not the sentinel's
	} {
		if got := connectionTrouble(c.err); got != c.want {
			t.Errorf("connectionTrouble(%T %v) = %v; want %v", c.err, c.err, got, c.want)
		}
	}
}

func TestDBErr(t *testing.T) {
	live := context.Background()
	ended, cancel := context.WithCancel(live)
	cancel()
	long := strings.Repeat("x", MaxResourceLen)
	lost, cancelLost := context.WithCancelCause(live)
	cancelLost(fencedlock.ErrLockLost)
	for _, c := range []struct {
		name        string
		ctx         context.Context
		err         error
		unavailable bool
	}{
		{"data error", live, &pq.Error{Code: "23505"}, false},
		{"connection trouble", live, io.EOF, true},
		{"ctx ended, driver's own error", ended, &pq.Error{Code: "57014"}, true},
		{"ctx ended, ctx's error", ended, context.Canceled, true},
		{"ctx ended with a cause, driver's own error", lost, &pq.Error{Code: "57014"}, false},
		{"ctx ended with a cause, connection trouble", lost, io.EOF, false},
		{"ctx ended with a cause, ctx's error", lost, context.Canceled, false},
	} {
		err := dbErr(c.ctx, "put", long, "", c.err)
		if !errors.Is(err, c.err) {
			t.Errorf("%s: %v does not wrap the cause", c.name, err)
		}
		if got := errors.Is(err, fencedlock.ErrUnavailable); got != c.unavailable {
			t.Errorf("%s: errors.Is(%v, ErrUnavailable) = %v; want %v", c.name, err, got, c.unavailable)
		}
		if c.ctx.Err() != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("%s: %v does not wrap context.Canceled", c.name, err)
		}
		if c.ctx == lost && !errors.Is(err, fencedlock.ErrLockLost) {
			t.Errorf("%s: %v does not wrap the cause with which ctx ended", c.name, err)
		}
		if len(err.Error()) > 300 {
			t.Errorf("%s: a %d-byte message quotes the whole name", c.name, len(err.Error()))
		}
	}
}

// mysqlNumbered is an error of another driver that carries a number
// named as go-sql-driver/mysql's does, but is not its MySQLError.
type mysqlNumbered struct{ Number uint16 }

func (e *mysqlNumbered) Error() string { return fmt.Sprint("error ", e.Number) }

// MySQLError is named as the driver's type, in a package whose path does
// not end in "mysql".
type MySQLError struct{ Number uint16 }

func (e MySQLError) Error() string { return fmt.Sprint("error ", e.Number) }

func TestMySQLErrorNumber(t *testing.T) {
	var nilErr *mysql.MySQLError
	for _, c := range []struct {
		err  error
		want uint16
	}{
		{&mysql.MySQLError{Number: 1213}, 1213},
		{fmt.Errorf("tx: %w", &mysql.MySQLError{Number: 1205}), 1205},
		{fmt.Errorf("a: %w, b: %w", io.EOF, &mysql.MySQLError{Number: 1040}), 1040},
		{nilErr, 0},
		{fmt.Errorf("wrapped nil: %w", nilErr), 0},
		{&mysqlNumbered{1213}, 0},
		{MySQLError{1213}, 0},
		{&pq.Error{Code: "40001"}, 0},
		{errors.New("Error 1213 (40001): Deadlock found"), 0},
		{nil, 0},
	} {
		if got := mysqlErrorNumber(c.err); got != c.want {
			t.Errorf("mysqlErrorNumber(%T %v) = %d; want %d", c.err, c.err, got, c.want)
		}
	}
	// A nil pointer in the chain is passed over, not called.
	if hasMessage(fmt.Errorf("x: %w", nilErr), mysqlInvalidConn) {
		t.Error("hasMessage found the message in a nil error")
	}
}

func TestVictimErr(t *testing.T) {
	deadlock := fmt.Errorf("sqlstore: put: %w", &mysql.MySQLError{Number: 1213, Message: "Deadlock found"})
	if err := victimErr(deadlock, 1); err != deadlock {
		t.Errorf("victimErr after one attempt = %v; want the error as it is", err)
	}
	err := victimErr(deadlock, deadlockAttempts)
	if !errors.Is(err, deadlock) || !strings.Contains(err.Error(), fmt.Sprintf("a deadlock victim %d times in a row", deadlockAttempts)) {
		t.Errorf("victimErr after %d attempts = %v; want the error, saying how many times", deadlockAttempts, err)
	}
	other := errors.New("other")
	if err := victimErr(other, 3); err != other {
		t.Errorf("victimErr of another error = %v; want it as it is", err)
	}
	if err := victimErr(nil, 2); err != nil {
		t.Errorf("victimErr(nil) = %v", err)
	}
}

// A step of boundedStages begins only while its caller still waits:
// once the caller has given up at the end of ctx, enter returns false,
// and an enter that came first is honoured. A caller that gives up while
// the work commits says that the commit's outcome is unknown; before,
// that nothing came back.
func TestBoundedStagesBeginOnlyWhileTheCallerWaits(t *testing.T) {
	t.Run("after the caller gave up", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		returned, entered := make(chan struct{}), make(chan bool, 1)
		cancel()
		err := boundedStages(ctx, "tx", "r", func(enter func(stage) bool) error {
			<-returned // the work is held up until the caller has returned
			entered <- enter(inFn)
			return nil
		})
		close(returned)
		if !errors.Is(err, fencedlock.ErrUnavailable) || !errors.Is(err, context.Canceled) || errors.Is(err, ErrCommitUnknown) {
			t.Errorf("boundedStages with a cancelled ctx = %v; want ErrUnavailable and context.Canceled", err)
		}
		if <-entered {
			t.Error("enter returned true after the caller had returned")
		}
	})
	t.Run("while the caller waits", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		want := errors.New("the step's error")
		var entered bool
		err := boundedStages(ctx, "tx", "r", func(enter func(stage) bool) error {
			entered = enter(inFn) && enter(committing)
			return want
		})
		if !entered {
			t.Error("enter returned false while the caller waited")
		}
		if err != want {
			t.Errorf("boundedStages = %v; want the work's own error", err)
		}
	})
	for _, c := range []struct {
		name    string
		stage   stage
		unknown bool
	}{
		{"ctx ends in fn", inFn, false},
		{"ctx ends committing", committing, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, lost := range []error{nil, fencedlock.ErrLockLost} {
				ctx, cancel := context.WithCancelCause(context.Background())
				release := make(chan struct{})
				err := boundedStages(ctx, "tx", "r", func(enter func(stage) bool) error {
					if !enter(c.stage) {
						t.Error("enter returned false while the caller waited")
					}
					cancel(lost)
					<-release // the step outlasts ctx
					return nil
				})
				close(release)
				if got := errors.Is(err, ErrCommitUnknown); got != c.unknown {
					t.Errorf("cause %v: boundedStages = %v; errors.Is(ErrCommitUnknown) = %v, want %v", lost, err, got, c.unknown)
				}
				unavailable := lost == nil && !c.unknown
				if got := errors.Is(err, fencedlock.ErrUnavailable); got != unavailable {
					t.Errorf("cause %v: boundedStages = %v; errors.Is(ErrUnavailable) = %v, want %v", lost, err, got, unavailable)
				}
				if !errors.Is(err, context.Canceled) || lost != nil && !errors.Is(err, lost) {
					t.Errorf("cause %v: boundedStages = %v; want it to wrap context.Canceled and the cause", lost, err)
				}
			}
		})
	}
}

// A failed commit's error says that its outcome is unknown when the
// COMMIT may have been carried out: the connection broke, or ctx ended,
// while it was on its way. When database/sql refused to send it, or the
// database answered with an error, nothing was committed.
func TestCommitErr(t *testing.T) {
	live := context.Background()
	ended, cancel := context.WithCancel(live)
	cancel()
	lost, cancelLost := context.WithCancelCause(live)
	cancelLost(fencedlock.ErrLockLost)
	for _, c := range []struct {
		name                 string
		ctx                  context.Context
		err                  error
		unknown, unavailable bool
	}{
		{"refused by the database", live, &pq.Error{Code: "23503"}, false, false},
		{"SQLite busy", live, errors.New("database is locked (5) (SQLITE_BUSY)"), false, false},
		{"connection broke", live, io.EOF, true, false},
		{"connection broke (lib/pq)", live, driver.ErrBadConn, true, false},
		{"connection broke (MySQL)", live, mysql.ErrInvalidConn, true, false},
		{"rolled back by database/sql", ended, sql.ErrTxDone, false, true},
		{"rolled back by database/sql, with a cause", lost, sql.ErrTxDone, false, false},
		{"ctx ended", ended, context.Canceled, true, false},
		{"ctx ended, driver's own error", ended, &pq.Error{Code: "57014"}, true, false},
		{"ctx ended with a cause", lost, io.EOF, true, false},
	} {
		err := commitErr(c.ctx, "r", c.err)
		t.Logf("%s: %v", c.name, err)
		if !errors.Is(err, c.err) {
			t.Errorf("%s: %v does not wrap the commit's error", c.name, err)
		}
		if got := errors.Is(err, ErrCommitUnknown); got != c.unknown {
			t.Errorf("%s: errors.Is(%v, ErrCommitUnknown) = %v; want %v", c.name, err, got, c.unknown)
		}
		if got := errors.Is(err, fencedlock.ErrUnavailable); got != c.unavailable {
			t.Errorf("%s: errors.Is(%v, ErrUnavailable) = %v; want %v", c.name, err, got, c.unavailable)
		}
		if c.ctx.Err() != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("%s: %v does not wrap context.Canceled", c.name, err)
		}
		if c.ctx == lost && !errors.Is(err, fencedlock.ErrLockLost) {
			t.Errorf("%s: %v does not wrap the cause with which ctx ended", c.name, err)
		}
	}
}

// A COMMIT refused because the server turned read-only while the
// transaction was open (MySQL checks read_only again at COMMIT, and rolls
// back) committed nothing: ErrUnavailable, not ErrCommitUnknown. A
// connection that broke during the COMMIT leaves it unknown.
func TestCommitRefusedAsReadOnlyCommittedNothing(t *testing.T) {
	ctx := context.Background()
	for _, err := range []error{
		&mysql.MySQLError{Number: 1290, Message: "The MariaDB server is running with the --read-only option so it cannot execute this statement"},
		&mysql.MySQLError{Number: 1836, Message: "Running in read-only mode"},
		&pq.Error{Code: "25006"},
	} {
		got := commitErr(ctx, "r", err)
		if !errors.Is(got, fencedlock.ErrUnavailable) || errors.Is(got, ErrCommitUnknown) || !errors.Is(got, err) {
			t.Errorf("commitErr(%v) = %v; want ErrUnavailable with the error, not ErrCommitUnknown", err, got)
		}
	}
	for _, err := range []error{io.ErrUnexpectedEOF, &mysql.MySQLError{Number: 2013}} {
		if got := commitErr(ctx, "r", err); !errors.Is(got, ErrCommitUnknown) {
			t.Errorf("commitErr(%v) = %v; want ErrCommitUnknown", err, got)
		}
	}
}
