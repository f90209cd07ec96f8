package sqlstore_test

import (
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/sqlstore"
)

// tableCase is a table made by hand, and what New says of it: want is ""
// for a table that fits, and otherwise a part of New's error.
type tableCase struct {
	name, columns, want string
	options             string // after the columns, e.g. STRICT
	index               string // a CREATE ... INDEX statement made after the table, {table} for its name, {name} for it without its schema
}

// checkTables makes each case's table in b's database (in schema, "" for
// the connection's default) and checks New's verdict, with and without
// WithCreateTable. A table that fits must work; for one refused, New
// wrote nothing. When New accepts a table it should have refused, the
// test shows what goes wrong: a stale Put accepted, or an acknowledged
// Put lost.
func checkTables(t *testing.T, b *backend, schema string, cases []tableCase) {
	t.Helper()
	for _, c := range cases {
		c := c
		t.Run(c.name, func(t *testing.T) {
			table := b.name(t, "checked")
			if schema != "" {
				table = schema + "." + table
			}
			b.exec(t, `CREATE TABLE `+table+` (`+c.columns+`) `+c.options)
			if c.index != "" {
				_, name, _ := strings.Cut(table, ".")
				if schema == "" {
					name = table
				}
				b.exec(t, strings.NewReplacer("{table}", table, "{name}", name).Replace(c.index))
			}
			for _, create := range []bool{false, true} {
				s, err := sqlstore.New(b.db, b.dialect, sqlstore.WithTable(table), sqlstore.WithCreateTable(create))
				if c.want == "" {
					if err != nil {
						t.Fatalf("New(WithCreateTable(%v)) = %v; want the table to fit", create, err)
					}
					continue
				}
				if err == nil {
					t.Errorf("New(WithCreateTable(%v)) accepted the table; want an error saying %q", create, c.want)
					showStale(t, s, create)
					continue
				}
				if errors.Is(err, fencedlock.ErrInvalidArgument) || errors.Is(err, fencedlock.ErrUnavailable) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), table) {
					t.Errorf("New(WithCreateTable(%v)) = %v; want an error naming the table and saying %q", create, err, c.want)
				}
			}
			if c.want != "" {
				if n := b.count(t, `SELECT count(*) FROM `+table); n != 0 {
					t.Errorf("New left %d rows in a table it refused", n)
				}
				return
			}
			s, err := sqlstore.New(b.db, b.dialect, sqlstore.WithTable(table), sqlstore.WithCreateTable(false))
			if err != nil {
				t.Fatal(err)
			}
			expectFenced(t, s)
		})
	}
}

// expectFenced checks that s keeps its tokens in order on a table that
// fits: 10 then 9 refuses 9, and 9 then 10 keeps 10's value.
func expectFenced(t *testing.T, s *sqlstore.Store) {
	t.Helper()
	ctx := testCtx(t)
	if err := s.Put(ctx, "a", 10, []byte("ten")); err != nil {
		t.Fatal(err)
	}
	expectStale(t, s.Put(ctx, "a", 9, []byte("nine")), "a", 9, 10)
	if err := s.Put(ctx, "b", 9, []byte("nine")); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "b", 10, []byte("ten")); err != nil {
		t.Fatal(err)
	}
	if v, tok, err := s.Get(ctx, "b"); err != nil || string(v) != "ten" || tok != 10 {
		t.Errorf("Get after Put(9), Put(10) = (%q, %d, %v); want (\"ten\", 10, nil)", v, tok, err)
	}
	expectStale(t, s.Tx(ctx, "b", 9, func(*sql.Tx) error { return nil }), "b", 9, 10)
}

// showStale logs what a Store on a table New should have refused does
// with tokens 10 and 9, so that a failure shows the harm.
func showStale(t *testing.T, s *sqlstore.Store, create bool) {
	t.Helper()
	if create {
		return // shown once
	}
	ctx := testCtx(t)
	err10 := s.Put(ctx, "a", 10, []byte("ten"))
	err9 := s.Put(ctx, "a", 9, []byte("nine"))
	fence, ferr := s.CurrentFence(ctx, "a")
	t.Logf("Put(10) = %v, then Put(9) = %v; fence %d (%v)", err10, err9, fence, ferr)
	err9 = s.Put(ctx, "b", 9, []byte("nine"))
	err10 = s.Put(ctx, "b", 10, []byte("ten"))
	v, tok, gerr := s.Get(ctx, "b")
	t.Logf("Put(9) = %v, then Put(10) = %v; Get = (%q, %d, %v)", err9, err10, v, tok, gerr)
	errTx := s.Tx(ctx, "b", 9, func(*sql.Tx) error { return nil })
	t.Logf("Put(10) and then Tx(9) = %v", errTx)
}

// New refuses a PostgreSQL table whose columns it cannot trust, naming
// the column and the type it needs, in the default schema and in another.
func TestPostgresNewChecksTable(t *testing.T) {
	b := postgresBackend(t)
	domain, nocase := b.name(t, "domain"), b.name(t, "nocase")
	b.exec(t, `CREATE DOMAIN `+domain+` AS BIGINT`)
	b.exec(t, `CREATE COLLATION `+nocase+` (provider = icu, locale = 'und-u-ks-level2', deterministic = false)`)
	const (
		resource = "resource TEXT NOT NULL"
		fence    = "fence BIGINT NOT NULL"
		value    = "value BYTEA"
		token    = "value_token BIGINT"
	)
	cases := []tableCase{
		{"as New creates it", strings.Join([]string{resource + " PRIMARY KEY", fence + " CHECK (fence > 0)", value, token}, ", "), "", "", ""},
		{"unique, varchar", strings.Join([]string{"resource VARCHAR UNIQUE", fence, value, token}, ", "), "", "", ""},
		{"varchar(1024)", strings.Join([]string{"resource VARCHAR(1024) PRIMARY KEY", fence, value, token}, ", "), "", "", ""},
		{"text tokens", strings.Join([]string{resource + " PRIMARY KEY", "fence TEXT NOT NULL", value, "value_token TEXT"}, ", "), "column fence is text; the Store needs bigint", "", ""},
		{"text fence", strings.Join([]string{resource + " PRIMARY KEY", "fence TEXT NOT NULL", value, token}, ", "), "column fence is text; the Store needs bigint", "", ""},
		{"text value_token", strings.Join([]string{resource + " PRIMARY KEY", fence, value, "value_token TEXT"}, ", "), "column value_token is text; the Store needs bigint", "", ""},
		{"integer fence", strings.Join([]string{resource + " PRIMARY KEY", "fence INTEGER NOT NULL", value, token}, ", "), "column fence is integer; the Store needs bigint", "", ""},
		{"numeric fence", strings.Join([]string{resource + " PRIMARY KEY", "fence NUMERIC NOT NULL", value, token}, ", "), "column fence is numeric; the Store needs bigint", "", ""},
		{"text value", strings.Join([]string{resource + " PRIMARY KEY", fence, "value TEXT", token}, ", "), "column value is text; the Store needs bytea", "", ""},
		{"bytea resource", strings.Join([]string{"resource BYTEA PRIMARY KEY", fence, value, token}, ", "), "column resource is bytea; the Store needs text", "", ""},
		{"char resource", strings.Join([]string{"resource CHAR(1024) PRIMARY KEY", fence, value, token}, ", "), "column resource is character(1024); the Store needs text", "", ""},
		{"short varchar", strings.Join([]string{"resource VARCHAR(100) PRIMARY KEY", fence, value, token}, ", "), "column resource is character varying(100); the Store needs text", "", ""},
		{"nullable fence", strings.Join([]string{resource + " PRIMARY KEY", "fence BIGINT", value, token}, ", "), "column fence may be NULL", "", ""},
		{"value_token not null", strings.Join([]string{resource + " PRIMARY KEY", fence, value, "value_token BIGINT NOT NULL"}, ", "), "column value_token is NOT NULL", "", ""},
		{"value not null", strings.Join([]string{resource + " PRIMARY KEY", fence, "value BYTEA NOT NULL", token}, ", "), "column value is NOT NULL", "", ""},
		{"value_token default", strings.Join([]string{resource + " PRIMARY KEY", fence, value, "value_token BIGINT DEFAULT 0"}, ", "), "column value_token has a default", "", ""},
		{"value_token default null", strings.Join([]string{resource + " PRIMARY KEY", fence, value, "value_token BIGINT DEFAULT NULL"}, ", "), "", "", ""},
		{"generated value_token", strings.Join([]string{resource + " PRIMARY KEY", fence, value, "value_token BIGINT GENERATED ALWAYS AS (fence) STORED"}, ", "), "column value_token is a generated column", "", ""},
		{"no unique key", strings.Join([]string{resource, fence, value, token}, ", "), "unique constraint on resource", "", ""},
		{"domain fence", strings.Join([]string{resource + " PRIMARY KEY", "fence " + domain + " NOT NULL", value, token}, ", "), "column fence is " + domain + "; the Store needs bigint", "", ""},
		{"nondeterministic resource", strings.Join([]string{"resource TEXT COLLATE " + nocase + " PRIMARY KEY", fence, value, token}, ", "), "column resource has a nondeterministic collation", "", ""},
		{"nondeterministic index", strings.Join([]string{resource + " PRIMARY KEY", fence, value, token}, ", "), "a unique index on resource has a nondeterministic collation", "", `CREATE UNIQUE INDEX ON {table} (resource COLLATE ` + nocase + `)`},
	}
	t.Run("default schema", func(t *testing.T) { checkTables(t, b, "", cases) })
	schema := b.name(t, "schema")
	b.exec(t, `CREATE SCHEMA `+schema)
	t.Run("schema", func(t *testing.T) { checkTables(t, b, schema, cases) })
}

// New refuses a SQLite table whose columns it cannot trust, by the
// affinity of their declared types, naming the column and the type it
// needs, in the main database and in an attached one.
func TestSQLiteNewChecksTable(t *testing.T) {
	b := sqliteBackend(t)
	const (
		resource = "resource TEXT NOT NULL"
		fence    = "fence BIGINT NOT NULL"
		value    = "value BLOB"
		token    = "value_token BIGINT"
	)
	cases := []tableCase{
		{"as New creates it", strings.Join([]string{resource + " PRIMARY KEY", fence + " CHECK (fence > 0)", value, token}, ", "), "", "", ""},
		{"integer and varchar", strings.Join([]string{"resource VARCHAR(20) UNIQUE", "fence INTEGER NOT NULL", value, "value_token INT"}, ", "), "", "", ""},
		{"text tokens", strings.Join([]string{resource + " PRIMARY KEY", "fence TEXT NOT NULL", value, "value_token TEXT"}, ", "), "column fence is TEXT (TEXT affinity); the Store needs INTEGER affinity", "", ""},
		{"text fence", strings.Join([]string{resource + " PRIMARY KEY", "fence TEXT NOT NULL", value, token}, ", "), "column fence is TEXT (TEXT affinity); the Store needs INTEGER affinity", "", ""},
		{"text value_token", strings.Join([]string{resource + " PRIMARY KEY", fence, value, "value_token TEXT"}, ", "), "column value_token is TEXT (TEXT affinity)", "", ""},
		{"untyped fence", strings.Join([]string{resource + " PRIMARY KEY", "fence NOT NULL", value, token}, ", "), "column fence is of no declared type (BLOB affinity)", "", ""},
		{"real fence", strings.Join([]string{resource + " PRIMARY KEY", "fence DOUBLE NOT NULL", value, token}, ", "), "column fence is DOUBLE (REAL affinity)", "", ""},
		{"numeric fence", strings.Join([]string{resource + " PRIMARY KEY", "fence DECIMAL NOT NULL", value, token}, ", "), "column fence is DECIMAL (NUMERIC affinity)", "", ""},
		{"integer resource", strings.Join([]string{"resource BIGINT PRIMARY KEY", fence, value, token}, ", "), "column resource is BIGINT (INTEGER affinity); the Store needs TEXT affinity", "", ""},
		{"text value", strings.Join([]string{resource + " PRIMARY KEY", fence, "value TEXT", token}, ", "), "column value is TEXT (TEXT affinity); the Store needs BLOB", "", ""},
		{"nullable fence", strings.Join([]string{resource + " PRIMARY KEY", "fence BIGINT", value, token}, ", "), "column fence may be NULL", "", ""},
		{"value_token not null", strings.Join([]string{resource + " PRIMARY KEY", fence, value, "value_token BIGINT NOT NULL"}, ", "), "column value_token is NOT NULL", "", ""},
		{"value not null", strings.Join([]string{resource + " PRIMARY KEY", fence, "value BLOB NOT NULL", token}, ", "), "column value is NOT NULL", "", ""},
		{"value_token default", strings.Join([]string{resource + " PRIMARY KEY", fence, value, "value_token BIGINT DEFAULT 0"}, ", "), "column value_token has a default", "", ""},
		{"value_token default null", strings.Join([]string{resource + " PRIMARY KEY", fence, value, "value_token BIGINT DEFAULT NULL"}, ", "), "", "", ""},
		{"rowid value_token", strings.Join([]string{resource + " UNIQUE", fence, value, "value_token INTEGER PRIMARY KEY"}, ", "), "column value_token is a generated column, or in the primary key", "", ""},
		{"rowid fence", strings.Join([]string{resource + " UNIQUE", "fence INTEGER NOT NULL PRIMARY KEY", value, token}, ", "), "column fence is a generated column, or in the primary key", "", ""},
		{"generated value_token", strings.Join([]string{resource + " PRIMARY KEY", fence, value, "value_token BIGINT GENERATED ALWAYS AS (fence) STORED"}, ", "), "column value_token is a generated column", "", ""},
		{"no unique key", strings.Join([]string{resource, fence, value, token}, ", "), "unique constraint on resource", "", ""},
		{"strict", "resource TEXT PRIMARY KEY, fence INT NOT NULL, value BLOB, value_token INTEGER", "", "STRICT", ""},
		{"strict any", "resource TEXT PRIMARY KEY, fence ANY NOT NULL, value BLOB, value_token INTEGER", "column fence is ANY (NUMERIC affinity)", "STRICT", ""},
		{"without rowid", strings.Join([]string{resource + " PRIMARY KEY", fence, value, token}, ", "), "", "WITHOUT ROWID", ""},
		{"nocase resource", strings.Join([]string{resource + " COLLATE NOCASE PRIMARY KEY", fence, value, token}, ", "), "column resource has a collation other than BINARY", "", ""},
		{"rtrim resource", strings.Join([]string{resource + " COLLATE RTRIM", fence, value, token, "UNIQUE (resource COLLATE BINARY)"}, ", "), "column resource has a collation other than BINARY", "", ""},
		{"nocase index", strings.Join([]string{resource + " PRIMARY KEY", fence, value, token}, ", "), "on resource has a collation other than BINARY", "", `CREATE UNIQUE INDEX {table}_nocase ON {name} (resource COLLATE NOCASE)`},
		{"binary index", strings.Join([]string{resource, fence, value, token}, ", "), "", "", `CREATE UNIQUE INDEX {table}_binary ON {name} (resource COLLATE BINARY)`},
	}
	t.Run("main", func(t *testing.T) { checkTables(t, b, "", cases) })

	// An attached database, on the one connection of a pool that
	// attached it.
	a := sqliteBackend(t)
	a.db.SetMaxOpenConns(1)
	a.exec(t, `ATTACH DATABASE '`+filepath.Join(t.TempDir(), "other.db")+`' AS other`)
	t.Run("attached", func(t *testing.T) { checkTables(t, a, "other", cases) })
}
