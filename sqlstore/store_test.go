package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/fencetest"
	"github.com/fencedlock/fencedlock/sqlstore"
)

// Every dialect passes the conformance suite, each subtest on a fresh
// table.
func TestStore(t *testing.T) {
	eachDialect(t, func(t *testing.T, b *backend) {
		fencetest.Store(t, func(t *testing.T) fencedlock.Store { return b.newStore(t) })
	})
}

func TestNewRefusesBadArguments(t *testing.T) {
	db, err := sql.Open("sqlite", sqliteDSN(t.TempDir()+"/new.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, c := range []struct {
		name string
		db   *sql.DB
		d    sqlstore.Dialect
		opts []sqlstore.Option
		want string // in the message
	}{
		{"nil db", nil, sqlstore.SQLite, nil, "nil *sql.DB"},
		{"zero dialect", db, 0, nil, "unknown dialect Dialect(0)"},
		{"unknown dialect", db, 7, nil, "unknown dialect Dialect(7)"},
		{"empty table", db, sqlstore.SQLite, []sqlstore.Option{sqlstore.WithTable("")}, "an empty part"},
		{"injection", db, sqlstore.SQLite, []sqlstore.Option{sqlstore.WithTable("t; DROP TABLE x")}, "character ';'"},
		{"quote", db, sqlstore.SQLite, []sqlstore.Option{sqlstore.WithTable(`t"x`)}, `character '"'`},
		{"upper case", db, sqlstore.SQLite, []sqlstore.Option{sqlstore.WithTable("Fences")}, "character 'F'"},
		{"space", db, sqlstore.SQLite, []sqlstore.Option{sqlstore.WithTable("my fences")}, "character ' '"},
		{"leading digit", db, sqlstore.SQLite, []sqlstore.Option{sqlstore.WithTable("1fences")}, "starting with a digit"},
		{"two dots", db, sqlstore.SQLite, []sqlstore.Option{sqlstore.WithTable("a.b.c")}, "more than one dot"},
		{"trailing dot", db, sqlstore.SQLite, []sqlstore.Option{sqlstore.WithTable("a.")}, "an empty part"},
		{"too long", db, sqlstore.SQLite, []sqlstore.Option{sqlstore.WithTable(strings.Repeat("a", 64))}, "longer than 63 bytes"},
		{"non-ASCII", db, sqlstore.SQLite, []sqlstore.Option{sqlstore.WithTable("zäune")}, "character"},
		// The schemas of a connection's own temporary tables; upper case
		// is refused as any other upper-case name.
		{"sqlite temp", db, sqlstore.SQLite, []sqlstore.Option{sqlstore.WithTable("temp.fences")}, `"temp" is the schema of a connection's own temporary tables`},
		{"sqlite TEMP", db, sqlstore.SQLite, []sqlstore.Option{sqlstore.WithTable("TEMP.fences")}, "character 'T'"},
		{"postgres pg_temp", db, sqlstore.Postgres, []sqlstore.Option{sqlstore.WithTable("pg_temp.fences")}, `"pg_temp" is the schema of a connection's own temporary tables`},
		{"postgres pg_temp_3", db, sqlstore.Postgres, []sqlstore.Option{sqlstore.WithTable("pg_temp_3.fences")}, `"pg_temp_3" is the schema`},
		{"postgres pg_tempx", db, sqlstore.Postgres, []sqlstore.Option{sqlstore.WithTable("pg_tempx.fences")}, `"pg_tempx" is the schema`},
		{"mysql backquote", db, sqlstore.MySQL, []sqlstore.Option{sqlstore.WithTable("t`; DROP TABLE x")}, "character '`'"},
	} {
		c := c
		t.Run(c.name, func(t *testing.T) {
			s, err := sqlstore.New(c.db, c.d, c.opts...)
			if !errors.Is(err, fencedlock.ErrInvalidArgument) || s != nil {
				t.Fatalf("New = (%v, %v); want nil and an error wrapping ErrInvalidArgument", s, err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("New: %v; want a message that mentions %q", err, c.want)
			}
		})
	}
	// Nothing was created by the refused calls.
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master`).Scan(&n); err != nil || n != 0 {
		t.Errorf("the database has %d objects (%v) after refused New calls; want 0", n, err)
	}
}

func TestNewOptions(t *testing.T) {
	eachDialect(t, func(t *testing.T, b *backend) {
		ctx := testCtx(t)
		put := func(s *sqlstore.Store) {
			t.Helper()
			if err := s.Put(ctx, "r", 3, []byte("v")); err != nil {
				t.Fatalf("Put on table %s: %v", s.Table(), err)
			}
			if v, tok, err := s.Get(ctx, "r"); err != nil || string(v) != "v" || tok != 3 {
				t.Fatalf("Get on table %s = (%q, %d, %v); want (\"v\", 3, nil)", s.Table(), v, tok, err)
			}
		}

		t.Run("default", func(t *testing.T) {
			s, err := sqlstore.New(b.db, b.dialect, nil) // a nil Option is ignored
			if err != nil {
				t.Fatal(err)
			}
			if s.Table() != sqlstore.DefaultTable || s.Dialect() != b.dialect {
				t.Errorf("Table, Dialect = %q, %v; want %q, %v", s.Table(), s.Dialect(), sqlstore.DefaultTable, b.dialect)
			}
			put(s)
			b.exec(t, `DROP TABLE `+sqlstore.DefaultTable)
		})

		t.Run("keyword", func(t *testing.T) {
			// Quoted in the SQL, a keyword is a name like any other.
			s, err := sqlstore.New(b.db, b.dialect, sqlstore.WithTable("order"))
			if err != nil {
				t.Fatal(err)
			}
			put(s)
			b.exec(t, `DROP TABLE `+b.quote("order"))
		})

		t.Run("schema", func(t *testing.T) {
			schema := "main"
			switch b.dialect {
			case sqlstore.Postgres:
				schema = b.name(t, "schema")
				b.exec(t, `CREATE SCHEMA `+schema)
			case sqlstore.MySQL: // a schema is a database
				schema = b.name(t, "schema")
				b.exec(t, `CREATE DATABASE `+schema)
			}
			table := schema + "." + b.name(t, "fences")
			s, err := sqlstore.NewContext(ctx, b.db, b.dialect, sqlstore.WithTable(table))
			if err != nil {
				t.Fatal(err)
			}
			if s.Table() != table {
				t.Errorf("Table() = %q; want %q", s.Table(), table)
			}
			put(s)
		})

		t.Run("again", func(t *testing.T) {
			// New on an existing table keeps its rows.
			table := b.name(t, "fences")
			s1, err := sqlstore.New(b.db, b.dialect, sqlstore.WithTable(table))
			if err != nil {
				t.Fatal(err)
			}
			put(s1)
			s2, err := sqlstore.New(b.db, b.dialect, sqlstore.WithTable(table))
			if err != nil {
				t.Fatal(err)
			}
			if v, tok, err := s2.Get(ctx, "r"); err != nil || string(v) != "v" || tok != 3 {
				t.Fatalf("Get through a second Store = (%q, %d, %v); want (\"v\", 3, nil)", v, tok, err)
			}
		})

		t.Run("no create", func(t *testing.T) {
			table := b.name(t, "fences")
			_, err := sqlstore.New(b.db, b.dialect, sqlstore.WithTable(table), sqlstore.WithCreateTable(false))
			if err == nil || errors.Is(err, fencedlock.ErrInvalidArgument) || !strings.Contains(err.Error(), table) {
				t.Fatalf("New(WithCreateTable(false)) on a missing table = %v; want a database error naming the table", err)
			}
			if _, err := sqlstore.New(b.db, b.dialect, sqlstore.WithTable(table)); err != nil {
				t.Fatal(err)
			}
			s, err := sqlstore.New(b.db, b.dialect, sqlstore.WithTable(table), sqlstore.WithCreateTable(false))
			if err != nil {
				t.Fatalf("New(WithCreateTable(false)) on an existing table: %v", err)
			}
			put(s)
		})

		t.Run("temporary names", func(t *testing.T) {
			// Names that are only temporary schemas' in the other
			// dialect, or as a table's name, are tables like any other.
			// (MySQL has no schema of temporary tables: its
			// databases named so are databases like any other.)
			schema := map[sqlstore.Dialect]string{sqlstore.Postgres: "SCHEMA", sqlstore.MySQL: "DATABASE"}[b.dialect]
			for _, name := range []string{"temp", "pg_temp", "pg_temp_1"} {
				if schema != "" {
					name = "temp." + name
					b.exec(t, `CREATE `+schema+` IF NOT EXISTS temp`)
				}
				s, err := sqlstore.New(b.db, b.dialect, sqlstore.WithTable(name))
				if err != nil {
					t.Fatalf("New(WithTable(%q)): %v", name, err)
				}
				put(s)
				b.exec(t, `DROP TABLE `+name)
			}
			if b.dialect == sqlstore.MySQL {
				b.exec(t, `CREATE DATABASE IF NOT EXISTS pg_temp`)
				s, err := sqlstore.New(b.db, b.dialect, sqlstore.WithTable("pg_temp.fences"))
				if err != nil {
					t.Fatalf("New(WithTable(%q)): %v", "pg_temp.fences", err)
				}
				put(s)
				b.exec(t, `DROP DATABASE pg_temp`)
			}
			if schema != "" {
				b.exec(t, `DROP `+schema+` temp`)
			}
		})

		t.Run("no unique key", func(t *testing.T) {
			// The columns, and no unique index on resource: Put's ON
			// CONFLICT (resource), or ON DUPLICATE KEY, has no
			// constraint to use.
			resource, value := b.types()
			columns := `(resource ` + resource + ` NOT NULL, fence BIGINT NOT NULL, value ` + value + `, value_token BIGINT)`
			table := b.name(t, "nokey")
			b.exec(t, `CREATE TABLE `+table+` `+columns)
			for _, create := range []bool{false, true} {
				_, err := sqlstore.New(b.db, b.dialect, sqlstore.WithTable(table), sqlstore.WithCreateTable(create))
				if err == nil || errors.Is(err, fencedlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "unique constraint on resource") || !strings.Contains(err.Error(), table) {
					t.Errorf("New(WithCreateTable(%v)) on a table without a unique key = %v; want a database error naming the table and saying so", create, err)
				}
			}
			// A unique index on resource (no primary key) will do, and New
			// wrote nothing checking it.
			b.exec(t, `CREATE UNIQUE INDEX `+table+`_resource ON `+table+` (resource)`)
			s, err := sqlstore.New(b.db, b.dialect, sqlstore.WithTable(table), sqlstore.WithCreateTable(false))
			if err != nil {
				t.Fatalf("New(WithCreateTable(false)) on a table with a unique index on resource: %v", err)
			}
			if n := b.count(t, `SELECT count(*) FROM `+table); n != 0 {
				t.Errorf("New left %d rows in the table; want 0", n)
			}
			put(s)
			// A unique index on (resource, fence) does not make resource
			// unique.
			pair := b.name(t, "pair")
			b.exec(t, `CREATE TABLE `+pair+` `+columns)
			b.exec(t, `CREATE UNIQUE INDEX `+pair+`_key ON `+pair+` (resource, fence)`)
			if _, err := sqlstore.New(b.db, b.dialect, sqlstore.WithTable(pair), sqlstore.WithCreateTable(false)); err == nil || !strings.Contains(err.Error(), "unique constraint on resource") {
				t.Errorf("New on a table unique on (resource, fence) = %v; want an error", err)
			}
		})

		t.Run("wrong table", func(t *testing.T) {
			table := b.name(t, "other")
			resource, _ := b.types()
			b.exec(t, `CREATE TABLE `+table+` (resource `+resource+` PRIMARY KEY, token BIGINT)`)
			_, err := sqlstore.New(b.db, b.dialect, sqlstore.WithTable(table))
			if err == nil || !strings.Contains(err.Error(), "does not have the columns") {
				t.Fatalf("New on a table of other columns = %v; want an error saying so", err)
			}
		})

		t.Run("cancelled", func(t *testing.T) {
			cancelled, cancel := context.WithCancel(ctx)
			cancel()
			table := b.name(t, "fences")
			if _, err := sqlstore.NewContext(cancelled, b.db, b.dialect, sqlstore.WithTable(table)); !errors.Is(err, context.Canceled) {
				t.Fatalf("NewContext with a cancelled context = %v; want context.Canceled", err)
			}
		})
	})
}

// A nil *Store and the zero Store return errors, not panics.
func TestNilAndZeroStore(t *testing.T) {
	ctx := context.Background()
	for name, s := range map[string]*sqlstore.Store{"nil": nil, "zero": {}} {
		if err := s.Put(ctx, "r", 1, nil); !errors.Is(err, fencedlock.ErrInvalidArgument) {
			t.Errorf("%s Store: Put = %v; want ErrInvalidArgument", name, err)
		}
		if _, _, err := s.Get(ctx, "r"); !errors.Is(err, fencedlock.ErrInvalidArgument) {
			t.Errorf("%s Store: Get = %v; want ErrInvalidArgument", name, err)
		}
		if _, err := s.CurrentFence(ctx, "r"); !errors.Is(err, fencedlock.ErrInvalidArgument) {
			t.Errorf("%s Store: CurrentFence = %v; want ErrInvalidArgument", name, err)
		}
		if err := s.Fence(ctx, "r", 1); !errors.Is(err, fencedlock.ErrInvalidArgument) {
			t.Errorf("%s Store: Fence = %v; want ErrInvalidArgument", name, err)
		}
		called := false
		if err := s.Tx(ctx, "r", 1, func(*sql.Tx) error { called = true; return nil }); !errors.Is(err, fencedlock.ErrInvalidArgument) || called {
			t.Errorf("%s Store: Tx = %v, fn called %v; want ErrInvalidArgument, not called", name, err, called)
		}
		if s.Table() != "" || s.Dialect() != 0 {
			t.Errorf("%s Store: Table, Dialect = %q, %v; want \"\", 0", name, s.Table(), s.Dialect())
		}
	}
}

// Tokens above MaxToken, zero tokens and resource names the Store cannot
// keep are refused before the database is used, by every method.
func TestRefusedArguments(t *testing.T) {
	eachDialect(t, func(t *testing.T, b *backend) {
		ctx := testCtx(t)
		s := b.newStore(t)
		tx := func(resource string, token fencedlock.Token) error {
			return s.Tx(ctx, resource, token, func(*sql.Tx) error {
				t.Errorf("Tx(%q, %d) called fn", resource, token)
				return nil
			})
		}
		for _, c := range []struct {
			resource string
			token    fencedlock.Token
			want     error
		}{
			{"r", 0, fencedlock.ErrInvalidToken},
			{"r", sqlstore.MaxToken + 1, fencedlock.ErrInvalidToken},
			{"r", 1 << 63, fencedlock.ErrInvalidToken},
			{"r", ^fencedlock.Token(0), fencedlock.ErrInvalidToken},
			{"", 1, fencedlock.ErrInvalidArgument},
			{"nul\x00byte", 1, fencedlock.ErrInvalidArgument},
			{"bad \xff utf-8", 1, fencedlock.ErrInvalidArgument},
			{strings.Repeat("x", sqlstore.MaxResourceLen+1), 1, fencedlock.ErrInvalidArgument},
		} {
			if err := s.Put(ctx, c.resource, c.token, []byte("v")); !errors.Is(err, c.want) {
				t.Errorf("Put(%.20q, %d) = %v; want an error wrapping %v", c.resource, c.token, err, c.want)
			}
			if err := tx(c.resource, c.token); !errors.Is(err, c.want) {
				t.Errorf("Tx(%.20q, %d) = %v; want an error wrapping %v", c.resource, c.token, err, c.want)
			}
			if err := s.Fence(ctx, c.resource, c.token); !errors.Is(err, c.want) {
				t.Errorf("Fence(%.20q, %d) = %v; want an error wrapping %v", c.resource, c.token, err, c.want)
			}
			if c.want == fencedlock.ErrInvalidArgument {
				if _, _, err := s.Get(ctx, c.resource); !errors.Is(err, c.want) {
					t.Errorf("Get(%.20q) = %v; want an error wrapping %v", c.resource, err, c.want)
				}
				if _, err := s.CurrentFence(ctx, c.resource); !errors.Is(err, c.want) {
					t.Errorf("CurrentFence(%.20q) = %v; want an error wrapping %v", c.resource, err, c.want)
				}
			}
		}
		if err := s.Tx(ctx, "r", 1, nil); !errors.Is(err, fencedlock.ErrInvalidArgument) {
			t.Errorf("Tx with a nil fn = %v; want ErrInvalidArgument", err)
		}
		if n := b.count(t, `SELECT count(*) FROM `+s.Table()); n != 0 {
			t.Errorf("the table has %d rows after refused calls; want 0", n)
		}

		// The largest token and the longest name work, and compare
		// exactly at the top of the range.
		long := strings.Repeat("x", sqlstore.MaxResourceLen)
		if err := s.Put(ctx, long, sqlstore.MaxToken, []byte("top")); err != nil {
			t.Fatalf("Put(%d-byte name, MaxToken) = %v", len(long), err)
		}
		err := s.Put(ctx, long, sqlstore.MaxToken-1, []byte("below"))
		var se *fencedlock.StaleTokenError
		if !errors.As(err, &se) || se.Token != sqlstore.MaxToken-1 || se.Current != sqlstore.MaxToken {
			t.Errorf("Put(MaxToken-1) after Put(MaxToken) = %v; want a StaleTokenError with Current MaxToken", err)
		}
		if err := s.Tx(ctx, long, sqlstore.MaxToken, func(*sql.Tx) error { return nil }); err != nil {
			t.Errorf("Tx(MaxToken) after Put(MaxToken) = %v; want nil", err)
		}
		if err := s.Fence(ctx, long, sqlstore.MaxToken); err != nil {
			t.Errorf("Fence(MaxToken) after Put(MaxToken) = %v; want nil", err)
		}
		err = s.Fence(ctx, long, sqlstore.MaxToken-1)
		if !errors.As(err, &se) || se.Token != sqlstore.MaxToken-1 || se.Current != sqlstore.MaxToken {
			t.Errorf("Fence(MaxToken-1) after Put(MaxToken) = %v; want a StaleTokenError with Current MaxToken", err)
		}
		if f, err := s.CurrentFence(ctx, long); err != nil || f != sqlstore.MaxToken {
			t.Errorf("CurrentFence = (%d, %v); want (MaxToken, nil)", f, err)
		}
	})
}

// Put refuses a value longer than MaxValueLen before it sends anything,
// with an error wrapping ErrInvalidArgument. (The value is allocated and
// never touched: its pages are not made resident.)
func TestPutValueLimit(t *testing.T) {
	eachDialect(t, func(t *testing.T, b *backend) {
		ctx := testCtx(t)
		s := b.newStore(t)
		want := map[sqlstore.Dialect]int{
			sqlstore.SQLite:   1_000_000_000 - 4096,
			sqlstore.Postgres: (1<<30 - 1 - 4096) / 2,
			sqlstore.MySQL:    16<<20 - 4096, // MariaDB's default max_allowed_packet
		}[b.dialect]
		if got := s.MaxValueLen(); got != want {
			t.Errorf("MaxValueLen() = %d; want %d", got, want)
		}
		if err := s.Put(ctx, "r", 5, []byte("five")); err != nil {
			t.Fatal(err)
		}
		err := s.Put(ctx, "r", 6, make([]byte, s.MaxValueLen()+1))
		// Hands the pages back, so that the next large value gets fresh
		// ones, which need no zeroing, rather than these.
		debug.FreeOSMemory()
		if !errors.Is(err, fencedlock.ErrInvalidArgument) || !strings.Contains(err.Error(), fmt.Sprintf("the longest the Store takes is %d bytes", want)) {
			t.Errorf("Put of MaxValueLen()+1 bytes = %v; want an error wrapping ErrInvalidArgument that gives the limit", err)
		}
		if v, tok, err := s.Get(ctx, "r"); err != nil || string(v) != "five" || tok != 5 {
			t.Errorf("Get = (%d bytes, %d, %v); want (\"five\", 5, nil): nothing sent", len(v), tok, err)
		}
	})
	if n := (&sqlstore.Store{}).MaxValueLen(); n != 0 {
		t.Errorf("MaxValueLen of the zero Store = %d; want 0", n)
	}
}

// The table holds what the package documentation says: one row per
// resource with its fence, its value and the value's token.
func TestSchema(t *testing.T) {
	eachDialect(t, func(t *testing.T, b *backend) {
		ctx := testCtx(t)
		s := b.newStore(t)
		if err := s.Tx(ctx, "only-tx", 4, func(*sql.Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if err := s.Fence(ctx, "only-fence", 3); err != nil {
			t.Fatal(err)
		}
		if err := s.Put(ctx, "put", 6, []byte("six")); err != nil {
			t.Fatal(err)
		}
		if err := s.Tx(ctx, "put", 9, func(*sql.Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if err := s.Fence(ctx, "put", 10); err != nil {
			t.Fatal(err)
		}
		rows, err := b.db.Query(`SELECT resource, fence, value, value_token FROM ` + s.Table() + ` ORDER BY resource`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var got []string
		for rows.Next() {
			var (
				resource string
				fence    int64
				value    []byte
				token    sql.NullInt64
			)
			if err := rows.Scan(&resource, &fence, &value, &token); err != nil {
				t.Fatal(err)
			}
			got = append(got, strings.Join([]string{resource, itoa(fence), stringOrNull(value), nullInt(token)}, " "))
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		want := []string{"only-fence 3 NULL NULL", "only-tx 4 NULL NULL", "put 10 six 6"}
		if strings.Join(got, "; ") != strings.Join(want, "; ") {
			t.Errorf("rows = %q; want %q", got, want)
		}
	})
}

// A name far beyond MaxResourceLen is refused by every method with a
// short message; names the Store refuses for other reasons are quoted
// short too.
func TestLongResourceNames(t *testing.T) {
	if sqlstore.MaxResourceLen != fencedlock.MaxResourceLen {
		t.Errorf("sqlstore.MaxResourceLen = %d; want fencedlock.MaxResourceLen, %d", sqlstore.MaxResourceLen, fencedlock.MaxResourceLen)
	}
	eachDialect(t, func(t *testing.T, b *backend) {
		ctx := testCtx(t)
		s := b.newStore(t)
		for _, name := range []string{
			strings.Repeat("n", 1<<20),
			strings.Repeat("n", sqlstore.MaxResourceLen+1),
			strings.Repeat("n", 1000) + "\xff", // not UTF-8, within the limit
			strings.Repeat("n", 1000) + "\x00", // a NUL byte
		} {
			errs := map[string]error{"Put": s.Put(ctx, name, 1, []byte("v"))}
			_, _, errs["Get"] = s.Get(ctx, name)
			_, errs["CurrentFence"] = s.CurrentFence(ctx, name)
			errs["Fence"] = s.Fence(ctx, name, 1)
			errs["Tx"] = s.Tx(ctx, name, 1, func(*sql.Tx) error {
				t.Errorf("Tx ran fn with a %d-byte name", len(name))
				return nil
			})
			errs["Tx (token above MaxToken)"] = s.Tx(ctx, name[:10], sqlstore.MaxToken+1, func(*sql.Tx) error { return nil })
			errs["Fence (token above MaxToken)"] = s.Fence(ctx, name[:10], sqlstore.MaxToken+1)
			for op, err := range errs {
				want := fencedlock.ErrInvalidArgument
				if strings.Contains(op, "MaxToken") {
					want = fencedlock.ErrInvalidToken
				}
				if !errors.Is(err, want) {
					t.Errorf("%s(%d-byte name) = %.200v; want an error wrapping %v", op, len(name), err, want)
				} else if len(err.Error()) >= 300 {
					t.Errorf("%s(%d-byte name): a %d-byte message: %.200s...", op, len(name), len(err.Error()), err)
				}
			}
		}
		// A name of MaxResourceLen works; the errors of names just below
		// it stay short.
		long := strings.Repeat("l", sqlstore.MaxResourceLen)
		if err := s.Put(ctx, long, 5, []byte("v")); err != nil {
			t.Fatalf("Put(%d-byte name) = %v", len(long), err)
		}
		if _, _, err := s.Get(ctx, long); err != nil {
			t.Fatalf("Get(%d-byte name) = %v", len(long), err)
		}
		if _, _, err := s.Get(ctx, long[1:]); !errors.Is(err, fencedlock.ErrNotFound) || len(err.Error()) >= 300 {
			t.Errorf("Get(%d-byte name never written) = %.200v (%d bytes); want a short ErrNotFound", len(long)-1, err, len(err.Error()))
		}
		if _, err := s.CurrentFence(ctx, long[1:]); !errors.Is(err, fencedlock.ErrNotFound) || len(err.Error()) >= 300 {
			t.Errorf("CurrentFence(%d-byte name never written) = %.200v (%d bytes); want a short ErrNotFound", len(long)-1, err, len(err.Error()))
		}
	})
}
