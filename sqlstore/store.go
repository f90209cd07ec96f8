package sqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/names"
)

// DefaultTable is the table a Store uses unless WithTable names another.
const DefaultTable = "fencedlock_fences"

// MaxToken is the highest token a Store accepts: the largest SQL BIGINT,
// 2^63-1. Put, Fence and Tx refuse a higher token with an error wrapping
// [fencedlock.ErrInvalidToken]. Tokens a Locker seeds from the Redis clock
// (microseconds) stay far below it.
const MaxToken fencedlock.Token = math.MaxInt64

// MaxResourceLen is the longest resource name a Store accepts, in bytes:
// [fencedlock.MaxResourceLen], the limit of the whole library. (PostgreSQL
// cannot index much longer keys: a B-tree entry holds at most about 2700
// bytes; InnoDB's keys hold at most 3072 bytes, and the MySQL table's
// resource column, VARBINARY(1024), holds MaxResourceLen.)
const MaxResourceLen = fencedlock.MaxResourceLen

// ErrCommitUnknown is matched by the error of a Tx whose COMMIT was sent
// but got no answer, because the connection broke or ctx ended while it
// was on its way: the transaction may have been committed, fn's writes
// and the fence alike, or not. The error wraps the cause too (the
// driver's error, ctx.Err(), and the cause with which ctx ended, if
// any), and does not match [fencedlock.ErrUnavailable], which says to
// try again: doing so could do fn's work twice. Read what fn would have
// written to learn the outcome before doing the work again.
var ErrCommitUnknown = errors.New("sqlstore: the commit's outcome is unknown")

// The longest values Put takes (see Store.MaxValueLen): what each
// database can receive in Put's statement, less valueRoom for the rest
// of the statement and the row (the resource name, the tokens, the
// statement's text and headers).
const (
	valueRoom = 4 << 10

	// sqliteMaxValue: SQLite refuses a string, blob or row longer than
	// SQLITE_MAX_LENGTH, 10^9 bytes unless the build raised it.
	sqliteMaxValue = 1_000_000_000 - valueRoom

	// postgresMaxValue: PostgreSQL takes a field (a bytea) and a protocol
	// message of at most 1 GiB - 1 bytes, and lib/pq sends a []byte
	// in hex, twice its length.
	postgresMaxValue = (1<<30 - 1 - valueRoom) / 2
)

// Store is a [fencedlock.Store] in a SQL database, whose Tx also fences the
// caller's own SQL writes. Every resource has one row in the Store's table:
// see the package documentation for the schema and the locking.
//
// Make a Store with New or NewContext. The zero Store and a nil *Store
// have no database: their methods return errors wrapping
// [fencedlock.ErrInvalidArgument].
//
// A Store is safe for concurrent use by multiple goroutines, and by
// multiple processes that share the database.
type Store struct {
	db       *sql.DB
	dialect  Dialect
	table    string
	q        queries
	maxValue int // the longest value Put takes, set by New
}

var _ fencedlock.Store = (*Store)(nil)

// How Put, Fence and Tx keep the tokens of a resource in order.
//
// Put is one statement in SQLite and PostgreSQL (the package
// documentation shows it): an upsert that writes the value and its token
// only when the token is not below the fence, raises the fence to the
// token, and returns the fence it leaves. A returned fence above the
// token means the Put was refused, and the row is as it was. Get is one
// SELECT of value and value_token, so it never sees one without the
// other. MySQL has no RETURNING: there Put is a transaction of the upsert
// and a read of the fence under its lock (see mysql.go). Fence is Put
// without value and value_token: Tx's first statement (below) alone, in
// MySQL with the read of the fence; it leaves the value as it is.
//
// Tx begins a transaction whose first statement is an upsert that raises
// the fence (INSERT ... ON CONFLICT (resource) DO UPDATE SET fence =
// GREATEST(f.fence, excluded.fence) RETURNING fence); when the fence it
// returns is above the token, Tx rolls back and returns the
// StaleTokenError without calling fn; otherwise it calls fn with the
// transaction and commits. The lock that upsert takes is held until the
// transaction ends, so Tx, Put and Fence calls on one resource take
// effect one at a time, in an order in which the tokens never go down:
//
//   - PostgreSQL: the upsert locks the resource's row (inserting it first
//     if need be), so a Tx, Put or Fence on the same resource waits until
//     the transaction ends and then sees the fence it committed; other
//     resources are not held up. This works under the default isolation
//     level, READ COMMITTED, where each statement of fn also sees the
//     writes earlier transactions on the resource committed. Under
//     REPEATABLE READ or SERIALIZABLE (default_transaction_isolation) a
//     Tx, Put or Fence that waited for another call on the resource fails
//     with a serialization error (SQLSTATE 40001, "could not serialize
//     access due to concurrent update") instead of meeting the fence the
//     other committed, without writing anything. The wait for the lock
//     ends when ctx does.
//   - SQLite: a database has one writer at a time. The upsert being the
//     transaction's first statement, the transaction takes the write lock
//     at once and keeps it to its end, so every Tx, Put and Fence on the
//     database waits for it, whatever its resource; readers do not, in
//     WAL mode. (A transaction that read first and wrote later could fail
//     with SQLITE_BUSY when another writer got in between, without
//     waiting.)
//     modernc.org/sqlite does not interrupt the wait when ctx ends: it
//     lasts until the busy timeout.
//   - MySQL and MariaDB: the upsert (INSERT ... ON DUPLICATE KEY UPDATE)
//     locks the resource's row in InnoDB, as in PostgreSQL, and the
//     transaction then reads the fence under that lock; other resources
//     are not held up. This works under every isolation level, the
//     default REPEATABLE READ included: see mysql.go.
//
// New checks the table's column types, collations and NOT NULL in the
// catalog, and has the database plan the Put statement with EXPLAIN,
// which does not run it, to find the unique index on resource (see
// fits); in MySQL, where that plan would not tell, it reads the table's
// engine, column types and unique indexes in information_schema (see
// fitsMySQL).

// Option configures a Store in New and NewContext. A nil Option is
// ignored.
type Option func(*config) error

// config is what the options set.
type config struct {
	table  string
	create bool
}

// WithTable sets the table that holds the fences and values. The default
// is DefaultTable. name is one or two dot-separated identifiers (table, or
// schema.table), of lower-case ASCII letters, digits and underscores, each
// starting with a letter or underscore and at most 63 bytes long; the
// Store quotes them in its SQL. Any other name makes New return an error
// wrapping [fencedlock.ErrInvalidArgument].
//
// The schema must be one that every connection of the pool sees alike, so
// that all of them share the fences. New refuses, with an error wrapping
// [fencedlock.ErrInvalidArgument], the schemas of a connection's own
// temporary tables: "temp" in SQLite, and "pg_temp" and the other names
// starting with "pg_temp" in PostgreSQL. In SQLite a schema other than
// "main" is an attached database, and ATTACH holds for one connection
// only: attach it on every connection the pool opens (e.g. in the
// driver's connection hook), or the connections without it fail with "no
// such table". In MySQL the schema is a database ("app.fences"), and a
// name without one is a table of the connection's current database (the
// DSN's). MySQL has no schema of temporary tables, but a TEMPORARY table
// hides a table of the same name from the connection that made it: make
// none named as the Store's table.
func WithTable(name string) Option {
	return func(c *config) error {
		if why := validTable(name); why != "" {
			return fmt.Errorf("%w: sqlstore: table name %s has %s", fencedlock.ErrInvalidArgument, names.Quote(name), why)
		}
		c.table = name
		return nil
	}
}

// WithCreateTable sets whether New creates the table when it is missing.
// The default is true. Pass false when the table is made by migrations
// or the database user may not create tables; New then only checks that
// the table exists with the columns the Store needs, of types it can
// trust, and a primary key or unique constraint on resource alone (in
// MySQL, also its engine: see the package documentation).
func WithCreateTable(create bool) Option {
	return func(c *config) error {
		c.create = create
		return nil
	}
}

// New is NewContext with context.Background().
func New(db *sql.DB, d Dialect, opts ...Option) (*Store, error) {
	return NewContext(context.Background(), db, d, opts...)
}

// NewContext returns a Store on db, in dialect d, configured by opts. It
// creates the table (CREATE TABLE IF NOT EXISTS, unless
// WithCreateTable(false)) and checks that the table fits: that it has the
// Store's columns, of types that compare tokens as numbers and names
// byte for byte, fence NOT NULL, and a primary key or unique constraint
// on resource that the Store's INSERT ... ON CONFLICT (resource) can use
// (in MySQL, also the table's engine); the package documentation lists
// what each dialect needs. A table that existed before is checked the
// same way, and a table that does not fit is refused with an error that
// names the column and the type the Store needs: on a table whose tokens
// were text, "10" would compare below "9", and a stale write would be
// accepted. In MySQL, NewContext also reads max_allowed_packet (see
// Store.MaxValueLen). ctx bounds that work; the Store does not keep it.
//
// On failure it returns a nil *Store and an error. A nil db, a Dialect
// other than SQLite, Postgres and MySQL, or an invalid option (a table in a
// connection's temporary schema included: see WithTable) returns an error
// wrapping [fencedlock.ErrInvalidArgument], before the database is used. A
// failure to create or check the table returns the database's error,
// wrapped; the table may then exist or not. A database that cannot be
// reached, or does not answer before ctx ends, gives an error wrapping
// [fencedlock.ErrUnavailable] and the cause (see Store.Put), or, when ctx
// ended with a cause, the cause and ctx.Err(). A ctx that had ended
// before the call sends nothing, and gives ctx.Err() as it is, or the
// cause and ctx.Err(), as Store.Put does. NewContext returns by ctx's
// deadline whatever the driver does, and the work it leaves in the
// background ends when the database answers or the connection closes.
func NewContext(ctx context.Context, db *sql.DB, d Dialect, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: sqlstore: nil *sql.DB", fencedlock.ErrInvalidArgument)
	}
	if !d.valid() {
		return nil, fmt.Errorf("%w: sqlstore: unknown dialect %v: use sqlstore.SQLite, sqlstore.Postgres or sqlstore.MySQL", fencedlock.ErrInvalidArgument, d)
	}
	c := config{table: DefaultTable, create: true}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&c); err != nil {
			return nil, err
		}
	}
	if schema := tempSchema(d, c.table); schema != "" {
		return nil, fmt.Errorf("%w: sqlstore: table name %q: %q is the schema of a connection's own temporary tables, which the other connections do not see", fencedlock.ErrInvalidArgument, c.table, schema)
	}
	if ctx.Err() != nil {
		return nil, notSent(ctx, "new: table "+c.table, "")
	}
	s := &Store{db: db, dialect: d, table: c.table, q: newQueries(d, c.table)}
	if err := bounded(ctx, "new: table "+s.table, "", func() error { return s.prepare(ctx, c.create) }); err != nil {
		return nil, err
	}
	return s, nil
}

// prepare creates the Store's table, when create is set, and checks that
// it fits.
func (s *Store) prepare(ctx context.Context, create bool) error {
	if create {
		if _, err := s.db.ExecContext(ctx, s.q.create); err != nil {
			// Two processes creating the table at once can make one
			// CREATE fail in PostgreSQL; the table is there all the same.
			if s.fits(ctx) == nil {
				return s.setMaxValue(ctx)
			}
			return dbErr(ctx, "new", "", "creating table "+s.table+": ", err)
		}
	}
	if err := s.fits(ctx); err != nil {
		return err
	}
	return s.setMaxValue(ctx)
}

// setMaxValue sets the longest value Put takes: a constant of the
// dialect, or, in MySQL, max_allowed_packet, read from the database.
func (s *Store) setMaxValue(ctx context.Context) error {
	switch s.dialect {
	case SQLite:
		s.maxValue = sqliteMaxValue
	case Postgres:
		s.maxValue = postgresMaxValue
	case MySQL:
		packet, err := s.maxAllowedPacket(ctx)
		if err != nil {
			return err
		}
		s.maxValue = int(max(packet-valueRoom, 0))
	}
	return nil
}

// Table returns the name of the Store's table, as WithTable was given it
// (DefaultTable by default); "" for a Store not made by New.
func (s *Store) Table() string {
	if s == nil {
		return ""
	}
	return s.table
}

// MaxValueLen returns the length of the longest value Put takes, in
// bytes; Put refuses a longer one before it sends anything, with an
// error wrapping [fencedlock.ErrInvalidArgument]. It is what the database
// can receive in Put's statement, less 4 KiB for the rest of the
// statement and of the row:
//
//   - SQLite: 999,995,904, from SQLite's default limit on the length of a
//     blob or a row, SQLITE_MAX_LENGTH, 10^9 bytes. (A build or a
//     connection with a lower limit refuses longer values with SQLite's
//     error, "string or blob too big".)
//   - PostgreSQL: 536,868,863, (1 GiB - 1 - 4 KiB) / 2: PostgreSQL takes
//     a bytea, and a message of its protocol, of at most 1 GiB - 1 bytes,
//     and lib/pq sends a []byte in hex, twice its length.
//   - MySQL: the server's max_allowed_packet, as New read it (SELECT
//     @@max_allowed_packet; 16 MiB by default in MariaDB and 64 MiB in
//     MySQL), less 4 KiB. A value longer than max_allowed_packet does not
//     fit in a statement, and the server closes a connection that sends
//     one. New reads it once: restart the program, or make a new Store,
//     after lowering it. With go-sql-driver/mysql and
//     interpolateParams=true, the driver writes the value into the
//     statement's text, escaping some bytes (NUL, quotes, backslash,
//     newline, carriage return, Ctrl-Z) with a backslash, which can
//     double its length: add maxAllowedPacket=0 to the DSN, so that the
//     driver reads max_allowed_packet too, and sends a statement that
//     would be longer as a prepared one.
//
// It returns 0 for a Store not made by New.
func (s *Store) MaxValueLen() int {
	if s == nil {
		return 0
	}
	return s.maxValue
}

// checkValue returns the error for a value longer than the Store takes.
func (s *Store) checkValue(resource string, value []byte) error {
	if len(value) > s.maxValue {
		return fmt.Errorf("%w: sqlstore: a value of %d bytes for resource %s: the longest the Store takes is %d bytes (see Store.MaxValueLen)", fencedlock.ErrInvalidArgument, len(value), names.Quote(resource), s.maxValue)
	}
	return nil
}

// Dialect returns the Store's dialect; the zero Dialect for a Store not
// made by New.
func (s *Store) Dialect() Dialect {
	if s == nil {
		return 0
	}
	return s.dialect
}

// check returns the error of a call with a Store that has no database or
// with a resource the Store cannot keep.
func (s *Store) check(resource string) error {
	if s == nil {
		return fmt.Errorf("%w: sqlstore: nil *Store", fencedlock.ErrInvalidArgument)
	}
	if s.db == nil {
		return fmt.Errorf("%w: sqlstore: Store has no database: make it with sqlstore.New", fencedlock.ErrInvalidArgument)
	}
	switch {
	case resource == "":
		return fmt.Errorf("%w: sqlstore: empty resource name", fencedlock.ErrInvalidArgument)
	case len(resource) > MaxResourceLen:
		return fmt.Errorf("%w: sqlstore: resource name of %d bytes: the limit is %d", fencedlock.ErrInvalidArgument, len(resource), MaxResourceLen)
	case !utf8.ValidString(resource):
		return fmt.Errorf("%w: sqlstore: resource name %s is not valid UTF-8", fencedlock.ErrInvalidArgument, names.Quote(resource))
	case strings.IndexByte(resource, 0) >= 0:
		return fmt.Errorf("%w: sqlstore: resource name %s holds a NUL byte", fencedlock.ErrInvalidArgument, names.Quote(resource))
	}
	return nil
}

// checkToken returns the error for a token the Store cannot take: zero
// (the error of [fencedlock.CheckToken]) or above MaxToken.
func checkToken(resource string, token fencedlock.Token) error {
	if token == 0 {
		return fencedlock.CheckToken(resource, token, 0)
	}
	if token > MaxToken {
		return fmt.Errorf("%w: sqlstore: token %d for resource %s is above %d, the largest SQL BIGINT", fencedlock.ErrInvalidToken, token, names.Quote(resource), MaxToken)
	}
	return nil
}

// fenceToken converts a fence or value token read from the table. The
// table's CHECK constraints keep them positive.
func fenceToken(v int64, what, resource string) (fencedlock.Token, error) {
	if v <= 0 {
		return 0, fmt.Errorf("sqlstore: resource %s has %s %d in the table: not a token", names.Quote(resource), what, v)
	}
	return fencedlock.Token(v), nil
}

// Put implements [fencedlock.Store]. It stores value and token in
// resource's row if token is not below the row's fence, the highest token
// any accepted Put or Fence or committed Tx has used on the resource, and
// raises the fence to token, atomically. A lower token returns the
// [*fencedlock.StaleTokenError] of [fencedlock.CheckToken], whose Current is
// the fence, and changes nothing. A nil value is stored as an empty one;
// Put keeps a copy of value, not value itself.
//
// A zero token or one above MaxToken returns an error wrapping
// [fencedlock.ErrInvalidToken]; an empty resource, one longer than
// MaxResourceLen bytes, not valid UTF-8 or holding a NUL byte, or a value
// longer than MaxValueLen bytes, an error wrapping
// [fencedlock.ErrInvalidArgument]. A ctx that has ended before the call
// returns ctx.Err() as it is, or, when ctx ended with a cause (see
// below), an error wrapping the cause and ctx.Err(). Nothing is sent in
// these cases.
//
// A database that cannot be reached or whose connection breaks, a driver
// error whose SQLSTATE says so (class 08, 57P01-57P03, 53300), a MySQL
// error that says so (e.g. 1040 too many connections; the package
// documentation lists them), and a ctx that ends while the database
// works, give an error wrapping [fencedlock.ErrUnavailable] together with
// the cause (the net error, the driver's error, ctx.Err()). When ctx
// ended with a cause ([context.Cause] is not just ctx.Err(): a
// CancelCauseFunc's argument, as when Locker.Do cancels its function's
// context on losing the lock, or WithDeadlineCause's cause), the error of
// a call it stopped wraps the cause and ctx.Err() (and the driver's
// error, if any) instead of ErrUnavailable: the caller stopped it, the
// database did not fail. Other database errors are wrapped as they are.
// After such an error, or any database error, the write may or may not
// have happened, or may still happen: see [fencedlock.Store]. The fence
// check holds all the same.
//
// Put returns by ctx's deadline whatever the driver does: when ctx ends
// first, it returns at once and leaves the statement to the driver, which
// ends it when the database answers or the connection closes. In MySQL,
// Put is a transaction, made again when InnoDB ends it as a deadlock
// victim (up to 10 attempts in all).
func (s *Store) Put(ctx context.Context, resource string, token fencedlock.Token, value []byte) error {
	if err := s.check(resource); err != nil {
		return err
	}
	if err := checkToken(resource, token); err != nil {
		return err
	}
	if err := s.checkValue(resource, value); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return notSent(ctx, "put", resource)
	}
	// The statement may outlive the call (see bounded): it gets a copy
	// of value, which the caller may change once Put has returned.
	value = append([]byte{}, value...)
	var fence int64
	err := bounded(ctx, "put", resource, func() error {
		var err error
		fence, err = s.put(ctx, resource, int64(token), value)
		return err
	})
	if err != nil {
		return err
	}
	current, err := fenceToken(fence, "fence", resource)
	if err != nil {
		return err
	}
	// The statement applied the rule (a returned fence above token means
	// it refused); CheckToken builds the error of a refusal.
	return fencedlock.CheckToken(resource, token, current)
}

// put is Put's database work: it returns the fence the upsert left, or
// an error of dbErr.
func (s *Store) put(ctx context.Context, resource string, token int64, value []byte) (int64, error) {
	if s.dialect == MySQL {
		return s.upsertMySQL(ctx, "put", resource, s.q.put, s.q.putArgs(resource, token, value))
	}
	var fence int64
	if err := s.db.QueryRowContext(ctx, s.q.put, s.q.putArgs(resource, token, value)...).Scan(&fence); err != nil {
		return 0, dbErr(ctx, "put", resource, "", err)
	}
	return fence, nil
}

// Get implements [fencedlock.Store]. It returns the value of resource's
// row and the token that wrote it, which is lower than the row's fence
// when a Fence or a Tx with a higher token came since (see CurrentFence).
// A resource whose row has a fence but no value yet (only Fence or Tx
// used it) returns an error wrapping [fencedlock.ErrNotFound], like one
// without a row. Invalid names, database errors and the errors of an
// ended ctx are those of Put, ErrUnavailable included, and Get too
// returns by ctx's deadline.
//
// Get reads without fencing: a holder that reads a value to write it
// back calls Fence first, or [fencedlock.Update], which does both (see
// Fence). In MySQL, a session with autocommit off is refused with an
// error wrapping [fencedlock.ErrInvalidArgument] (see the package
// documentation).
func (s *Store) Get(ctx context.Context, resource string) ([]byte, fencedlock.Token, error) {
	if err := s.check(resource); err != nil {
		return nil, 0, err
	}
	if ctx.Err() != nil {
		return nil, 0, notSent(ctx, "get", resource)
	}
	var (
		value      []byte
		token      sql.NullInt64
		autocommit = true
	)
	err := bounded(ctx, "get", resource, func() error {
		err := s.scanRead(s.db.QueryRowContext(ctx, s.q.get, resource), &autocommit, &value, &token)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return dbErr(ctx, "get", resource, "", err)
		}
		return err
	})
	if err == nil && !autocommit {
		return nil, 0, autocommitOff("get", resource)
	}
	if errors.Is(err, sql.ErrNoRows) || err == nil && !token.Valid {
		return nil, 0, fmt.Errorf("%w: %s", fencedlock.ErrNotFound, names.Quote(resource))
	}
	if err != nil {
		return nil, 0, err
	}
	t, err := fenceToken(token.Int64, "value token", resource)
	if err != nil {
		return nil, 0, err
	}
	if value == nil {
		value = []byte{}
	}
	return value, t, nil
}

// CurrentFence returns resource's fence: the highest token that an
// accepted Put or Fence or a committed Tx has used on it, which every
// later Put, Fence and Tx must match or exceed. A resource that none has
// used returns an error wrapping [fencedlock.ErrNotFound]. When the fence
// is higher than any token the Locker hands out (its counter was lost),
// pass it to Locker.Advance. CurrentFence only reads: it raises nothing
// and fences no read (Fence does). Errors are those of Get, and
// CurrentFence too returns by ctx's deadline.
func (s *Store) CurrentFence(ctx context.Context, resource string) (fencedlock.Token, error) {
	if err := s.check(resource); err != nil {
		return 0, err
	}
	if ctx.Err() != nil {
		return 0, notSent(ctx, "current fence", resource)
	}
	var (
		fence      sql.NullInt64
		autocommit = true
	)
	err := bounded(ctx, "current fence", resource, func() error {
		err := s.scanRead(s.db.QueryRowContext(ctx, s.q.fence, resource), &autocommit, &fence)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return dbErr(ctx, "current fence", resource, "", err)
		}
		return err
	})
	if err == nil && !autocommit {
		return 0, autocommitOff("current fence", resource)
	}
	if errors.Is(err, sql.ErrNoRows) || err == nil && !fence.Valid {
		return 0, fmt.Errorf("%w: %s has no fence", fencedlock.ErrNotFound, names.Quote(resource))
	}
	if err != nil {
		return 0, err
	}
	return fenceToken(fence.Int64, "fence", resource)
}

// scanRead scans row, the answer of the get or fence query, into dest,
// and the session's autocommit into autocommit when the query reads it
// (see queries.autocommit).
func (s *Store) scanRead(row *sql.Row, autocommit *bool, dest ...any) error {
	if s.q.autocommit {
		dest = append(dest, autocommit)
	}
	return row.Scan(dest...)
}

// autocommitOff is the error of a read op of resource on a MySQL
// connection with autocommit off.
func autocommitOff(op, resource string) error {
	return fmt.Errorf("%w: sqlstore: %s %s: the MySQL session has autocommit off: a plain read then opens a transaction that stays open on its pooled connection, and the next read on it sees that snapshot instead of the writes committed since (a fenced read in Update would miss a newer holder's write, and overwrite it); open the database with autocommit on, MySQL's default", fencedlock.ErrInvalidArgument, op, names.Quote(resource))
}

// Fence implements [fencedlock.Store]: it raises resource's fence to
// token unless the fence is higher, in one statement (in MySQL, a
// transaction of the upsert and a locking read, as Put), without
// writing a value. An equal token passes. A lower token returns the
// [*fencedlock.StaleTokenError] of [fencedlock.CheckToken], whose Current
// is the fence, and changes nothing: the fence never goes down. A
// resource only fenced has a row without a value: Get returns
// [fencedlock.ErrNotFound] for it, and after Put with one token and Fence
// with a higher one, Get returns the value and the Put's token.
//
// A holder fences before it reads a value that it will write back, so
// that no holder with a lower token can write in between: Fence, Get,
// then Put with the same token, which is what [fencedlock.Update] does.
// Tx needs no Fence: it raises the fence itself before fn reads anything.
//
// Its checks, its errors and its deadline are those of Put. A zero token
// or one above MaxToken ([fencedlock.ErrInvalidToken]), an invalid
// resource ([fencedlock.ErrInvalidArgument]) and a ctx that has ended
// before the call (ctx.Err() as it is, or the cause with which it ended)
// send nothing. After an error
// wrapping [fencedlock.ErrUnavailable], the fence may or may not have
// been raised, or may still be; the fence check holds all the same. In
// MySQL, a Fence that InnoDB ends as a deadlock victim is made again, as
// a Put is.
func (s *Store) Fence(ctx context.Context, resource string, token fencedlock.Token) error {
	if err := s.check(resource); err != nil {
		return err
	}
	if err := checkToken(resource, token); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return notSent(ctx, "fence", resource)
	}
	var fence int64
	err := bounded(ctx, "fence", resource, func() error {
		var err error
		fence, err = s.raiseFence(ctx, resource, int64(token))
		return err
	})
	if err != nil {
		return err
	}
	current, err := fenceToken(fence, "fence", resource)
	if err != nil {
		return err
	}
	return fencedlock.CheckToken(resource, token, current)
}

// raiseFence is Fence's database work: it returns the fence the upsert
// left, or an error of dbErr.
func (s *Store) raiseFence(ctx context.Context, resource string, token int64) (int64, error) {
	if s.dialect == MySQL {
		return s.upsertMySQL(ctx, "fence", resource, s.q.raise, s.q.raiseArgs(resource, token))
	}
	var fence int64
	if err := s.db.QueryRowContext(ctx, s.q.raise, s.q.raiseArgs(resource, token)...).Scan(&fence); err != nil {
		return 0, dbErr(ctx, "fence", resource, "", err)
	}
	return fence, nil
}

// Tx runs fn in a transaction fenced by token: it raises resource's fence
// to token, runs fn, and commits, so that fn's writes and the new fence
// are committed together or not at all. An equal token passes. fn's reads
// are fenced too, from the transaction's first statement on: a Tx is a
// fenced read-modify-write, and needs no Fence before it.
//
// A token below the fence returns the [*fencedlock.StaleTokenError] of
// [fencedlock.CheckToken], whose Current is the fence, without calling fn,
// and nothing is written. A zero token, one above MaxToken, an invalid
// resource (see Put) or a nil fn returns an error wrapping
// [fencedlock.ErrInvalidToken] or [fencedlock.ErrInvalidArgument] without
// touching the database. A ctx that has ended before the call returns
// ctx.Err() as it is (or, ended with a cause, an error wrapping the cause
// and ctx.Err(): see Put), without calling fn.
//
// When fn returns an error, Tx rolls back, fn's writes and the fence's
// raise alike, and returns fn's error as it is. When fn panics, Tx rolls
// back and the panic goes on. The database errors of Tx's own statements
// (begin, raise) are those of Put: a database that cannot be reached, a
// broken connection and a ctx that ends before the commit give errors
// wrapping [fencedlock.ErrUnavailable] and the cause (or, when ctx ended
// with a cause, the cause and ctx.Err()); nothing was committed. fn is
// called at most once: in MySQL, a deadlock at the raise is retried
// before fn is called.
//
// The commit's outcome is known, and reported, unless the COMMIT was sent
// and no answer came: nil when it committed; the database's error,
// wrapped, when the database refused it (a deferred constraint, say),
// which commits nothing. When the connection broke during the COMMIT, or
// ctx ended while it was on its way (or as it was sent: Tx cannot tell
// the two apart), the transaction may have been
// committed, whole, or not at all: the error wraps [ErrCommitUnknown] and
// the cause (the driver's error, ctx.Err(), the cause with which ctx
// ended), and not ErrUnavailable. Read what fn writes to learn the
// outcome before doing its work again.
//
// Tx returns by ctx's deadline whatever the driver or fn does. When ctx
// ends first, Tx returns at once. Before the COMMIT is sent, it returns an
// error wrapping [fencedlock.ErrUnavailable] and ctx.Err() (or the cause
// and ctx.Err()); fn may still be running, in a goroutine of its own, but
// its transaction is doomed: Tx sends no COMMIT once it has returned, and
// database/sql rolls back a transaction whose ctx has ended, so nothing
// fn wrote is committed. While the COMMIT is on its way, it returns an
// error wrapping [ErrCommitUnknown]. A panic of fn after Tx has returned goes on
// in that goroutine and ends the program, as any unrecovered panic does.
//
// fn must do its work through tx, with ctx, and must not commit or roll
// back tx. It must not call Put, Fence or Tx, nor write through the
// *sql.DB: the transaction holds the lock that orders Tx, Put and Fence
// calls on the resource, so in SQLite every write waits for it (until the
// busy timeout), and in PostgreSQL and MySQL a Put, Fence or Tx on its
// resource waits for it (until ctx ends).
//
// Tx takes a connection of its own from db's pool and returns it outside
// any transaction; it closes the connection only when a commit or
// rollback failed and a ROLLBACK of its own failed too.
func (s *Store) Tx(ctx context.Context, resource string, token fencedlock.Token, fn func(tx *sql.Tx) error) error {
	if err := s.check(resource); err != nil {
		return err
	}
	if err := checkToken(resource, token); err != nil {
		return err
	}
	if fn == nil {
		return fmt.Errorf("%w: sqlstore: Tx with a nil fn", fencedlock.ErrInvalidArgument)
	}
	if ctx.Err() != nil {
		return notSent(ctx, "tx", resource)
	}
	return boundedStages(ctx, "tx", resource, func(enter func(stage) bool) error { return s.tx(ctx, resource, token, fn, enter) })
}

// tx is Tx after its checks: the transaction, from taking a connection to
// the commit.
func (s *Store) tx(ctx context.Context, resource string, token fencedlock.Token, fn func(tx *sql.Tx) error, enter func(stage) bool) error {
	// A connection of its own, so that Tx can end the transaction on it
	// when a commit or rollback fails, or discard it: some drivers leave
	// the transaction open then (modernc.org/sqlite after a failed
	// COMMIT, e.g. of a deferred foreign key), and database/sql would hand
	// the connection, still in the transaction and holding its locks, to
	// the next caller. Tx then runs ROLLBACK on the connection, with a
	// timeout of a few seconds of its own since ctx may have ended, and
	// closes the connection instead of returning it only when that
	// ROLLBACK fails too. When ctx ended before the commit, database/sql
	// has rolled back already, and the connection goes back to the pool.
	// (Closing the only connection to an in-memory SQLite database would
	// destroy the database.)
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return dbErr(ctx, "tx", resource, "", err)
	}
	discard := false
	defer func() {
		if discard {
			conn.Raw(func(any) error { return driver.ErrBadConn })
		}
		conn.Close()
	}()
	for attempt := 1; ; attempt++ {
		raiseFailed, err := s.txOn(ctx, conn, &discard, resource, token, fn, enter)
		switch {
		case !raiseFailed:
			return err // fn's error among others, as it is
		case discard || !s.again(ctx, err, attempt):
			return victimErr(err, attempt)
		}
	}
}

// txOn makes one attempt at Tx's transaction on conn, and sets *discard
// when conn is to be closed instead of going back to the pool.
// raiseFailed reports that the statements raising the fence failed, so
// that fn has not run, and err is their error, wrapped.
func (s *Store) txOn(ctx context.Context, conn *sql.Conn, discard *bool, resource string, token fencedlock.Token, fn func(tx *sql.Tx) error, enter func(stage) bool) (raiseFailed bool, err error) {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return false, dbErr(ctx, "tx", resource, "begin: ", err)
	}
	done := false
	defer func() {
		// Runs on every return before the commit, and while a panic
		// of fn unwinds the stack (or fn calls runtime.Goexit).
		if !done {
			if err := tx.Rollback(); err != nil && !rolledBack(ctx, err) {
				*discard = !s.rollback(conn)
			}
		}
	}()
	fence, err := s.raise(ctx, tx, resource, int64(token))
	if err != nil {
		return true, dbErr(ctx, "tx", resource, "raising the fence: ", err)
	}
	current, err := fenceToken(fence, "fence", resource)
	if err != nil {
		return false, err
	}
	if err := fencedlock.CheckToken(resource, token, current); err != nil {
		return false, err
	}
	// The fence may have come free just as ctx ended, and Tx may have
	// given up and returned: fn must not start unbeknown to the caller.
	// enter reports whether Tx still waits for this outcome.
	if ctx.Err() != nil || !enter(inFn) {
		return false, ended(ctx, "tx", resource)
	}
	if err := fn(tx); err != nil {
		return false, err
	}
	// Nor the commit: a Tx that gave up while fn ran has told its caller
	// that nothing was committed. One that gives up from here on says
	// that the commit's outcome is unknown.
	if ctx.Err() != nil || !enter(committing) {
		return false, ended(ctx, "tx", resource)
	}
	done = true
	if err := tx.Commit(); err != nil {
		if !rolledBack(ctx, err) {
			*discard = !s.rollback(conn)
		}
		return false, commitErr(ctx, resource, err)
	}
	return false, nil
}

// commitErr is the error of Tx's commit on resource that failed with
// err. database/sql returns sql.ErrTxDone when it rolled the transaction
// back itself, ctx having ended, before it sent the COMMIT; a database
// that answered with an error (SQLite's SQLITE_BUSY, a deferred
// constraint of PostgreSQL, a MySQL server turned read-only) committed
// nothing. Otherwise, after a broken
// connection or with ctx ended, the COMMIT may have been sent and
// carried out: the error of commitUnknown. (database/sql also returns
// ctx.Err() without sending when ctx ended just before the commit, which
// a driver may return after sending too: that counts as unknown.)
func commitErr(ctx context.Context, resource string, err error) error {
	switch {
	case errors.Is(err, sql.ErrTxDone), readOnly(err):
		// Rolled back: by database/sql, or by a server that turned
		// read-only while the transaction was open.
		return dbErr(ctx, "tx", resource, "commit: ", err)
	case ctx.Err() != nil || connectionTrouble(err):
		return commitUnknown(ctx, "tx", resource, err)
	}
	return dbErr(ctx, "tx", resource, "commit: ", err)
}

// raise runs the statements of Tx that raise resource's fence to token
// (those of Fence) in tx, taking the lock that the transaction then holds
// to its end, and returns the fence they leave: one upsert returning it,
// or in MySQL the upsert and a locking read (see newMySQLQueries).
func (s *Store) raise(ctx context.Context, tx *sql.Tx, resource string, token int64) (int64, error) {
	var fence int64
	if s.dialect != MySQL {
		err := tx.QueryRowContext(ctx, s.q.raise, s.q.raiseArgs(resource, token)...).Scan(&fence)
		return fence, err
	}
	if _, err := tx.ExecContext(ctx, s.q.raise, s.q.raiseArgs(resource, token)...); err != nil {
		return 0, err
	}
	err := tx.QueryRowContext(ctx, s.q.lock, resource).Scan(&fence)
	return fence, err
}

// rolledBack reports whether err, the error of tx.Commit or tx.Rollback
// in Tx, says that database/sql rolled the transaction back itself: when
// ctx ends, it rolls back, and Commit returns ctx.Err() or
// sql.ErrTxDone, Rollback sql.ErrTxDone.
func rolledBack(ctx context.Context, err error) bool {
	if errors.Is(err, sql.ErrTxDone) {
		return true
	}
	cerr := ctx.Err()
	return cerr != nil && errors.Is(err, cerr)
}

// rollbackTimeout bounds the ROLLBACK that Tx runs on its connection
// after a failed commit or rollback.
const rollbackTimeout = 5 * time.Second

// rollback runs ROLLBACK on conn, after a commit or rollback of Tx that
// failed, and reports whether conn is now outside any transaction, so
// that it may go back to the pool. It uses a detached context of its own:
// ctx may have ended. SQLite refuses a ROLLBACK outside a transaction
// ("cannot rollback - no transaction is active"): the failed statement
// may have ended the transaction, and that is success too. PostgreSQL
// only warns.
func (s *Store) rollback(conn *sql.Conn) bool {
	ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
	defer cancel()
	_, err := conn.ExecContext(ctx, "ROLLBACK")
	if err == nil {
		return true
	}
	return s.dialect == SQLite && strings.Contains(err.Error(), "no transaction is active")
}
