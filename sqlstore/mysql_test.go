package sqlstore_test

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/mysqltest"
	"github.com/fencedlock/fencedlock/sqlstore"
)

// innodbStatus returns a number of InnoDB's global status, e.g.
// Innodb_deadlocks, how many deadlocks it has broken since the server
// started.
func innodbStatus(t *testing.T, b *backend, name string) int64 {
	t.Helper()
	var n int64
	if err := b.db.QueryRow(`SHOW GLOBAL STATUS LIKE '`+name+`'`).Scan(&name, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitLockWaits waits until n more statements than before wait for a
// row lock in InnoDB, before being the number when the test began to
// wait. (information_schema.INNODB_TRX does not list them all in
// MariaDB: a transaction that has written nothing yet may be missing.)
func waitLockWaits(t *testing.T, b *backend, before, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		waiting := innodbStatus(t, b, "Innodb_row_lock_current_waits") - before
		if waiting == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d statements wait for a row lock after 10s; want %d", waiting, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// When the Tx that inserted a new resource's row rolls back while other
// calls on the resource wait for its lock, the waiters are left with gap
// locks where the row was, and their inserts wait for each other's:
// InnoDB breaks the deadlock by rolling back one of them (error 1213).
// Put, Fence and Tx begin such a transaction again: the caller sees every
// call accepted in turn (or refused as stale), and fn runs once per Tx.
// The waiters are two Puts and two Tx calls, or four Fence calls, so
// that a deadlock there can only have had a Fence for its victim.
func TestMySQLDeadlockVictimTriedAgain(t *testing.T) {
	for _, w := range []struct {
		name  string
		kinds [4]callKind // of the waiters, with tokens 6 to 9
	}{
		{"Put and Tx", [4]callKind{callPut, callTx, callPut, callTx}},
		{"Fence", [4]callKind{callFence, callFence, callFence, callFence}},
	} {
		w := w
		t.Run(w.name, func(t *testing.T) { testDeadlockVictimTriedAgain(t, w.kinds) })
	}
}

func testDeadlockVictimTriedAgain(t *testing.T, kinds [4]callKind) {
	e := newTxEnv(t, mysqlBackend(t))
	before := innodbStatus(t, e.backend, "Innodb_deadlocks")
	rollback := errors.New("rolled back by fn")
	for round := 0; round < 5; round++ {
		r := "new-" + strconv.Itoa(round)
		free, held := e.holdFence(t, r, 5, rollback)
		waits := innodbStatus(t, e.backend, "Innodb_row_lock_current_waits")
		type result struct {
			call string
			kind callKind
			runs int
			err  error
		}
		results := make(chan result, len(kinds))
		for i, kind := range kinds {
			token, kind := fencedlock.Token(6+i), kind
			go func() {
				res := result{call: fmt.Sprintf("%s(%d)", kind, token), kind: kind}
				switch kind {
				case callPut:
					res.err = e.s.Put(e.ctx, r, token, []byte(fmt.Sprint(token)))
				case callFence:
					res.err = e.s.Fence(e.ctx, r, token)
				default:
					res.err = e.s.Tx(e.ctx, r, token, func(tx *sql.Tx) error {
						res.runs++
						return e.insert(tx, r, token, fmt.Sprint(token))
					})
				}
				results <- res
			}()
		}
		waitLockWaits(t, e.backend, waits, int64(len(kinds)))
		free()
		if err := <-held; !errors.Is(err, rollback) {
			t.Fatalf("Tx(%q, 5) = %v; want fn's error", r, err)
		}
		for range kinds {
			res := <-results
			var se *fencedlock.StaleTokenError
			switch {
			case errors.As(res.err, &se):
				// A lower token after a higher one: refused, fn not run.
				if res.runs != 0 {
					t.Errorf("%s on %q was refused after fn ran %d times", res.call, r, res.runs)
				}
			case res.err != nil:
				t.Errorf("%s on %q = %v; want it accepted, or refused as stale", res.call, r, res.err)
			case res.kind == callTx && res.runs != 1:
				t.Errorf("%s on %q was accepted, fn ran %d times; want once", res.call, r, res.runs)
			}
		}
		e.expectFence(r, 9)
	}
	deadlocks := innodbStatus(t, e.backend, "Innodb_deadlocks") - before
	t.Logf("InnoDB broke %d deadlocks in 5 rounds", deadlocks)
	if deadlocks == 0 {
		t.Error("InnoDB broke no deadlock: the test did not make the one it is about")
	}
	e.expectIdle()
}

// A Tx made again after a deadlock returns fn's error as it is, even one
// that says "deadlock": four Tx calls wait for the one that inserted a
// new resource's row, which rolls back; InnoDB ends the waiters'
// deadlock, the victims begin again, and each fn runs once and returns
// an error of its own, which Tx returns itself.
func TestMySQLDeadlockVictimReturnsFnError(t *testing.T) {
	e := newTxEnv(t, mysqlBackend(t))
	before := innodbStatus(t, e.backend, "Innodb_deadlocks")
	free, held := e.holdFence(t, "new", 5, errors.New("rolled back by fn"))
	waits := innodbStatus(t, e.backend, "Innodb_row_lock_current_waits")
	type result struct {
		fnErr, err error
		runs       int
	}
	results := make(chan result, 4)
	for token := fencedlock.Token(6); token <= 9; token++ {
		token := token
		go func() {
			fnErr := &mysql.MySQLError{Number: 1213, Message: fmt.Sprintf("fn of Tx(%d)", token)}
			runs := 0
			err := e.s.Tx(e.ctx, "new", token, func(*sql.Tx) error {
				runs++
				return fnErr
			})
			results <- result{fnErr: fnErr, err: err, runs: runs}
		}()
	}
	waitLockWaits(t, e.backend, waits, 4)
	free()
	<-held
	for i := 0; i < 4; i++ {
		r := <-results
		if r.err != error(r.fnErr) || r.runs != 1 {
			t.Errorf("Tx = %v, fn ran %d times; want fn's error (%v) as it is, fn run once", r.err, r.runs, r.fnErr)
		}
	}
	if n := innodbStatus(t, e.backend, "Innodb_deadlocks") - before; n == 0 {
		t.Error("InnoDB broke no deadlock: the test did not make the one it is about")
	}
	e.expectFence("new", 0)
	e.expectIdle()
}

// A deadlock in fn's own statements is fn's error: Tx returns it as it
// is, and does not run fn again.
func TestMySQLDeadlockInFnNotTriedAgain(t *testing.T) {
	e := newTxEnv(t, mysqlBackend(t))
	deadlock := &mysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock; try restarting transaction"}
	runs := 0
	err := e.s.Tx(e.ctx, "r", 5, func(tx *sql.Tx) error {
		runs++
		if err := e.insert(tx, "r", 5, "five"); err != nil {
			return err
		}
		return deadlock
	})
	if err != error(deadlock) || runs != 1 {
		t.Errorf("Tx whose fn returned a deadlock error = %v, fn ran %d times; want fn's error as it is, fn run once", err, runs)
	}
	e.expectNotes("r", "")
	e.expectFence("r", 0)
	e.expectIdle()
}

// The concurrency tests hold at every isolation level: the upsert's
// lock orders the calls on a resource, and fn's reads, taken after it,
// see what the calls before it committed. The level is the session's,
// set for every connection in the DSN; TestTxConcurrent runs at the
// server's default, REPEATABLE READ.
func TestMySQLIsolationLevels(t *testing.T) {
	if level := isolation(t, mysqlBackend(t).db); level != "REPEATABLE-READ" {
		t.Errorf("the server's default isolation level is %s; want REPEATABLE-READ, under which TestTxConcurrent runs", level)
	}
	for _, level := range []string{"READ-UNCOMMITTED", "READ-COMMITTED", "REPEATABLE-READ", "SERIALIZABLE"} {
		level := level
		t.Run(level, func(t *testing.T) {
			cfg, err := mysql.ParseDSN(mysqltest.Shared(t).DSN(""))
			if err != nil {
				t.Fatal(err)
			}
			cfg.Params = map[string]string{"tx_isolation": "'" + level + "'"} // SET on every connection
			b := &backend{dialect: sqlstore.MySQL, db: openMySQL(t, cfg.FormatDSN())}
			if got := isolation(t, b.db); got != level {
				t.Fatalf("the session's isolation level is %s; want %s", got, level)
			}
			t.Run("Tx", func(t *testing.T) { runConcurrent(t, b, callMix{}) })
			t.Run("Tx and Put", func(t *testing.T) { runConcurrent(t, b, callMix{put: 3}) })
			t.Run("Tx, Put and Fence", func(t *testing.T) { runConcurrent(t, b, callMix{put: 3, fence: 2}) })
		})
	}
}

// isolation returns the isolation level of db's sessions, as MariaDB
// names it (tx_isolation; MySQL 8 calls it transaction_isolation).
func isolation(t *testing.T, db *sql.DB) string {
	t.Helper()
	var level string
	if err := db.QueryRow(`SELECT @@tx_isolation`).Scan(&level); err != nil {
		t.Fatal(err)
	}
	return level
}

// New checks what MySQL cannot check by planning the upsert: the table's
// engine, the types of its columns, and a unique index of resource alone,
// whole. A table that fails one is refused with a message that says why,
// and one that passes works.
func TestMySQLNewChecksTable(t *testing.T) {
	b := mysqlBackend(t)
	ctx := testCtx(t)
	const (
		resource = "resource VARBINARY(1024) NOT NULL"
		fence    = "fence BIGINT NOT NULL"
		value    = "value LONGBLOB"
		token    = "value_token BIGINT"
	)
	for _, c := range []struct {
		name, columns, options, want string // want "" for a table that fits
	}{
		{"as New creates it", strings.Join([]string{resource + " PRIMARY KEY", fence, value, token}, ", "), "", ""},
		{"unique index, no primary key", strings.Join([]string{resource + " UNIQUE", fence, value, token}, ", "), "", ""},
		{"longer and unsigned", "resource VARBINARY(3000) NOT NULL PRIMARY KEY, fence BIGINT UNSIGNED NOT NULL, value LONGBLOB, value_token BIGINT UNSIGNED", "", ""},
		// (MyISAM keys hold at most 1000 bytes.)
		{"MyISAM", strings.Join([]string{"resource VARBINARY(1000) NOT NULL PRIMARY KEY", fence, value, token}, ", "), "ENGINE = MyISAM", `not an InnoDB table (its engine: "MyISAM")`},
		{"character resource", strings.Join([]string{"resource VARCHAR(255) NOT NULL PRIMARY KEY", fence, value, token}, ", "), "", "column resource is VARCHAR; the Store needs VARBINARY(1024) or longer"},
		{"short resource", strings.Join([]string{"resource VARBINARY(100) NOT NULL PRIMARY KEY", fence, value, token}, ", "), "", "column resource is VARBINARY(100); the Store needs VARBINARY(1024)"},
		{"int fence", strings.Join([]string{resource + " PRIMARY KEY", "fence INT NOT NULL", value, token}, ", "), "", "column fence is INT; the Store needs BIGINT"},
		{"int value_token", strings.Join([]string{resource + " PRIMARY KEY", fence, value, "value_token INT"}, ", "), "", "column value_token is INT"},
		{"blob value", strings.Join([]string{resource + " PRIMARY KEY", fence, "value BLOB", token}, ", "), "", "column value is BLOB; the Store needs LONGBLOB"},
		{"nullable fence", strings.Join([]string{resource + " PRIMARY KEY", "fence BIGINT", value, token}, ", "), "", "column fence may be NULL; the Store needs it NOT NULL"},
		{"value_token not null", strings.Join([]string{resource + " PRIMARY KEY", fence, value, "value_token BIGINT NOT NULL"}, ", "), "", "column value_token is NOT NULL"},
		{"value not null", strings.Join([]string{resource + " PRIMARY KEY", fence, "value LONGBLOB NOT NULL", token}, ", "), "", "column value is NOT NULL"},
		{"value_token default", strings.Join([]string{resource + " PRIMARY KEY", fence, value, "value_token BIGINT DEFAULT 0"}, ", "), "", "column value_token has a default"},
		{"value_token default null", strings.Join([]string{resource + " PRIMARY KEY", fence, value, "value_token BIGINT DEFAULT NULL"}, ", "), "", ""},
		{"generated value_token", strings.Join([]string{resource + " PRIMARY KEY", fence, value, "value_token BIGINT AS (fence) STORED"}, ", "), "", "column value_token is a generated column"},
		{"virtual value_token", strings.Join([]string{resource + " PRIMARY KEY", fence, value, "value_token BIGINT AS (fence) VIRTUAL"}, ", "), "", "column value_token is a generated column"},
		{"prefix key", strings.Join([]string{resource, fence, value, token, "PRIMARY KEY (resource(16))"}, ", "), "", "no primary key or unique constraint on resource alone (whole, not a prefix)"},
		{"key of two columns", strings.Join([]string{resource, fence, value, token, "PRIMARY KEY (resource, fence)"}, ", "), "", "no primary key or unique constraint on resource alone"},
		{"no key", strings.Join([]string{resource, fence, value, token, "KEY (resource)"}, ", "), "", "no primary key or unique constraint on resource alone"},
	} {
		c := c
		t.Run(c.name, func(t *testing.T) {
			table := b.name(t, "checked")
			b.exec(t, `CREATE TABLE `+table+` (`+c.columns+`) `+c.options)
			for _, create := range []bool{false, true} {
				s, err := sqlstore.NewContext(ctx, b.db, sqlstore.MySQL, sqlstore.WithTable(table), sqlstore.WithCreateTable(create))
				if c.want == "" {
					if err != nil {
						t.Fatalf("New(WithCreateTable(%v)) = %v; want the table to fit", create, err)
					}
					if err := s.Put(ctx, "r", 3, []byte("v")); err != nil {
						t.Fatal(err)
					}
					if v, tok, err := s.Get(ctx, "r"); err != nil || string(v) != "v" || tok != 3 {
						t.Fatalf("Get = (%q, %d, %v); want (\"v\", 3, nil)", v, tok, err)
					}
					continue
				}
				if err == nil || errors.Is(err, fencedlock.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), table) {
					t.Errorf("New(WithCreateTable(%v)) = %v; want an error naming the table and saying %q", create, err, c.want)
				}
			}
			if c.want != "" {
				if n := b.count(t, `SELECT count(*) FROM `+table); n != 0 {
					t.Errorf("New left %d rows in a table it refused", n)
				}
			}
		})
	}
}

// A statement whose connection KILL ends (a server restarting, an
// administrator) gives an error wrapping ErrUnavailable and the server's
// error: MariaDB's 1927 ER_CONNECTION_KILLED (MySQL's is 1053) or, when
// the driver meets the closed connection first, its "invalid
// connection".
func TestMySQLKilledConnection(t *testing.T) {
	e := newTxEnv(t, mysqlBackend(t))
	e.mustTx("r", 5, "five")
	free, held := e.holdFence(t, "r", 6, nil)
	waits := innodbStatus(t, e.backend, "Innodb_row_lock_current_waits")
	put := make(chan error, 1)
	go func() { put <- e.s.Put(e.ctx, "r", 7, []byte("seven")) }()
	waitLockWaits(t, e.backend, waits, 1)
	var id int64
	if err := e.db.QueryRowContext(e.ctx, `SELECT ID FROM information_schema.PROCESSLIST WHERE INFO LIKE 'INSERT INTO %value_token%'`).Scan(&id); err != nil {
		t.Fatalf("finding the waiting Put's connection: %v", err)
	}
	e.exec(t, `KILL `+strconv.FormatInt(id, 10))
	err := <-put
	t.Logf("Put whose connection was killed: %v", err)
	var myErr *mysql.MySQLError
	switch {
	case !errors.Is(err, fencedlock.ErrUnavailable):
		t.Errorf("Put whose connection was killed = %v; want an error wrapping ErrUnavailable", err)
	case errors.As(err, &myErr) && myErr.Number != 1927 && myErr.Number != 1053:
		t.Errorf("Put whose connection was killed = %v; want MariaDB's error 1927 or MySQL's 1053", err)
	case !errors.As(err, &myErr) && !errors.Is(err, mysql.ErrInvalidConn):
		t.Errorf("Put whose connection was killed = %v; want the server's error or mysql.ErrInvalidConn", err)
	}
	free()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	e.expectFence("r", 6)
	e.expectIdle()
}

// A server that refuses the connection with "too many connections" (a
// server of the test's own that greets every client with error 1040)
// gives errors wrapping ErrUnavailable and the server's error.
func TestMySQLTooManyConnections(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { l.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			// An error packet: length, sequence number 0, 0xff, the
			// error number (little-endian), '#', the SQLSTATE, the
			// message.
			payload := append([]byte{0xff, 0x10, 0x04, '#'}, "08004Too many connections"...)
			c.Write(append([]byte{byte(len(payload)), 0, 0, 0}, payload...))
			c.Close()
		}
	}()
	ctx := testCtx(t)
	check := func(what string, err error) {
		t.Helper()
		t.Logf("%s: %v", what, err)
		var myErr *mysql.MySQLError
		if !errors.Is(err, fencedlock.ErrUnavailable) || !errors.As(err, &myErr) || myErr.Number != 1040 {
			t.Errorf("%s = %v; want an error wrapping ErrUnavailable and the server's error 1040", what, err)
		}
	}
	// A Store made through a proxy to the real server, which then sends
	// every connection to the refusing one.
	b, p := proxied(t, sqlstore.MySQL)
	s := b.newStore(t)
	if err := s.Put(ctx, "r", 5, []byte("five")); err != nil {
		t.Fatal(err)
	}
	p.Retarget(l.Addr().String())
	check("Put", s.Put(ctx, "r", 6, []byte("six")))
	_, _, err = s.Get(ctx, "r")
	check("Get", err)
	_, err = s.CurrentFence(ctx, "r")
	check("CurrentFence", err)
	check("Fence", s.Fence(ctx, "r", 6))
	check("Tx", s.Tx(ctx, "r", 7, func(*sql.Tx) error {
		t.Error("Tx ran fn on a server that refuses connections")
		return nil
	}))
	_, err = sqlstore.NewContext(ctx, b.db, sqlstore.MySQL, sqlstore.WithTable(b.name(t, "fences")))
	check("NewContext", err)
}

// The table New creates in MySQL enforces its CHECK constraints (MariaDB,
// and MySQL from 8.0.16): no fence or value token of 0, and no value
// token above the fence.
func TestMySQLSchemaConstraints(t *testing.T) {
	b := mysqlBackend(t)
	s := b.newStore(t)
	b.exec(t, `INSERT INTO `+s.Table()+` (resource, fence, value, value_token) VALUES ('ok', 5, 'v', 5)`)
	for _, row := range []string{
		`('fence 0', 0, NULL, NULL)`,
		`('token 0', 5, 'v', 0)`,
		`('token above fence', 5, 'v', 6)`,
	} {
		if _, err := b.db.Exec(`INSERT INTO ` + s.Table() + ` (resource, fence, value, value_token) VALUES ` + row); err == nil {
			t.Errorf("the table took the row %s", row)
		}
	}
	if n := b.count(t, `SELECT count(*) FROM `+s.Table()); n != 1 {
		t.Errorf("the table has %d rows; want 1", n)
	}
}

// setMaxAllowedPacket sets the shared MariaDB server's max_allowed_packet
// to n, until the test ends; connections opened from then on take it.
func setMaxAllowedPacket(t *testing.T, n int) {
	t.Helper()
	admin := mysqlBackend(t)
	admin.exec(t, `SET GLOBAL max_allowed_packet = `+strconv.Itoa(n))
	t.Cleanup(func() { admin.db.Exec(`SET GLOBAL max_allowed_packet = DEFAULT`) })
}

// A value too large for the server's max_allowed_packet is refused by
// Put before it is sent, with an error wrapping ErrInvalidArgument, not
// ErrUnavailable (the server would close the connection); a value of
// MaxValueLen bytes is stored whole, as a prepared statement and, when
// the DSN has the driver read max_allowed_packet, as one whose
// arguments the driver writes into its text, escaping them.
func TestMySQLValueLimit(t *testing.T) {
	const packet = 1 << 20
	setMaxAllowedPacket(t, packet)
	srv := mysqltest.Shared(t)
	for _, c := range []struct {
		name   string
		params string
	}{
		{"prepared", ""},
		{"interpolated", "interpolateParams=true&maxAllowedPacket=0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dsn := srv.DSN("")
			if c.params != "" {
				dsn += "?" + c.params
			}
			b := &backend{dialect: sqlstore.MySQL, db: openMySQL(t, dsn)}
			s := b.newStore(t)
			ctx := testCtx(t)
			if got, want := s.MaxValueLen(), packet-4096; got != want {
				t.Errorf("MaxValueLen() = %d; want max_allowed_packet less 4 KiB, %d", got, want)
			}
			if err := s.Put(ctx, "r", 5, []byte("five")); err != nil {
				t.Fatal(err)
			}
			for _, n := range []int{s.MaxValueLen() + 1, packet, 20 << 20} {
				err := s.Put(ctx, "r", 6, make([]byte, n))
				t.Logf("Put of %d bytes: %v", n, err)
				if !errors.Is(err, fencedlock.ErrInvalidArgument) || errors.Is(err, fencedlock.ErrUnavailable) {
					t.Errorf("Put of %d bytes = %v; want an error wrapping ErrInvalidArgument", n, err)
				}
			}
			if f, err := s.CurrentFence(ctx, "r"); err != nil || f != 5 {
				t.Errorf("CurrentFence = (%d, %v); want 5: nothing sent", f, err)
			}
			// Zeros and quotes, which the driver escapes when it writes
			// them into the statement's text, and other bytes.
			for i, v := range [][]byte{
				make([]byte, s.MaxValueLen()),
				bytes.Repeat([]byte{0xab}, s.MaxValueLen()),
				bytes.Repeat([]byte(`'\`), s.MaxValueLen()/2),
			} {
				token := fencedlock.Token(6 + i)
				if err := s.Put(ctx, "r", token, v); err != nil {
					t.Fatalf("Put of %d bytes: %v", len(v), err)
				}
				got, tok, err := s.Get(ctx, "r")
				if err != nil || tok != token || !bytes.Equal(got, v) {
					t.Errorf("Get = (%d bytes, equal %v, %d, %v); want the %d bytes put with %d", len(got), bytes.Equal(got, v), tok, err, len(v), token)
				}
			}
		})
	}
}

// With autocommit off (here in the DSN, as a server's autocommit=0 does
// too), a plain read opens a transaction that stays open on its pooled
// connection, and a later read there sees that snapshot: an Update's
// Get would miss a newer holder's accepted write and overwrite it. Get
// and CurrentFence refuse such a session, for a resource with a row and
// without; with autocommit on they read.
func TestMySQLAutocommitOffIsRefused(t *testing.T) {
	ctx := testCtx(t)
	on := mysqlBackend(t)
	cfg, err := mysql.ParseDSN(mysqltest.Shared(t).DSN(""))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Params = map[string]string{"autocommit": "0"}
	off := openMySQL(t, cfg.FormatDSN())
	table := on.name(t, "fences")
	sOn, err := sqlstore.New(on.db, sqlstore.MySQL, sqlstore.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	sOff, err := sqlstore.New(off, sqlstore.MySQL, sqlstore.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	if err := sOn.Put(ctx, "r", 1, []byte("A")); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"r", "never-written"} {
		_, _, err := sOff.Get(ctx, r)
		if !errors.Is(err, fencedlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "autocommit off") {
			t.Errorf("Get(%q) with autocommit off: %v; want ErrInvalidArgument naming autocommit", r, err)
		}
		_, err = sOff.CurrentFence(ctx, r)
		if !errors.Is(err, fencedlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "autocommit off") {
			t.Errorf("CurrentFence(%q) with autocommit off: %v; want ErrInvalidArgument naming autocommit", r, err)
		}
	}
	if v, token, err := sOn.Get(ctx, "r"); err != nil || string(v) != "A" || token != 1 {
		t.Errorf("Get with autocommit on: %q, %d, %v", v, token, err)
	}
	if fence, err := sOn.CurrentFence(ctx, "r"); err != nil || fence != 1 {
		t.Errorf("CurrentFence with autocommit on: %d, %v", fence, err)
	}
	if _, _, err := sOn.Get(ctx, "never-written"); !errors.Is(err, fencedlock.ErrNotFound) {
		t.Errorf("Get of a resource never written: %v; want ErrNotFound", err)
	}
	if _, err := sOn.CurrentFence(ctx, "never-written"); !errors.Is(err, fencedlock.ErrNotFound) {
		t.Errorf("CurrentFence of a resource never fenced: %v; want ErrNotFound", err)
	}
}
