package sqlstore_test

import (
	"context"
	crand "crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/lib/pq"  // driver "postgres"
	_ "modernc.org/sqlite" // driver "sqlite"

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
