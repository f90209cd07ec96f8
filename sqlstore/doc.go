// Package sqlstore provides a [fencedlock.Store] in a SQL database, SQLite,
// PostgreSQL, or MySQL or MariaDB, through database/sql, and [Store.Tx],
// which fences the caller's own SQL writes: the check of the token and the
// writes commit in one transaction, or not at all.
//
// Put, Get and Fence keep a value and a fence per resource, like every
// fencedlock.Store. Tx goes further: when the data a lock protects lives
// in the same database, the holder writes it inside Tx, and a holder whose
// lock expired has its whole transaction refused, however long it paused,
// with no write of it ever made.
//
// # Usage
//
//	store, err := sqlstore.New(db, sqlstore.Postgres) // creates the table if missing
//	...
//	err = store.Tx(ctx, "account/42", lock.Token(), func(tx *sql.Tx) error {
//		_, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = balance - $1 WHERE id = 42`, amount)
//		return err
//	})
//	if errors.Is(err, fencedlock.ErrStaleToken) {
//		// The lock was lost and a newer holder has been here: acquire
//		// again, re-read, redo.
//	}
//
// A holder that keeps its data in the Store's values, and reads a value
// to write it back, fences the read: [fencedlock.Update] raises the fence
// to the token with [Store.Fence], reads with [Store.Get], and puts what
// fn makes of the value with the same token:
//
//	err = fencedlock.Update(ctx, store, "queue/7", lock.Token(), func(v []byte, found bool) ([]byte, error) {
//		return append(v, ",1003"...), nil
//	})
//
// With a plain Get instead, a holder whose lock expired could write
// between the read and the write, be told its write was accepted, and
// then have it overwritten by the newer holder's: a lost update. After
// the Fence, its write is refused. Update's Fence commits at once and
// holds no lock: a holder with a higher token may still write between
// the read and the write, and then Update's Put is refused (the lock was
// lost).
//
// Tx needs no Fence: its first statement raises the fence and takes the
// resource's lock, which it holds to its end, so everything fn reads is
// fenced, and a Tx is a fenced read-modify-write in SQL. A Put, Fence or
// Tx on the resource with a lower token waits for the Tx to end, and is
// refused when the Tx has committed. Fence and Update are for the values
// that Put writes.
//
// The package uses only database/sql: the program imports the driver,
// e.g. modernc.org/sqlite or github.com/mattn/go-sqlite3 for [SQLite],
// github.com/lib/pq or github.com/jackc/pgx/v5/stdlib for [Postgres],
// github.com/go-sql-driver/mysql for [MySQL] (MySQL and MariaDB). On
// SQLite, set a busy timeout on the connections (for instance
// _pragma=busy_timeout(5000) with modernc.org/sqlite), so that a write
// waits for another rather than failing at once, and use WAL. On MySQL,
// keep autocommit on (the default): with it off, a plain read leaves a
// transaction open on its pooled connection, whose snapshot a later read
// would see, so [Store.Get] and [Store.CurrentFence] refuse such a
// session with an error wrapping [fencedlock.ErrInvalidArgument].
//
// https://github.com/fencedlock/fencedlock/blob/main/docs/stores.md gives
// the token rule that every store applies, and
// https://github.com/fencedlock/fencedlock/blob/main/docs/benchmarks.md
// measures Put and Tx.
//
// # Writing in Tx
//
// fn does all its work through tx, with ctx (tx.ExecContext and
// tx.QueryContext), and neither commits nor rolls back tx. It must not
// call Put, Fence or Tx, nor write through the *sql.DB: the lock its own
// transaction holds would make that wait, in SQLite (any write) until the
// busy timeout, in PostgreSQL and MySQL (a Put, Fence or Tx on the same
// resource) until ctx ends. If fn returns an error or panics, everything
// it wrote is rolled back, and so is the raise of the fence.
//
// Tx, Put and Fence calls on one resource take effect one at a time, in
// an order in which the tokens never go down: the transaction's first
// statement raises the fence and takes a lock that it keeps to its end.
// In PostgreSQL and MySQL that is the resource's row lock, so other
// resources are not held up; in SQLite it is the database's write lock,
// so every Tx, Put and Fence on the database waits for it: keep fn short.
// fn sees what the Tx and Put calls before it on the resource committed: in
// PostgreSQL under the default isolation level, READ COMMITTED (under
// REPEATABLE READ or SERIALIZABLE, a Tx that waited for another fails
// instead, see Errors), and in MySQL under every level.
//
// # Errors
//
//   - [fencedlock.ErrStaleToken], as a [*fencedlock.StaleTokenError]
//     whose Current is the fence: a newer holder has written, so the lock
//     was lost. Nothing was written (Tx did not call fn), and the fence
//     was not raised. Acquire again, read again, redo.
//   - [fencedlock.ErrUnavailable]: the database could not be reached, the
//     connection broke, it took no writes (a standby or read-only
//     replica, as during a failover), or ctx ended while the database
//     worked. A Put may
//     or may not have happened, or may still happen; a Fence may or may
//     not have raised the fence; a Tx committed nothing. The fence check
//     holds all the same. Retry later.
//   - [ErrCommitUnknown]: a Tx sent its COMMIT, and the connection broke
//     or ctx ended before the answer came. The transaction may have been
//     committed, whole, or not at all. Read what fn writes to learn which
//     before doing the work again.
//   - The cause with which ctx ended, when it ended with one
//     ([context.Cause] is not just ctx.Err(); Locker.Do cancels its
//     function's context with one matching [fencedlock.ErrLockLost]): the
//     error of a call it stopped, or that began after it, wraps the cause
//     and ctx.Err(), and not ErrUnavailable: the caller stopped the call,
//     the database did not fail. What was done is as after
//     ErrUnavailable (or ErrCommitUnknown, from a Tx whose COMMIT was on
//     its way). Act on the cause.
//   - [fencedlock.ErrInvalidToken]: a zero token, or one above [MaxToken].
//   - [fencedlock.ErrInvalidArgument]: a bad resource name (empty, longer
//     than [MaxResourceLen], not valid UTF-8 or holding a NUL byte), a
//     value longer than the database takes ([Store.MaxValueLen]), a nil
//     fn, or a bad database, dialect or option in New. Nothing was sent.
//   - [fencedlock.ErrNotFound]: Get on a resource without a value (one
//     that only Fence or Tx has used, too), CurrentFence on one without a
//     fence.
//   - fn's own error, returned as it is, after the rollback.
//   - Other database errors are wrapped as they are. Retry these: in
//     PostgreSQL under REPEATABLE READ or SERIALIZABLE, a serialization
//     failure (SQLSTATE 40001) of a Tx, Put or Fence that waited for
//     another on its resource, which wrote nothing; in MySQL, a lock wait
//     timeout (1205), and a deadlock (1213) in fn, or one that ended all
//     10 attempts of the transaction of Put, Fence or Tx (the first and 9
//     more).
//
// Besides network errors, driver.ErrBadConn, sql.ErrConnDone, io.EOF and
// io.ErrUnexpectedEOF, these database errors count as ErrUnavailable: a
// SQLSTATE of class 08, 57P01-57P03, 53300 or 25006 (a read-only
// transaction: a standby, as during a failover) (from a driver error with
// a SQLState() string method, as lib/pq's and pgx's have); in MySQL, the
// server errors 1040, 1053, 1152, 1158-1161, 1203, 1226, 1290 and 1836
// (read-only: a replica), 1927, 3032, 3169 and 4031, the client errors
// 2002, 2003, 2006, 2013 and 2055, and go-sql-driver/mysql's
// ErrInvalidConn. SQLite's own errors (SQLITE_BUSY
// at the busy timeout, a file that cannot be opened) are wrapped as they
// are. See https://github.com/fencedlock/fencedlock/blob/main/docs/errors.md
// for the errors of the whole library.
//
// Every call that takes a ctx returns by ctx's deadline, whatever the
// driver does; the work it leaves behind ends when the database answers or
// the connection closes.
//
// # Schema
//
// A Store keeps one row per resource in one table, [DefaultTable] unless
// [WithTable] names another. New creates it when it is missing, unless
// [WithCreateTable](false) (BYTEA is BLOB in SQLite):
//
//	CREATE TABLE IF NOT EXISTS fencedlock_fences (
//		resource    TEXT NOT NULL PRIMARY KEY,
//		fence       BIGINT NOT NULL CHECK (fence > 0),
//		value       BYTEA,
//		value_token BIGINT CHECK (value_token > 0 AND value_token <= fence)
//	)
//
// and in MySQL, where names must compare byte for byte and values may be
// as large as the server takes (max_allowed_packet, see
// [Store.MaxValueLen]):
//
//	CREATE TABLE IF NOT EXISTS fencedlock_fences (
//		resource    VARBINARY(1024) NOT NULL PRIMARY KEY,
//		fence       BIGINT NOT NULL CHECK (fence > 0),
//		value       LONGBLOB,
//		value_token BIGINT,
//		CHECK (value_token > 0 AND value_token <= fence)
//	) ENGINE = InnoDB
//
// New checks a table made otherwise, and refuses one it cannot trust
// with an error that names the column and the type the Store needs: on a
// table whose token columns held text, tokens would compare as text,
// "10" below "9", and the Store would accept stale writes and lose
// acknowledged ones. The table must have these columns, fence NOT NULL,
// value and value_token taking NULL (a row that Fence makes has a fence
// and no value yet), value_token with no default, none of them generated
// (in SQLite, none but resource in the primary key either, where an
// INTEGER PRIMARY KEY is the rowid, which SQLite fills in), and a primary
// key or unique constraint on resource alone; and
//
//   - in PostgreSQL, fence and value_token bigint, value bytea, and
//     resource text, or varchar of at least 1024 characters, with a
//     deterministic collation (as the default is), in the column and in
//     its unique indexes. Domains are refused, as any other type;
//   - in SQLite, by the affinity of the declared types: INTEGER for
//     fence and value_token (a type holding INT, such as BIGINT or
//     INTEGER), TEXT for resource (TEXT, VARCHAR), BLOB for value (BLOB);
//     resource compared with the BINARY collation, the default, in the
//     column and in its unique indexes (NOCASE and RTRIM take distinct
//     names for one). A column of no declared type, BLOB affinity, keeps
//     what it is given as it is, and ANY in a STRICT table as well: both
//     are refused as token columns. STRICT tables of INTEGER, TEXT and
//     BLOB columns fit;
//   - in MySQL, the InnoDB engine, resource VARBINARY(1024) or longer and
//     held whole by the unique key, fence and value_token BIGINT (signed
//     or not), and value LONGBLOB.
//
// The CHECK constraints are not required: the Store never writes a row
// they would refuse, and they guard the table only against other
// writers. A table in another schema (schema.table, see [WithTable]) is
// checked there.
//
// fence is the highest token that any accepted Put or Fence or committed
// Tx has used on the resource (CurrentFence reads it); value and
// value_token are what the last accepted Put wrote, which Get returns.
// Fence and Tx raise the fence and leave the value alone, so after a
// Fence or a Tx with a higher token Get still returns the older value and
// its token, while a Put with a token below the new fence is refused; a
// resource that only Fence or Tx has used has a fence and no value.
//
// Never delete a row: the row is where the fence lives. Deleting it
// forgets the fence, and the next Put, Fence or Tx on the resource is
// accepted with any token, so that a holder whose lock expired long ago
// can write again.
//
// # SQL
//
// In SQLite and PostgreSQL, Put is one statement, which writes the value
// only when the token is not below the fence and returns the fence it
// leaves (a fence above the token means the Put was refused):
//
//	INSERT INTO fencedlock_fences AS f (resource, fence, value, value_token)
//	VALUES ($1, $2, $3, $2)
//	ON CONFLICT (resource) DO UPDATE SET
//		value = CASE WHEN f.fence <= excluded.fence THEN excluded.value ELSE f.value END,
//		value_token = CASE WHEN f.fence <= excluded.fence THEN excluded.value_token ELSE f.value_token END,
//		fence = GREATEST(f.fence, excluded.fence)  -- max(...) in SQLite
//	RETURNING fence
//
// MySQL has no RETURNING: there Put is a transaction of two statements,
// the upsert and a read of the fence under the row lock it took:
//
//	INSERT INTO fencedlock_fences (resource, fence, value, value_token) VALUES (?, ?, ?, ?)
//	ON DUPLICATE KEY UPDATE
//		value = IF(fence <= VALUES(fence), VALUES(value), value),
//		value_token = IF(fence <= VALUES(fence), VALUES(value_token), value_token),
//		fence = GREATEST(fence, VALUES(fence))
//	SELECT fence FROM fencedlock_fences WHERE resource = ? FOR UPDATE
//
// (MySQL runs the assignments of an UPDATE in order, each seeing those
// before it: the fence is assigned last. VALUES(column) is the value the
// INSERT would have written, so that the statement carries the value
// once; MySQL 8.0.20 and later deprecate it, with a warning.)
//
// Fence is the same statement without value and value_token, which
// raises the fence and returns it (a fence above the token means the
// Fence was refused):
//
//	INSERT INTO fencedlock_fences AS f (resource, fence) VALUES ($1, $2)
//	ON CONFLICT (resource) DO UPDATE SET fence = GREATEST(f.fence, excluded.fence)  -- max(...) in SQLite
//	RETURNING fence
//
// and in MySQL a transaction of two statements, as Put:
//
//	INSERT INTO fencedlock_fences (resource, fence) VALUES (?, ?)
//	ON DUPLICATE KEY UPDATE fence = GREATEST(fence, ?)
//	SELECT fence FROM fencedlock_fences WHERE resource = ? FOR UPDATE
//
// Tx begins its transaction with Fence's statements, and calls fn only
// when the fence they return is not above the token. Get is one SELECT of
// value and value_token, CurrentFence one SELECT of fence.
//
// # SQLite
//
// A connection that finds the write lock taken waits for it only when
// SQLite has a busy timeout; without one, a Tx, Put or Fence that meets
// another fails at once with SQLITE_BUSY ("database is locked"). Set one
// on every connection, in the DSN, and use WAL mode so that Get is not
// blocked by writers: with modernc.org/sqlite,
//
//	file:app.db?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)
//
// and with github.com/mattn/go-sqlite3, file:app.db?_busy_timeout=5000&_journal_mode=WAL.
// The wait for the write lock ends at the busy timeout, not when ctx
// ends: the call returns when ctx ends all the same, and the connection
// stays busy in the background until the busy timeout.
//
// Every connection to ":memory:" opens a database of its own, which the
// pool's other connections do not see. Use a file, or an in-memory
// database that all the connections of the process share: with
// modernc.org/sqlite, the memdb VFS (the name starts with a slash),
//
//	file:/app?vfs=memdb&_pragma=busy_timeout(5000)
//
// It lives while a connection to it is open: keep one open as long as
// the data is needed (a *sql.Conn taken from db, say, since the pool
// closes idle connections when its settings say so). It has no WAL mode,
// and a write transaction keeps readers out: a Get waits for a Tx to end,
// within the busy timeout, and fn must not even read through db. A
// ":memory:" database with db.SetMaxOpenConns(1) works too, with fn using
// only tx, as long as that one connection is never closed: Tx does not
// close it when ctx ends or the commit fails, but a connection that
// breaks, or that the pool retires, takes the database with it.
package sqlstore
