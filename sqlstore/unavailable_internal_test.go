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
		{&pq.Error{Code: "23505"}, false}, // unique_violation
		{&pq.Error{Code: "40001"}, false}, // serialization_failure
		{&pq.Error{Code: "57014"}, false}, // query_canceled
		{stateErr("42P01"), false},        // undefined_table
		{sql.ErrNoRows, false},
		{sql.ErrTxDone, false},
		{errors.New("SQL logic error: no such table"), false},
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
		if len(err.Error()) > 300 {
			t.Errorf("%s: a %d-byte message quotes the whole name", c.name, len(err.Error()))
		}
	}
}
