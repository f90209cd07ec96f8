package sqlstore_test

import (
	"context"
	crand "crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/lib/pq"  // driver "postgres"
	_ "modernc.org/sqlite" // driver "sqlite"

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
// and "postgres", on the test binary's shared PostgreSQL server.
func eachDialect(t *testing.T, fn func(t *testing.T, b *backend)) {
	t.Helper()
	t.Run("sqlite", func(t *testing.T) { fn(t, sqliteBackend(t)) })
	t.Run("postgres", func(t *testing.T) { fn(t, postgresBackend(t)) })
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
func (b *backend) sql(query string) string {
	if b.dialect == sqlstore.SQLite {
		return strings.ReplaceAll(query, "$", "?")
	}
	return query
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
