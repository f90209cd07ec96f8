package sqlstore

import (
	"fmt"
	"strings"
)

// Dialect is the SQL dialect of a Store's database: SQLite, Postgres or
// MySQL. The zero Dialect is none of them, and New refuses it.
type Dialect int

const (
	// SQLite is SQLite 3.35 or later (for RETURNING), through any
	// database/sql driver, e.g. modernc.org/sqlite or
	// github.com/mattn/go-sqlite3. Tx relies on SQLite's database write
	// lock: see the package documentation for the busy timeout to set.
	SQLite Dialect = iota + 1

	// Postgres is PostgreSQL 9.5 or later (for INSERT ... ON CONFLICT),
	// through any database/sql driver, e.g. github.com/lib/pq or pgx's
	// stdlib package. Tx relies on the lock of the resource's row.
	Postgres

	// MySQL is MySQL 8.0 or later (8.0.16 or later enforces the table's
	// CHECK constraints) or MariaDB 10.6 or later, with the table in
	// InnoDB, through any database/sql driver, e.g.
	// github.com/go-sql-driver/mysql. Tx relies on InnoDB's lock of the
	// resource's row, which INSERT ... ON DUPLICATE KEY UPDATE takes; as
	// MySQL has no RETURNING, Put and Fence are transactions of that
	// upsert and a locking read of the fence, and a Put, a Fence or the
	// start of a Tx that InnoDB ends as a deadlock victim is tried again.
	// A Put or a Fence is four statements (BEGIN, the upsert, the read,
	// COMMIT), and go-sql-driver/mysql prepares each statement that has
	// arguments on the server first, a round trip more, unless the DSN
	// sets interpolateParams=true (then set maxAllowedPacket=0 too: see
	// Store.MaxValueLen).
	MySQL
)

// String returns "sqlite", "postgres", "mysql", or "Dialect(N)" for a
// value that is none of them.
func (d Dialect) String() string {
	switch d {
	case SQLite:
		return "sqlite"
	case Postgres:
		return "postgres"
	case MySQL:
		return "mysql"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

func (d Dialect) valid() bool { return d == SQLite || d == Postgres || d == MySQL }

// queries is the SQL of one Store: its dialect's statements on its table.
type queries struct {
	create string // creates the table if missing
	probe  string // selects every column, no row: fails if the table does not fit
	put    string // upsert of (resource, token, value), returning the fence it leaves (MySQL: returning nothing)
	raise  string // Fence's upsert of (resource, token), Tx's first: raises the fence, returns it (MySQL: returning nothing)
	lock   string // MySQL: the fence of a resource, read with the lock the upsert took (SELECT ... FOR UPDATE)
	get    string // (value, value_token) of a resource; with autocommit, and @@autocommit, in a row even without the resource's
	fence  string // fence of a resource; with autocommit, and @@autocommit, in a row even without the resource's
	// autocommit says that get and fence read the session's autocommit
	// too (MySQL).
	autocommit bool

	// The arguments of put and raise, in the order of their
	// placeholders.
	putArgs   func(resource string, token int64, value []byte) []any
	raiseArgs func(resource string, token int64) []any
}

// newQueries returns the statements of dialect d on table, an identifier
// that validTable accepted.
func newQueries(d Dialect, table string) queries {
	if d == MySQL {
		return newMySQLQueries(table)
	}
	t := quoteTable(d, table)
	// Placeholders: SQLite's ?NNN and Postgres' $N both name the Nth
	// argument, so one statement can use an argument twice.
	p := func(n int) string {
		if d == SQLite {
			return fmt.Sprintf("?%d", n)
		}
		return fmt.Sprintf("$%d", n)
	}
	blob, greatest := "BYTEA", "GREATEST"
	if d == SQLite {
		blob, greatest = "BLOB", "max"
	}
	return queries{
		create: `CREATE TABLE IF NOT EXISTS ` + t + ` (
	resource    TEXT NOT NULL PRIMARY KEY,
	fence       BIGINT NOT NULL CHECK (fence > 0),
	value       ` + blob + `,
	value_token BIGINT CHECK (value_token > 0 AND value_token <= fence)
)`,
		probe: `SELECT resource, fence, value, value_token FROM ` + t + ` WHERE 1 = 0`,
		// Under the lock the upsert takes on the row (Postgres) or the
		// database (SQLite): the value and its token are written when
		// the token is not below the fence, and the fence becomes the
		// higher of the two. The SET expressions all see the row as it
		// was before the update. A returned fence above the token means
		// the Put was refused and the row left as it was.
		put: `INSERT INTO ` + t + ` AS f (resource, fence, value, value_token)
VALUES (` + p(1) + `, ` + p(2) + `, ` + p(3) + `, ` + p(2) + `)
ON CONFLICT (resource) DO UPDATE SET
	value = CASE WHEN f.fence <= excluded.fence THEN excluded.value ELSE f.value END,
	value_token = CASE WHEN f.fence <= excluded.fence THEN excluded.value_token ELSE f.value_token END,
	fence = ` + greatest + `(f.fence, excluded.fence)
RETURNING fence`,
		// Fence's statement, and Tx's first: it takes the row lock
		// (Postgres) or the database write lock (SQLite), which a Tx's
		// transaction then holds to its end, and raises the fence to the
		// token unless the fence is higher. A returned fence above the
		// token means the Fence (or the Tx) was refused.
		raise: `INSERT INTO ` + t + ` AS f (resource, fence) VALUES (` + p(1) + `, ` + p(2) + `)
ON CONFLICT (resource) DO UPDATE SET fence = ` + greatest + `(f.fence, excluded.fence)
RETURNING fence`,
		get:   `SELECT value, value_token FROM ` + t + ` WHERE resource = ` + p(1),
		fence: `SELECT fence FROM ` + t + ` WHERE resource = ` + p(1),
		putArgs: func(resource string, token int64, value []byte) []any {
			return []any{resource, token, value}
		},
		raiseArgs: func(resource string, token int64) []any {
			return []any{resource, token}
		},
	}
}

// maxIdentLen is the longest identifier PostgreSQL keeps whole (its
// NAMEDATALEN - 1); longer ones it truncates.
const maxIdentLen = 63

// validTable reports why name cannot be a table name, or "" when it can:
// one or two dot-separated parts (schema.table), each of lower-case ASCII
// letters, digits and underscores, not starting with a digit, at most 63
// bytes.
func validTable(name string) string {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return "more than one dot"
	}
	for _, p := range parts {
		if p == "" {
			return "an empty part"
		}
		if len(p) > maxIdentLen {
			return fmt.Sprintf("a part longer than %d bytes", maxIdentLen)
		}
		for i := 0; i < len(p); i++ {
			c := p[i]
			switch {
			case c >= 'a' && c <= 'z', c == '_':
			case c >= '0' && c <= '9' && i > 0:
			case c >= '0' && c <= '9':
				return "a part starting with a digit"
			default:
				return fmt.Sprintf("the character %q (allowed: a-z, 0-9, _ and one dot)", c)
			}
		}
	}
	return ""
}

// tempSchema returns the schema of table, a name validTable accepted, when
// it is a schema of one connection's temporary tables in dialect d, and
// "" otherwise. Such a schema differs from one connection to the next, so
// the connections of a pool would not share the fences. It compares
// without regard to case, as SQLite does. (validTable accepts lower case
// only, so in PostgreSQL, which compares quoted names exactly, that
// refuses nothing more.) MySQL has no such schema: its schemas are
// databases.
func tempSchema(d Dialect, table string) string {
	schema, _, ok := strings.Cut(table, ".")
	if !ok {
		return ""
	}
	lower := strings.ToLower(schema)
	switch {
	case d == SQLite && lower == "temp":
		return schema
	case d == Postgres && strings.HasPrefix(lower, "pg_temp"):
		return schema
	}
	return ""
}

// quoteTable quotes each part of a name validTable accepted, in double
// quotes, or in backquotes in MySQL, so that SQL keywords ("order",
// "user") work as names too. The name is lower case, so the quoted name is
// the one an unquoted name means in PostgreSQL.
func quoteTable(d Dialect, name string) string {
	q := `"`
	if d == MySQL {
		q = "`"
	}
	parts := strings.Split(name, ".")
	for i, p := range parts {
		parts[i] = q + p + q
	}
	return strings.Join(parts, ".")
}
