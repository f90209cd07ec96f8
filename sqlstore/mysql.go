package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// MySQL has no RETURNING. (MariaDB has INSERT ... RETURNING from 10.5 on,
// but the dialect is one set of statements for both.) So the fence an
// upsert leaves is read by a second statement of its transaction, under
// the lock the upsert took. Put is a transaction of two statements, the
// upsert and SELECT ... FOR UPDATE of the fence (the package
// documentation shows both); Fence is a transaction of the same two
// without value and value_token, and Tx begins with those, then calls
// fn. (MySQL runs the assignments of an UPDATE in order, each seeing
// those before it: the fence is assigned last.) This relies on what
// InnoDB does, on MySQL 8.0 and later and MariaDB 10.6 and later:
//
//   - The upsert takes an exclusive lock on the row's primary key record,
//     inserting the row or, when the row exists, waiting for the
//     transaction that holds the lock to end and then updating the row as
//     that one committed it; an upsert that meets a row another
//     transaction is inserting waits for that one too. The lock is held
//     until the transaction ends. It locks the record, not a gap of the
//     index, so that calls on other resources, new ones included, are not
//     held up.
//   - SELECT ... FOR UPDATE reads the row as last committed, with the
//     transaction's own changes, not the snapshot that REPEATABLE READ
//     gives plain reads; holding the row's lock already, it does not
//     wait. So it reads the fence the upsert left.
//   - fn's statements run at the session's isolation level. Under the
//     default, REPEATABLE READ, fn's snapshot is taken by its first plain
//     read, after the upsert got the lock: fn sees what the Puts and Tx
//     calls before it on the resource committed. Unlike PostgreSQL's,
//     InnoDB's REPEATABLE READ does not fail a transaction that waited for
//     the lock. The tests run the concurrency checks at all four levels.
//   - A deadlock ends with InnoDB rolling back one of its transactions
//     whole (error 1213). The one that Put, Fence and Tx can meet on
//     their own is on a new resource: when the transaction that inserted
//     its row rolls back while two or more others wait for the row's
//     lock, the waiters are left with gap locks where the row was, and
//     their inserts wait for each other's. A victim had done nothing but the
//     upsert, so Put, Fence and Tx make their transaction again, up to
//     deadlockAttempts times (the error then says how many), and fn is
//     never called twice. A deadlock in fn's own statements is fn's
//     error, returned as it is.
//   - The wait for the lock ends for the caller when ctx does (the call
//     returns; go-sql-driver/mysql closes the connection), but the server
//     goes on waiting until it gets the lock or innodb_lock_wait_timeout
//     (50 s by default) passes; it then finds the connection closed and
//     rolls the transaction back, committing nothing. A wait that reaches
//     innodb_lock_wait_timeout fails with error 1205.
//   - The table's CHECK constraints are enforced from MySQL 8.0.16 (and in
//     MariaDB); the Store never writes a row they would refuse.
//
// The comments below say why each step is atomic.

// maxResourceBytes is the length of the resource column that New
// creates in MySQL, VARBINARY(1024): MaxResourceLen bytes, compared byte
// for byte. A character column would compare names by its collation,
// which in MySQL and MariaDB ignores case, or accents, or trailing
// spaces, so that distinct resources would share a row; and 1024
// characters of utf8mb4 are more than InnoDB indexes (3072 bytes).
const maxResourceBytes = MaxResourceLen

// newMySQLQueries returns the statements of the MySQL dialect on table,
// an identifier that validTable accepted. Placeholders are "?", one per
// argument: the argument functions repeat what a statement uses twice.
func newMySQLQueries(table string) queries {
	t := quoteTable(MySQL, table)
	return queries{
		// CHECK constraints that name two columns must be the table's
		// own in MySQL. ENGINE: the transactions and row locks are
		// InnoDB's, whatever the server's default engine.
		create: `CREATE TABLE IF NOT EXISTS ` + t + ` (
	resource    VARBINARY(` + fmt.Sprint(maxResourceBytes) + `) NOT NULL PRIMARY KEY,
	fence       BIGINT NOT NULL CHECK (fence > 0),
	value       LONGBLOB,
	value_token BIGINT,
	CHECK (value_token > 0 AND value_token <= fence)
) ENGINE = InnoDB`,
		probe: `SELECT resource, fence, value, value_token FROM ` + t + ` WHERE 1 = 0`,
		// The first statement of Put's transaction. On a new resource
		// it inserts the row, and holds the lock on the new index
		// record; a concurrent upsert of the same resource finds the
		// record and waits for that lock. On an existing row it takes
		// an exclusive lock on the row's record (for ON DUPLICATE KEY
		// UPDATE InnoDB takes an exclusive lock on the duplicate, not
		// the shared one a plain INSERT takes, and on the primary key
		// a record lock, not a gap lock), waiting for a Tx or Put that
		// holds it to end, and then updates the row as last committed.
		// Either way the transaction keeps the lock to its end.
		//
		// MySQL runs the assignments of an UPDATE from left to right,
		// and each sees the columns assigned before it, unlike the
		// other dialects, where all see the row as it was: the fence is
		// assigned last, so that value and value_token are compared
		// with the fence as it was. The value and its token are written
		// when the token is not below the fence, and the fence becomes
		// the higher of the two.
		//
		// VALUES(column) is what the statement would have inserted:
		// the value is sent once, so that a value of almost
		// max_allowed_packet fits in the statement. (MySQL 8.0.20 and
		// later deprecate VALUES() here, with a warning, in favour of
		// a row alias that MariaDB does not have.)
		put: `INSERT INTO ` + t + ` (resource, fence, value, value_token) VALUES (?, ?, ?, ?)
ON DUPLICATE KEY UPDATE
	value = IF(fence <= VALUES(fence), VALUES(value), value),
	value_token = IF(fence <= VALUES(fence), VALUES(value_token), value_token),
	fence = GREATEST(fence, VALUES(fence))`,
		// Fence's first statement, and Tx's: it takes the row's lock as
		// put does, which the transaction then holds to its end, and
		// raises the fence to the token unless the fence is higher.
		raise: `INSERT INTO ` + t + ` (resource, fence) VALUES (?, ?)
ON DUPLICATE KEY UPDATE fence = GREATEST(fence, ?)`,
		// Run after put or raise in the same transaction: a locking
		// read, which reads the row as last committed together with
		// the transaction's own changes (not the snapshot of
		// REPEATABLE READ), and does not wait, the transaction holding
		// the row's lock already. So it reads the fence the upsert
		// left, and no other transaction can have changed it since.
		lock: `SELECT fence FROM ` + t + ` WHERE resource = ? FOR UPDATE`,
		// get and fence read the session's autocommit too, in a row of
		// their own when the resource has none: with autocommit off, a
		// plain read opens a transaction that stays open on the pooled
		// connection, and the next read on it sees that snapshot, not
		// the writes committed since (see Store.Get).
		get:        `SELECT f.value, f.value_token, @@autocommit FROM (SELECT 1) AS one LEFT JOIN ` + t + ` AS f ON f.resource = ?`,
		fence:      `SELECT f.fence, @@autocommit FROM (SELECT 1) AS one LEFT JOIN ` + t + ` AS f ON f.resource = ?`,
		autocommit: true,
		putArgs: func(resource string, token int64, value []byte) []any {
			return []any{resource, token, value, token}
		},
		raiseArgs: func(resource string, token int64) []any {
			return []any{resource, token, token}
		},
	}
}

// Why the upsert comes first: a transaction that read the row with
// SELECT ... FOR UPDATE first, and inserted it when it was missing,
// would take a gap lock on the missing row under REPEATABLE READ. Gap
// locks do not exclude each other, but they block inserts: two such
// transactions that both read a new resource before either inserted it
// would each wait for the other's gap lock to insert, a deadlock.
//
// A deadlock remains possible on a new resource: when the transaction
// that inserted its row rolls back while two or more others wait for
// that row's lock, each waiter is left with a gap lock where the row
// was (REPEATABLE READ), and their inserts wait for each other's. InnoDB
// ends it by rolling back one of them, whole, with error 1213. Its
// upsert being the first statement, that transaction had done nothing
// else, and Put, Fence and Tx begin it again (fn has not run), up to
// deadlockAttempts times.

// deadlockAttempts bounds how many times Put and Fence, and Tx before it
// calls fn, make their transaction in MySQL when InnoDB ends it as a
// deadlock victim (error 1213).
const deadlockAttempts = 10

// erDeadlock is the error number of a transaction that InnoDB rolled
// back to end a deadlock (ER_LOCK_DEADLOCK, SQLSTATE 40001).
const erDeadlock = 1213

// again reports whether a MySQL transaction of Put or Fence, or of Tx
// before fn, that failed with err after attempt attempts, is to be made
// again: err says InnoDB rolled it back to end a deadlock, and attempts
// and ctx are left.
func (s *Store) again(ctx context.Context, err error, attempt int) bool {
	return s.dialect == MySQL && attempt < deadlockAttempts && ctx.Err() == nil && mysqlErrorNumber(err) == erDeadlock
}

// victimErr is err, the error of the last of attempts transactions that
// InnoDB rolled back to end a deadlock, saying so.
func victimErr(err error, attempts int) error {
	if attempts < 2 || mysqlErrorNumber(err) != erDeadlock {
		return err
	}
	return fmt.Errorf("%w (a deadlock victim %d times in a row)", err, attempts)
}

// upsertMySQL is the database work of Put (op "put") and Fence ("fence")
// in MySQL: stmt, the upsert of put or raise with args, and the locking
// read of the fence it left, in a transaction, made again when InnoDB
// ends it as a deadlock victim. It returns the fence, or an error of
// dbErr.
func (s *Store) upsertMySQL(ctx context.Context, op, resource, stmt string, args []any) (int64, error) {
	for attempt := 1; ; attempt++ {
		fence, err := s.upsertMySQLOnce(ctx, op, resource, stmt, args)
		if err == nil || !s.again(ctx, err, attempt) {
			return fence, victimErr(err, attempt)
		}
	}
}

func (s *Store) upsertMySQLOnce(ctx context.Context, op, resource, stmt string, args []any) (fence int64, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, dbErr(ctx, op, resource, "begin: ", err)
	}
	done := false // Commit was called, which ends tx whatever it returns
	defer func() {
		if !done {
			// After a failed statement, or a deadlock that ended
			// the transaction already: database/sql discards a
			// connection whose ROLLBACK fails.
			tx.Rollback()
		}
	}()
	if _, err := tx.ExecContext(ctx, stmt, args...); err != nil {
		return 0, dbErr(ctx, op, resource, "", err)
	}
	if err := tx.QueryRowContext(ctx, s.q.lock, resource).Scan(&fence); err != nil {
		return 0, dbErr(ctx, op, resource, "reading the fence: ", err)
	}
	done = true
	if err := tx.Commit(); err != nil {
		return 0, dbErr(ctx, op, resource, "commit: ", err)
	}
	return fence, nil
}

// fitsMySQL checks what New needs of a MySQL table beyond its columns,
// which MySQL cannot check by planning the upsert (an INSERT ... ON
// DUPLICATE KEY UPDATE on a table without a unique key on resource plans,
// and runs, as a plain INSERT):
//
//   - the table is InnoDB's, whose transactions and row locks Put and
//     Tx rely on (MyISAM, say, has neither);
//   - resource is VARBINARY of at least MaxResourceLen bytes, so that
//     names are compared byte for byte and none is cut short (see
//     maxResourceBytes); fence and value_token are BIGINT, and value is
//     LONGBLOB, so that no token or value is cut to fit the column (as
//     MySQL does without strict SQL mode); fence is NOT NULL;
//   - a primary key or unique index has resource as its only column,
//     whole (an index on a prefix of it would make names that share the
//     prefix one row).
//
// It reads information_schema, which shows the tables of the database
// that the table name's schema part names, or of the connection's
// current database.
func (s *Store) fitsMySQL(ctx context.Context) error {
	schema, name, ok := strings.Cut(s.table, ".")
	var db any = schema // nil: the current database
	if !ok {
		db, name = nil, s.table
	}
	where := ` WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?`
	trouble := func(err error) error {
		return dbErr(ctx, "new", "", "checking table "+s.table+": ", err)
	}

	var engine sql.NullString
	if err := s.db.QueryRowContext(ctx, `SELECT ENGINE FROM information_schema.TABLES`+where, db, name).Scan(&engine); err != nil {
		return trouble(err)
	}
	if !strings.EqualFold(engine.String, "InnoDB") {
		return fmt.Errorf("sqlstore: table %s is not an InnoDB table (its engine: %q): Put and Tx need InnoDB's transactions and row locks", s.table, engine.String)
	}

	// MariaDB shows a column's default of NULL as 'NULL', MySQL as NULL.
	rows, err := s.db.QueryContext(ctx, `SELECT COLUMN_NAME, DATA_TYPE, COALESCE(CHARACTER_MAXIMUM_LENGTH, 0), IS_NULLABLE,
	COLUMN_DEFAULT IS NOT NULL AND UPPER(COLUMN_DEFAULT) <> 'NULL', COALESCE(GENERATION_EXPRESSION, '') <> ''
	FROM information_schema.COLUMNS`+where, db, name)
	if err != nil {
		return trouble(err)
	}
	types := make(map[string]string)
	nullable := make(map[string]bool)
	defaults := make(map[string]bool)
	var made string // the first generated column
	for rows.Next() {
		var column, dataType, null string
		var length int64
		var hasDefault, generated bool
		if err := rows.Scan(&column, &dataType, &length, &null, &hasDefault, &generated); err != nil {
			rows.Close()
			return trouble(err)
		}
		column, dataType = strings.ToLower(column), strings.ToLower(dataType)
		if column == "resource" && dataType == "varbinary" && length < maxResourceBytes {
			dataType = fmt.Sprintf("varbinary(%d)", length)
		}
		types[column] = dataType
		nullable[column] = strings.EqualFold(null, "YES")
		defaults[column] = hasDefault
		if generated && made == "" {
			made = column
		}
	}
	if err := rows.Err(); err != nil {
		return trouble(err)
	}
	if made != "" {
		return s.made(made, "a generated column")
	}
	for _, c := range []struct{ column, want, why string }{
		{"resource", "varbinary", fmt.Sprintf("VARBINARY(%d) or longer: names are compared byte for byte (a character type's collation may ignore case, accents or trailing spaces) and none is cut short", maxResourceBytes)},
		{"fence", "bigint", "BIGINT: tokens are 64-bit"},
		{"value_token", "bigint", "BIGINT: tokens are 64-bit"},
		{"value", "longblob", "LONGBLOB: no value is cut to fit"},
	} {
		if got := types[c.column]; got != c.want {
			return s.unfit(c.column, strings.ToUpper(got), c.why)
		}
	}
	if nullable["fence"] {
		return s.nullable("fence")
	}
	if err := s.valueless(column{notNull: !nullable["value"]}, column{notNull: !nullable["value_token"], hasDefault: defaults["value_token"]}); err != nil {
		return err
	}

	rows, err = s.db.QueryContext(ctx, `SELECT INDEX_NAME, COLUMN_NAME, SUB_PART FROM information_schema.STATISTICS`+where+` AND NON_UNIQUE = 0`, db, name)
	if err != nil {
		return trouble(err)
	}
	// The unique indexes' columns, "resource" alone for one that fits;
	// "*" marks a column indexed by a prefix.
	indexes := make(map[string]string)
	for rows.Next() {
		var index, column string
		var prefix sql.NullInt64
		if err := rows.Scan(&index, &column, &prefix); err != nil {
			rows.Close()
			return trouble(err)
		}
		column = strings.ToLower(column)
		if prefix.Valid {
			column += "*"
		}
		if indexes[index] != "" {
			column = indexes[index] + "," + column
		}
		indexes[index] = column
	}
	if err := rows.Err(); err != nil {
		return trouble(err)
	}
	for _, columns := range indexes {
		if columns == "resource" {
			return nil
		}
	}
	return fmt.Errorf("sqlstore: table %s has no primary key or unique constraint on resource alone (whole, not a prefix), which the INSERT ... ON DUPLICATE KEY UPDATE of Put and Tx needs", s.table)
}

// maxAllowedPacket reads the server's max_allowed_packet: the longest
// statement it takes, and the longest value it sends back.
func (s *Store) maxAllowedPacket(ctx context.Context) (int64, error) {
	var packet int64
	if err := s.db.QueryRowContext(ctx, `SELECT @@max_allowed_packet`).Scan(&packet); err != nil {
		return 0, dbErr(ctx, "new", "", "reading max_allowed_packet: ", err)
	}
	return packet, nil
}
