// Package sqlstore provides a [fencedlock.Store] in a SQL database, SQLite,
// PostgreSQL, or MySQL or MariaDB, through database/sql, and [Store.Tx],
// which fences the caller's own SQL writes: the check of the token and the
// writes commit in one transaction, or not at all.
//
// Put and Get keep a value per resource, like every fencedlock.Store. Tx
// goes further: when the data a lock protects lives in the same database,
// the holder writes it inside Tx, and a holder whose lock expired has its
// whole transaction refused, however long it paused, with no write of it
// ever made.
//
//	store, err := sqlstore.New(db, sqlstore.Postgres)
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
// The package uses only database/sql: the program imports the driver,
// e.g. modernc.org/sqlite or github.com/mattn/go-sqlite3 for [SQLite],
// github.com/lib/pq or github.com/jackc/pgx/v5/stdlib for [Postgres],
// github.com/go-sql-driver/mysql for [MySQL] (MySQL and MariaDB).
//
// # Schema
//
// A Store keeps one row per resource in one table, [DefaultTable] unless
// [WithTable] names another. New creates it when it is missing (BYTEA is
// BLOB in SQLite):
//
//	CREATE TABLE IF NOT EXISTS fencedlock_fences (
//		resource    TEXT NOT NULL PRIMARY KEY,
//		fence       BIGINT NOT NULL CHECK (fence > 0),
//		value       BYTEA,
//		value_token BIGINT CHECK (value_token > 0 AND value_token <= fence)
//	)
//
// and in MySQL, where the names are compared byte for byte (a character
// column's collation may ignore case, accents or trailing spaces, which
// would make distinct resources one row), the names' 1024 bytes fit an
// InnoDB key, and the value may be as large as the server takes
// (max_allowed_packet):
//
//	CREATE TABLE IF NOT EXISTS fencedlock_fences (
//		resource    VARBINARY(1024) NOT NULL PRIMARY KEY,
//		fence       BIGINT NOT NULL CHECK (fence > 0),
//		value       LONGBLOB,
//		value_token BIGINT,
//		CHECK (value_token > 0 AND value_token <= fence)
//	) ENGINE = InnoDB
//
// fence is the highest token that any accepted Put or committed Tx has
// used on the resource; every Put and Tx is checked against it with
// [fencedlock.CheckToken], and a refusal's [fencedlock.StaleTokenError]
// carries it as Current. value and value_token are what the last accepted
// Put wrote: Get returns them. Tx raises the fence and leaves the value
// alone, so after a Tx with a higher token Get still returns the older
// value and its token, while Put with a token below the new fence is
// refused; a resource that only Tx has used has a fence and no value, and
// Get reports [fencedlock.ErrNotFound] for it.
//
// The Store never deletes a row, and nothing else should: the row is
// where the fence lives. Deleting a resource's row forgets its fence, and
// the next Put or Tx on the resource is accepted with any token, lower
// ones included, so that a holder whose lock expired long ago can write
// again.
//
// New creates the table when it is missing, unless [WithCreateTable](false),
// and checks it: it must have these columns, and a primary key or unique
// constraint on resource alone, which the INSERT ... ON CONFLICT
// (resource) of Put and Tx needs (in MySQL, their INSERT ... ON DUPLICATE
// KEY UPDATE). In MySQL it checks besides, in information_schema, that
// the table is InnoDB's, that resource is VARBINARY(1024) or longer,
// fence and value_token BIGINT, value LONGBLOB (so that nothing is cut to
// fit, as MySQL does without strict SQL mode), and that the unique key
// holds resource whole, not a prefix of it.
//
// Tokens are stored as SQL BIGINT, which is signed: tokens above
// [MaxToken] (2^63-1) are refused with [fencedlock.ErrInvalidToken], in
// every dialect. Resource names are TEXT (VARBINARY in MySQL): names that
// are not valid UTF-8, hold a NUL byte or are longer than [MaxResourceLen]
// bytes are refused with [fencedlock.ErrInvalidArgument].
//
// # Atomicity and locking
//
// Put is one statement, an upsert that writes the value and its token
// only when the token is not below the fence, raises the fence to the
// token, and returns the fence it leaves:
//
//	INSERT INTO fencedlock_fences AS f (resource, fence, value, value_token)
//	VALUES ($1, $2, $3, $2)
//	ON CONFLICT (resource) DO UPDATE SET
//		value = CASE WHEN f.fence <= excluded.fence THEN excluded.value ELSE f.value END,
//		value_token = CASE WHEN f.fence <= excluded.fence THEN excluded.value_token ELSE f.value_token END,
//		fence = GREATEST(f.fence, excluded.fence)  -- max(...) in SQLite
//	RETURNING fence
//
// A returned fence above the token means the Put was refused, and the row
// is as it was. Get is one SELECT of value and value_token, so it never
// sees one without the other. MySQL has no RETURNING: there Put is a
// transaction of the upsert and a read of the fence under its lock (see
// below).
//
// Tx begins a transaction whose first statement is an upsert that raises
// the fence (INSERT ... ON CONFLICT (resource) DO UPDATE SET fence =
// GREATEST(f.fence, excluded.fence) RETURNING fence); when the fence it
// returns is above the token, Tx rolls back and returns the
// StaleTokenError without calling fn; otherwise it calls fn with the
// transaction and commits. The lock that upsert takes is held until the
// transaction ends, so Tx and Put calls on one resource take effect one at
// a time, in an order in which the tokens never go down:
//
//   - PostgreSQL: the upsert locks the resource's row (inserting it first
//     if need be), so a Tx or Put on the same resource waits until the
//     transaction ends and then sees the fence it committed; other
//     resources are not held up. This works under the default isolation
//     level, READ COMMITTED, where each statement of fn also sees the
//     writes earlier transactions on the resource committed. Under
//     REPEATABLE READ or SERIALIZABLE (default_transaction_isolation) a Tx
//     or a Put that waited for another Tx or Put on the resource fails
//     with a serialization error (SQLSTATE 40001, "could not serialize
//     access due to concurrent update") instead of meeting the fence the
//     other committed, without writing anything: retry it. The wait for
//     the lock ends when ctx does.
//   - SQLite: a database has one writer at a time. The upsert being the
//     transaction's first statement, the transaction takes the write lock
//     at once and keeps it to its end, so every Tx and Put on the database
//     waits for it, whatever its resource; readers do not, in WAL mode.
//     (A transaction that read first and wrote later could fail with
//     SQLITE_BUSY when another writer got in between, without waiting.)
//     Keep fn short.
//   - MySQL and MariaDB: the upsert (INSERT ... ON DUPLICATE KEY UPDATE)
//     locks the resource's row in InnoDB, as in PostgreSQL, and the
//     transaction then reads the fence under that lock; other resources
//     are not held up. This works under every isolation level, the
//     default REPEATABLE READ included: see the next section.
//
// # MySQL and MariaDB: what InnoDB guarantees
//
// In MySQL, Put is a transaction of two statements, and Tx begins with
// the same two (without value and value_token), then calls fn:
//
//	INSERT INTO fencedlock_fences (resource, fence, value, value_token) VALUES (?, ?, ?, ?)
//	ON DUPLICATE KEY UPDATE
//		value = IF(fence <= ?, ?, value),
//		value_token = IF(fence <= ?, ?, value_token),
//		fence = GREATEST(fence, ?)
//	SELECT fence FROM fencedlock_fences WHERE resource = ? FOR UPDATE
//
// (MySQL runs the assignments of an UPDATE in order, each seeing those
// before it: the fence is assigned last.) This relies on what InnoDB
// does, on MySQL 8.0 and later and MariaDB 10.6 and later:
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
//     whole (error 1213). The one that Put and Tx can meet on their own
//     is on a new resource: when the transaction that inserted its row
//     rolls back while two or more others wait for the row's lock, the
//     waiters are left with gap locks where the row was, and their
//     inserts wait for each other's. A victim had done nothing but the
//     upsert, so Put and Tx make their transaction again, up to 10 times
//     (the error then says how many), and fn is never called twice. A
//     deadlock in fn's own statements is fn's error, returned as it is.
//   - The wait for the lock ends for the caller when ctx does (the call
//     returns; go-sql-driver/mysql closes the connection), but the server
//     goes on waiting until it gets the lock or innodb_lock_wait_timeout
//     (50 s by default) passes; it then finds the connection closed and
//     rolls the transaction back, committing nothing. A wait that reaches
//     innodb_lock_wait_timeout fails with error 1205: retry.
//   - The table's CHECK constraints are enforced from MySQL 8.0.16 (and in
//     MariaDB); the Store never writes a row they would refuse.
//
// Put takes four statements (BEGIN, the upsert, the read, COMMIT), and
// go-sql-driver/mysql prepares each statement that has arguments on the
// server first, a round trip more, unless the DSN sets
// interpolateParams=true.
//
// # SQLite: busy timeout, WAL, and one database for all connections
//
// A connection that finds the write lock taken waits for it only when
// SQLite has a busy timeout; without one, a Tx or Put that meets another
// fails at once with SQLITE_BUSY ("database is locked"). Set one on every
// connection, in the DSN, and use WAL mode so that Get is not blocked by
// writers: with modernc.org/sqlite,
//
//	file:app.db?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)
//
// and with github.com/mattn/go-sqlite3, file:app.db?_busy_timeout=5000&_journal_mode=WAL.
// The wait for the write lock ends at the busy timeout, not when ctx
// ends: modernc.org/sqlite does not interrupt it. The call returns when
// ctx ends all the same (see below), and the connection stays busy in
// the background until the busy timeout.
//
// database/sql opens several connections to one DSN, and every
// connection to ":memory:" (or "file::memory:") opens a database of its
// own, which the other connections do not see and which is gone when that
// connection closes. Use a file, or an in-memory database that all the
// connections of the process share: with modernc.org/sqlite, the memdb
// VFS (the name starts with a slash),
//
//	file:/app?vfs=memdb&_pragma=busy_timeout(5000)
//
// It lives while a connection to it is open: keep one open as long as the
// data is needed (the pool closes its idle connections when
// db.SetMaxIdleConns(0), db.SetConnMaxLifetime or db.SetConnMaxIdleTime
// says so), e.g. a *sql.Conn taken from db. It has no WAL mode, and a
// write transaction keeps readers out: a Get waits for a Tx to end, within
// the busy timeout, and fn must not even read through db.
//
// A ":memory:" database with db.SetMaxOpenConns(1) works too, with fn
// using only tx (the one connection is busy with it), as long as that
// connection is never closed. Tx does not close it when ctx ends or the
// commit fails (it rolls back on it instead), but a connection that
// breaks, or that the pool retires, takes the database with it.
//
// # Unavailable databases and deadlines
//
// Every call that takes a ctx returns by ctx's deadline, whatever the
// driver does: lib/pq, for one, waits for a stalled server's answer long
// after ctx ended. When ctx can end, the call does its database work in a
// goroutine, and returns when ctx ends with an error wrapping
// [fencedlock.ErrUnavailable] and ctx.Err(); the work goes on in the
// background until the database answers or the connection closes, and a
// Put may still take effect then (its token is checked all the same). A
// Tx left behind is doomed: database/sql rolls back a transaction whose
// ctx has ended and refuses its commit.
//
// Errors that say the database could not be reached or the connection
// broke (net errors, driver.ErrBadConn, sql.ErrConnDone, io.EOF and
// io.ErrUnexpectedEOF, a SQLSTATE of class 08, 57P01-57P03 or 53300 from
// a driver error with a SQLState() string method, as lib/pq's and pgx's
// have, and in MySQL the errors below) wrap ErrUnavailable with the cause
// too, so that a caller handles "the backend is down" alike for every
// store. Errors about the data (a stale token, a missing resource,
// invalid input, a constraint) and the errors fn returns never match it.
// SQLite's own errors (SQLITE_BUSY at the busy timeout, a file that
// cannot be opened) are wrapped as they are.
//
// In MySQL, these server errors are ErrUnavailable: 1040 too many
// connections, 1053 shutdown in progress (MySQL sends it too when KILL
// ends a connection), 1927 connection killed (MariaDB's), 3169 session
// killed, 1152 and 1158-1161 the server's network errors, 1203 and 1226
// connection and query limits of an account, 3032 offline mode, 4031 an
// idle connection closed by the server, and the C client library's 2002,
// 2003, 2006, 2013 and 2055; and so is go-sql-driver/mysql's
// ErrInvalidConn ("invalid connection"), its error when the connection
// breaks mid-answer. The Store reads the error number from the Number
// field of that driver's *mysql.MySQLError (by reflection: the package
// does not import the driver). Other MySQL errors, among them 1205 (lock
// wait timeout: a long transaction holds the row) and 1213 (deadlock,
// when Put and Tx cannot try again), are wrapped as they are, as the
// other dialects' errors about the work are.
//
// # Writing in Tx
//
// fn does all its work through tx, with ctx (tx.ExecContext and
// tx.QueryContext), and neither commits nor rolls back tx. It must not call
// Put or Tx, nor write through the *sql.DB: the lock its own transaction
// holds would make that wait, in SQLite (any write) until the busy timeout,
// in PostgreSQL and MySQL (a Put or Tx on the same resource) until ctx
// ends. If fn
// returns an error or panics, everything it wrote is rolled back, and so
// is the raise of the fence.
package sqlstore
