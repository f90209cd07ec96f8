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
	"sync"
	"testing"
	"time"

	_ "github.com/lib/pq"  // driver "postgres"
	_ "modernc.org/sqlite" // driver "sqlite"

	"github.com/fencedlock/fencedlock/internal/pgtest"
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
// whose every connection goes through a stallProxy.
func proxiedPostgres(t testing.TB) (*backend, *stallProxy) {
	t.Helper()
	srv := pgtest.Shared(t)
	p := newStallProxy(t, srv.Addr())
	host, port, _ := net.SplitHostPort(p.addr())
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

// stallProxy forwards TCP connections to a server until stall is called;
// from then on it holds the bytes it reads, in both directions, and
// delivers them only after release. close ends every connection, as a
// dropped network would. Its goroutines end with close.
type stallProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex    // protects the fields below
	held    chan struct{} // non-nil while stalled: closed by release
	conns   []net.Conn
	closed  bool
	wg      sync.WaitGroup
	accepts int
}

// newStallProxy starts a proxy to target (host:port) on a loopback port,
// closed at the end of the test.
func newStallProxy(t testing.TB, target string) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// addr returns the proxy's host:port.
func (p *stallProxy) addr() string { return p.ln.Addr().String() }

func (p *stallProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			s.Close()
			return
		}
		p.accepts++
		p.conns = append(p.conns, c, s)
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pipe(s, c)
		go p.pipe(c, s)
	}
}

// pipe copies from src to dst, holding each chunk while the proxy is
// stalled.
func (p *stallProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			held := p.held
			p.mu.Unlock()
			if held != nil {
				<-held
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// stall makes the proxy hold every byte from now on, on the connections
// it has and on those it accepts later (which it still accepts).
func (p *stallProxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held == nil {
		p.held = make(chan struct{})
	}
}

// release delivers the held bytes and forwards again.
func (p *stallProxy) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held != nil {
		close(p.held)
		p.held = nil
	}
}

// close closes the listener and every connection, releases what is held,
// and waits for the proxy's goroutines.
func (p *stallProxy) close() {
	p.mu.Lock()
	p.closed = true
	p.ln.Close()
	for _, c := range p.conns {
		c.Close()
	}
	if p.held != nil {
		close(p.held)
		p.held = nil
	}
	p.mu.Unlock()
	p.wg.Wait()
}
