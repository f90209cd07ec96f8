package sqlstore_test

import (
	"context"
	crand "crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/lib/pq"
	_ "github.com/lib/pq"  // driver "postgres"
	_ "modernc.org/sqlite" // driver "sqlite"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/mysqltest"
	"github.com/fencedlock/fencedlock/internal/pgtest"
	"github.com/fencedlock/fencedlock/internal/redistest"
	"github.com/fencedlock/fencedlock/sqlstore"
)

// backend is a database of one dialect for one test.
type backend struct {
	dialect sqlstore.Dialect
	db      *sql.DB
}

// eachDialect runs fn as the subtests "sqlite", on a fresh SQLite file,
// "postgres", on the test binary's shared PostgreSQL server, and "mysql",
// on its shared MariaDB server.
func eachDialect(t *testing.T, fn func(t *testing.T, b *backend)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) { fn(t, sqliteBackend(t)) })
	t.Run("postgres", func(t *testing.T) { fn(t, postgresBackend(t)) })
	t.Run("mysql", func(t *testing.T) { fn(t, mysqlBackend(t)) })
}

// eachServer runs fn as the subtests "postgres" and "mysql", the
// dialects of database servers; fn makes the backends it needs, e.g.
// with serverBackend or proxied.
func eachServer(t *testing.T, fn func(t *testing.T, d sqlstore.Dialect)) {
	t.Helper()
	t.Run("postgres", func(t *testing.T) { fn(t, sqlstore.Postgres) })
	t.Run("mysql", func(t *testing.T) { fn(t, sqlstore.MySQL) })
}

// serverBackend returns a backend of dialect d, Postgres or MySQL, on
// its shared server.
func serverBackend(t testing.TB, d sqlstore.Dialect) *backend {
	t.Helper()
	if d == sqlstore.MySQL {
		return mysqlBackend(t)
	}
	return postgresBackend(t)
}

// sqliteDSN is the DSN of a SQLite file as the package documentation
// advises it (a busy timeout, WAL), with foreign keys on for the tests
// that need deferred constraints and without syncing to disk.
func sqliteDSN(path string) string {
	return "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(OFF)&_pragma=foreign_keys(1)"
}

func sqliteBackend(t testing.TB) *backend {
	t.Helper()
	db, err := sql.Open("sqlite", sqliteDSN(filepath.Join(t.TempDir(), "test.db")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &backend{dialect: sqlstore.SQLite, db: db}
}

func postgresBackend(t testing.TB) *backend {
	t.Helper()
	srv := pgtest.Shared(t)
	db, err := sql.Open("postgres", srv.DSN(""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &backend{dialect: sqlstore.Postgres, db: db}
}

// mysqlBackend returns a backend on the database "test" of the shared
// MariaDB server, at the server's default isolation level, REPEATABLE
// READ.
func mysqlBackend(t testing.TB) *backend {
	t.Helper()
	return &backend{dialect: sqlstore.MySQL, db: openMySQL(t, mysqltest.Shared(t).DSN(""))}
}

// openMySQL opens a database of go-sql-driver/mysql at dsn, whose logger
// is silenced: it logs the broken connections that the tests make on
// purpose, and returns their errors too.
func openMySQL(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = &mysql.NopLogger{}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(connector)
	t.Cleanup(func() { db.Close() })
	return db
}

// proxied returns a backend of dialect d (Postgres or MySQL) on its
// shared server, whose every connection goes through a fault proxy (the
// TCP proxy of internal/redistest, which serves any server): Pause stalls
// it, Resume delivers what it held, Close drops every connection and the
// port.
func proxied(t testing.TB, d sqlstore.Dialect) (*backend, *redistest.Proxy) {
	t.Helper()
	if d == sqlstore.Postgres {
		return proxiedPostgres(t)
	}
	srv := mysqltest.Shared(t)
	p := redistest.NewProxy(t, srv.Addr())
	cfg, err := mysql.ParseDSN(srv.DSN(""))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = p.Addr()
	cfg.Timeout = 10 * time.Second
	return &backend{dialect: sqlstore.MySQL, db: openMySQL(t, cfg.FormatDSN())}, p
}

// proxiedPostgres returns a backend on the shared PostgreSQL server
// whose every connection goes through a fault proxy (the TCP proxy of
// internal/redistest, which serves any server): Pause stalls it, Resume
// delivers what it held, Close drops every connection and the port.
func proxiedPostgres(t testing.TB) (*backend, *redistest.Proxy) {
	t.Helper()
	srv := pgtest.Shared(t)
	p := redistest.NewProxy(t, srv.Addr())
	host, port, _ := net.SplitHostPort(p.Addr())
	db, err := sql.Open("postgres", fmt.Sprintf("host=%s port=%s user=%s dbname=postgres sslmode=disable connect_timeout=10", host, port, srv.User))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &backend{dialect: sqlstore.Postgres, db: db}, p
}

// name returns a fresh table name that starts with prefix.
func (b *backend) name(t testing.TB, prefix string) string {
	t.Helper()
	var r [6]byte
	if _, err := crand.Read(r[:]); err != nil {
		t.Fatal(err)
	}
	return prefix + "_" + hex.EncodeToString(r[:])
}

// newStore returns a Store on a fresh table.
func (b *backend) newStore(t testing.TB, opts ...sqlstore.Option) *sqlstore.Store {
	t.Helper()
	opts = append([]sqlstore.Option{sqlstore.WithTable(b.name(t, "fences"))}, opts...)
	s, err := sqlstore.New(b.db, b.dialect, opts...)
	if err != nil {
		t.Fatalf("New(%v): %v", b.dialect, err)
	}
	return s
}

// sql returns query, written with $N placeholders, in b's dialect.
// MySQL's placeholders, "?", take the arguments in their order, so
// there query must use $1, $2, ... each once and in that order.
func (b *backend) sql(query string) string {
	switch b.dialect {
	case sqlstore.SQLite:
		return strings.ReplaceAll(query, "$", "?")
	case sqlstore.MySQL:
		n := 0
		return placeholder.ReplaceAllStringFunc(query, func(p string) string {
			if n++; p != "$"+strconv.Itoa(n) {
				panic(fmt.Sprintf("query %q: placeholder %s where MySQL's order needs $%d", query, p, n))
			}
			return "?"
		})
	}
	return query
}

var placeholder = regexp.MustCompile(`\$[0-9]+`)

// quote quotes an identifier in b's dialect.
func (b *backend) quote(name string) string {
	if b.dialect == sqlstore.MySQL {
		return "`" + name + "`"
	}
	return `"` + name + `"`
}

// types returns the types of the Store's resource and value columns in
// b's dialect, as New creates them.
func (b *backend) types() (resource, value string) {
	switch b.dialect {
	case sqlstore.SQLite:
		return "TEXT", "BLOB"
	case sqlstore.MySQL:
		return "VARBINARY(1024)", "LONGBLOB"
	}
	return "TEXT", "BYTEA"
}

// exec runs a statement on b's database and fails t on error.
func (b *backend) exec(t *testing.T, query string, args ...any) {
	t.Helper()
	if _, err := b.db.Exec(b.sql(query), args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// count returns the result of a query that counts.
func (b *backend) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := b.db.QueryRow(b.sql(query), args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// testCtx returns a context that ends with the test, bounded so that a
// test that hangs on a lock fails instead of blocking until the binary's
// timeout.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func stringOrNull(b []byte) string {
	if b == nil {
		return "NULL"
	}
	return string(b)
}

func nullInt(n sql.NullInt64) string {
	if !n.Valid {
		return "NULL"
	}
	return itoa(n.Int64)
}

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
