package pgtest

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

	_ "github.com/lib/pq"

	"github.com/fencedlock/fencedlock/internal/servertest"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		child()
		return
	}
	Main(m)
}

// query runs a one-value query on s's database "postgres".
func query(t *testing.T, s *Server, q string) string {
	t.Helper()
	db, err := sql.Open("postgres", s.DSN(""))
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
	s := Shared(t)
	if Shared(t) != s {
		t.Fatal("Shared returned two servers")
	}
	if got := query(t, s, "SELECT 1 + 1"); got != "2" {
		t.Errorf("SELECT 1 + 1 = %s", got)
	}
	for setting, want := range map[string]string{
		"fsync":                      "off",
		"dynamic_shared_memory_type": "mmap",
		"listen_addresses":           "127.0.0.1",
		"unix_socket_directories":    s.socketDir(),
		"data_directory":             s.dataDir(),
		"server_encoding":            "UTF8",
		"current_user":               "postgres",
	} {
		q := "SHOW " + setting
		if setting == "current_user" {
			q = "SELECT current_user"
		}
		if got := query(t, s, q); got != want {
			t.Errorf("%s = %q; want %q", setting, got, want)
		}
	}
	if _, err := os.Stat(filepath.Join(s.socketDir(), fmt.Sprintf(".s.PGSQL.%d", s.Port))); err != nil {
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
	s := &Server{Host: "127.0.0.1", Port: 5, User: "postgres"}
	for db, want := range map[string]string{
		"":         "dbname=postgres ",
		"app":      "dbname=app ",
		"my db":    `dbname='my db' `,
		`it's\odd`: `dbname='it\'s\\odd' `,
	} {
		if got := s.DSN(db); !strings.Contains(got, want) || !strings.HasPrefix(got, "host=127.0.0.1 port=5 user=postgres ") {
			t.Errorf("DSN(%q) = %q; want it to hold %q", db, got, want)
		}
	}
}

// Without PostgreSQL, Find skips the test and Main's report says how to
// run them; with CI=true it fails the test instead.
func TestWithoutPostgres(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	old := debianRoot
	debianRoot = t.TempDir()
	t.Cleanup(func() { debianRoot = old })
	// A Program of the test's own, so that Main reports no skip of it.
	oldProgram := program
	program = &servertest.Program{Name: oldProgram.Name, Tests: oldProgram.Tests, Install: oldProgram.Install}
	t.Cleanup(func() { program = oldProgram })
	before := program.Skipped()

	t.Setenv("CI", "")
	ft := &servertest.Recorder{TB: t}
	ft.Run(func() { Find(ft) })
	if !ft.WasSkipped || ft.WasFailed {
		t.Fatalf("Find without PostgreSQL: skipped %v, failed %v; want a skip", ft.WasSkipped, ft.WasFailed)
	}
	if !strings.Contains(ft.Msg, "apt-get install postgresql") {
		t.Errorf("skip message %q does not say how to install PostgreSQL", ft.Msg)
	}
	if got := program.Skipped() - before; got != 1 {
		t.Errorf("skipped counted %d tests; want 1", got)
	}
	var buf bytes.Buffer
	program.Report(&buf)
	if out := buf.String(); strings.Count(out, "\n") != 1 || !strings.Contains(out, "apt-get install postgresql") || !strings.Contains(out, "CI=true") {
		t.Errorf("report = %q; want one line saying how to run the tests", out)
	}

	t.Setenv("CI", "true")
	ft = &servertest.Recorder{TB: t}
	ft.Run(func() { Find(ft) })
	if !ft.WasFailed || ft.WasSkipped {
		t.Fatalf("Find without PostgreSQL and CI=true: skipped %v, failed %v; want a failure", ft.WasSkipped, ft.WasFailed)
	}
	if !strings.Contains(ft.Msg, "CI=true") {
		t.Errorf("failure message %q does not mention CI=true", ft.Msg)
	}
}

// Find takes the newest version in Debian's directory.
func TestFindNewestDebianVersion(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	old := debianRoot
	debianRoot = t.TempDir()
	t.Cleanup(func() { debianRoot = old })
	for _, v := range []string{"9.6", "10", "15", "16"} {
		bin := filepath.Join(debianRoot, v, "bin")
		if err := os.MkdirAll(bin, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"initdb", "postgres"} {
			if v == "16" && name == "postgres" {
				continue // incomplete: skipped
			}
			if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	b, err := find()
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(debianRoot, "15", "bin")
	if filepath.Dir(b.Initdb) != want || filepath.Dir(b.Postgres) != want {
		t.Errorf("find = %+v; want both in %s", b, want)
	}
}

// childEnv makes the test binary, started by TestDiesWithTestBinary, start
// a server, print its address and directory, and wait to be killed.
const childEnv = "PGTEST_CHILD"

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
