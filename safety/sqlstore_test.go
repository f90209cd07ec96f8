package safety

import (
	"context"
	crand "crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/lib/pq"  // driver "postgres"
	_ "modernc.org/sqlite" // driver "sqlite"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/mysqltest"
	"github.com/fencedlock/fencedlock/internal/pgtest"
	"github.com/fencedlock/fencedlock/internal/redistest"
	"github.com/fencedlock/fencedlock/sqlstore"
)

// The SQL stores: package sqlstore on SQLite (a file in the test's
// temporary directory, which every client opens: no network), PostgreSQL
// and MariaDB (a server of pgtest or mysqltest for the scenario, stopped
// at its end). The clients call their Store themselves, each with a
// database handle of its own; on PostgreSQL and MariaDB through a fault
// proxy, the store proxy of the nemesis. The final reads use a handle
// without the proxy.

// sqlBackend opens database handles of one scenario's SQL store.
type sqlBackend struct {
	dialect sqlstore.Dialect
	table   string
	// open opens a handle: through the store proxy when proxied (the
	// clients'), else directly (the final reads').
	open func(proxied bool) (*sql.DB, error)
}

// sqliteDSN: a busy timeout, so that a write waits for another instead
// of failing, and WAL, as package sqlstore advises; no sync to disk.
func sqliteDSN(path string) string {
	return "file:" + path + "?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(OFF)"
}

// setupSQLStore starts the scenario's SQL store: its server and the store
// proxy, when it has them, and its table. It sets r.direct, the store of
// the final reads, and r.sql, which newStore uses.
func (r *scenarioRun) setupSQLStore() {
	t := r.t
	b := &sqlBackend{table: "safety_" + randomHex(t, 6)}
	switch r.sc.store {
	case storeSQLite:
		path := filepath.Join(t.TempDir(), "store.db")
		b.dialect = sqlstore.SQLite
		b.open = func(bool) (*sql.DB, error) { return sql.Open("sqlite", sqliteDSN(path)) }
	case storePostgres:
		srv := pgtest.Start(t)
		p := redistest.NewProxy(t, srv.Addr())
		r.nem.storeProxy, r.storeAddr = p, p.Addr()
		b.dialect = sqlstore.Postgres
		b.open = func(proxied bool) (*sql.DB, error) {
			addr := srv.Addr()
			if proxied {
				addr = p.Addr()
			}
			host, port, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			return sql.Open("postgres", fmt.Sprintf("host=%s port=%s user=%s dbname=postgres sslmode=disable connect_timeout=2", host, port, srv.User))
		}
	case storeMariaDB:
		srv := mysqltest.Start(t)
		p := redistest.NewProxy(t, srv.Addr())
		r.nem.storeProxy, r.storeAddr = p, p.Addr()
		b.dialect = sqlstore.MySQL
		b.open = func(proxied bool) (*sql.DB, error) {
			cfg, err := mysql.ParseDSN(srv.DSN(""))
			if err != nil {
				return nil, err
			}
			if proxied {
				cfg.Addr = p.Addr()
			}
			cfg.Timeout = redisTimeout
			// The driver logs the connections that the faults break; its
			// calls return the same errors, which the history records.
			cfg.Logger = &mysql.NopLogger{}
			connector, err := mysql.NewConnector(cfg)
			if err != nil {
				return nil, err
			}
			return sql.OpenDB(connector), nil
		}
	default:
		t.Fatalf("unknown SQL store %q", r.sc.store)
	}
	db, err := b.open(false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := sqlstore.NewContext(ctx, db, b.dialect, sqlstore.WithTable(b.table))
	if err != nil {
		t.Fatalf("%v store: %v", b.dialect, err)
	}
	r.direct, r.sql = s, b
}

// newSQLStore returns a client's Store on a handle of its own, closed at
// the end of the workload.
func (r *scenarioRun) newSQLStore() fencedlock.Store {
	db, err := r.sql.open(true)
	if err != nil {
		r.t.Fatal(err)
	}
	r.closers = append(r.closers, func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := sqlstore.NewContext(ctx, db, r.sql.dialect, sqlstore.WithTable(r.sql.table), sqlstore.WithCreateTable(false))
	if err != nil {
		r.t.Fatalf("%v store: %v", r.sql.dialect, err)
	}
	return s
}

// randomHex returns n random bytes in hex.
func randomHex(t interface{ Fatal(...any) }, n int) string {
	b := make([]byte, n)
	if _, err := crand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
