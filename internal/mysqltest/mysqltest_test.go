package mysqltest

import (
	"bytes"
	"database/sql"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/fencedlock/fencedlock/internal/servertest"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		child()
		return
	}
	Main(m)
}

// query runs a one-value query on s's database "test".
func query(t *testing.T, s *Server, q string) string {
	t.Helper()
	db, err := sql.Open("mysql", s.DSN(""))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v string
	if err := db.QueryRow(q).Scan(&v); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return v
}

func TestShared(t *testing.T) {
	t.Logf("binaries: %+v", Find(t))
	start := time.Now()
	s := Shared(t)
	t.Logf("the shared server answered %v after this test asked for it (0 when another test started it)", time.Since(start).Round(time.Millisecond))
	if Shared(t) != s {
		t.Fatal("Shared returned two servers")
	}
	if got := query(t, s, "SELECT 1 + 1"); got != "2" {
		t.Errorf("SELECT 1 + 1 = %s", got)
	}
	t.Logf("version: %s", query(t, s, "SELECT VERSION()"))
	for q, want := range map[string]string{
		"SELECT DATABASE()":                            "test",
		"SELECT CURRENT_USER()":                        "root@127.0.0.1",
		"SELECT @@bind_address":                        "127.0.0.1",
		"SELECT @@port":                                fmt.Sprint(s.Port),
		"SELECT @@socket":                              s.socket(),
		"SELECT @@datadir":                             s.dataDir() + "/",
		"SELECT @@tmpdir":                              s.tmpDir(),
		"SELECT @@default_storage_engine":              "InnoDB",
		"SELECT @@tx_isolation":                        "REPEATABLE-READ",
		"SELECT @@innodb_buffer_pool_size":             fmt.Sprint(16 << 20),
		"SELECT @@innodb_flush_log_at_trx_commit":      "0",
		"SELECT @@innodb_fast_shutdown":                "2",
		"SELECT @@performance_schema":                  "0",
		"SELECT @@log_bin":                             "0",
		"SELECT @@skip_name_resolve":                   "1",
		"SELECT INSTR(VERSION(), 'MariaDB') > 0":       "1",
		"SELECT INSTR(@@sql_mode, 'STRICT_TRANS') > 0": "1",
	} {
		if got := query(t, s, q); got != want {
			t.Errorf("%s = %q; want %q", q, got, want)
		}
	}
	if _, err := os.Stat(s.socket()); err != nil {
		t.Errorf("no unix socket in the server's directory: %v", err)
	}
}

// A server of its own is stopped, and its directory removed, at Close.
func TestStartAndClose(t *testing.T) {
	s := Start(t)
	if got := query(t, s, "SELECT 'own'"); got != "own" {
		t.Errorf("query = %q", got)
	}
	if s == Shared(t) {
		t.Fatal("Start returned the shared server")
	}
	s.Close()
	if c, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
		c.Close()
		t.Errorf("%s still accepts connections after Close", s.Addr())
	}
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Errorf("%s still there after Close: %v", s.Dir, err)
	}
	s.Close() // a second Close does nothing
}

func TestDSN(t *testing.T) {
	s := &Server{Host: "127.0.0.1", Port: 5, User: "root"}
	for db, want := range map[string]string{
		"":    "root@tcp(127.0.0.1:5)/test",
		"app": "root@tcp(127.0.0.1:5)/app",
	} {
		if got := s.DSN(db); got != want {
			t.Errorf("DSN(%q) = %q; want %q", db, got, want)
		}
	}
}

// ready is false for a port that accepts connections but sends no
// handshake, or an error packet instead.
func TestReadyWantsHandshake(t *testing.T) {
	for name, greeting := range map[string][]byte{
		"silent": nil,
		"error":  {3, 0, 0, 0, 0xff, 0x10, 0x04}, // error 1040
	} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func(greeting []byte) {
			defer close(done)
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				// Keep the connection open while ready reads: it
				// gives up after its own deadline.
				c.Write(greeting)
				c.SetReadDeadline(time.Now().Add(2 * time.Second))
				c.Read(make([]byte, 1))
				c.Close()
			}
		}(greeting)
		s := &Server{Host: "127.0.0.1", Port: l.Addr().(*net.TCPAddr).Port}
		if s.ready() {
			t.Errorf("ready() = true for a server that sends %s", name)
		}
		l.Close()
		<-done
	}
}

// Without MariaDB, Find skips the test and Main's report says how to run
// them; with CI=true it fails the test instead.
func TestWithoutMariaDB(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	old := searchDirs
	searchDirs = []string{t.TempDir()}
	t.Cleanup(func() { searchDirs = old })
	// A Program of the test's own, so that Main reports no skip of it.
	oldProgram := program
	program = &servertest.Program{Name: oldProgram.Name, Tests: oldProgram.Tests, Install: oldProgram.Install}
	t.Cleanup(func() { program = oldProgram })

	t.Setenv("CI", "")
	ft := &servertest.Recorder{TB: t}
	ft.Run(func() { Find(ft) })
	if !ft.WasSkipped || ft.WasFailed {
		t.Fatalf("Find without MariaDB: skipped %v, failed %v; want a skip", ft.WasSkipped, ft.WasFailed)
	}
	if !strings.Contains(ft.Msg, "apt-get install mariadb-server") || !strings.Contains(ft.Msg, "mariadbd") {
		t.Errorf("skip message %q does not say what is missing and how to install it", ft.Msg)
	}
	if got := program.Skipped(); got != 1 {
		t.Errorf("skipped counted %d tests; want 1", got)
	}
	var buf bytes.Buffer
	Report(&buf)
	if out := buf.String(); strings.Count(out, "\n") != 1 || !strings.Contains(out, "apt-get install mariadb-server") || !strings.Contains(out, "CI=true") {
		t.Errorf("report = %q; want one line saying how to run the tests", out)
	}

	t.Setenv("CI", "true")
	ft = &servertest.Recorder{TB: t}
	ft.Run(func() { Find(ft) })
	if !ft.WasFailed || ft.WasSkipped {
		t.Fatalf("Find without MariaDB and CI=true: skipped %v, failed %v; want a failure", ft.WasSkipped, ft.WasFailed)
	}
	if !strings.Contains(ft.Msg, "CI=true") {
		t.Errorf("failure message %q does not mention CI=true", ft.Msg)
	}
}

// Find takes the programs from PATH, else from the search directories,
// by their current names before their old ones.
func TestFind(t *testing.T) {
	write := func(dir string, names ...string) {
		t.Helper()
		for _, name := range names {
			if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	path, sbin, bin := t.TempDir(), t.TempDir(), t.TempDir()
	t.Setenv("PATH", path)
	old := searchDirs
	searchDirs = []string{sbin, bin}
	t.Cleanup(func() { searchDirs = old })

	write(sbin, "mysqld", "mariadbd")
	write(bin, "mysql_install_db")
	b, err := find()
	if err != nil || b.Server != filepath.Join(sbin, "mariadbd") || b.InstallDB != filepath.Join(bin, "mysql_install_db") {
		t.Errorf("find = %+v, %v; want mariadbd from %s and mysql_install_db from %s", b, err, sbin, bin)
	}
	write(path, "mysqld", "mariadb-install-db")
	b, err = find()
	if err != nil || b.Server != filepath.Join(path, "mysqld") || b.InstallDB != filepath.Join(path, "mariadb-install-db") {
		t.Errorf("find = %+v, %v; want both from PATH (%s)", b, err, path)
	}
	// Not executable: not found.
	if err := os.Chmod(filepath.Join(path, "mysqld"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := find(); err != nil || b.Server != filepath.Join(sbin, "mariadbd") {
		t.Errorf("find = %+v, %v; want mariadbd from %s", b, err, sbin)
	}
}

// childEnv makes the test binary, started by TestDiesWithTestBinary, start
// a server, print its address and directory, and wait to be killed.
const childEnv = "MYSQLTEST_CHILD"

func child() {
	b, err := find()
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	s, err := start(b)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("started", s.Addr(), s.Dir)
	time.Sleep(time.Minute)
	s.Close()
	os.Exit(0)
}

// A server whose port another server took between FreePort and the bind
// exits: the other's greeting must not pass for its own.
func TestLaunchDoesNotTakeAnotherServerForItself(t *testing.T) {
	b := Find(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Write([]byte{1, 0, 0, 0, 10}) // a handshake's first bytes
			time.AfterFunc(time.Second, func() { c.Close() })
		}
	}()
	dir := t.TempDir()
	s := &Server{Host: "127.0.0.1", Port: l.Addr().(*net.TCPAddr).Port, User: "root", Dir: dir}
	if err := os.Mkdir(s.tmpDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := s.installDB(b.InstallDB); err != nil {
		t.Fatal(err)
	}
	err = s.launch(b.Server)
	if err == nil {
		s.Close()
		t.Fatalf("launch on %s, a port another server holds, succeeded", s.Addr())
	}
	if !strings.Contains(err.Error(), "exited at start") {
		t.Fatalf("launch on a taken port: %v, want the server's exit", err)
	}
}
