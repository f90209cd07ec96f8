// Package mysqltest starts MariaDB servers for tests.
//
// A Server is a fresh data directory made by mariadb-install-db in a
// temporary directory and run by mariadbd itself, on a free loopback port
// (--bind-address=127.0.0.1), with its unix socket inside that directory,
// a root user without a password, a database "test", a small InnoDB
// buffer pool, no binary log, no performance schema and no flushing of the
// redo log at commit: fast, and as durable as the tests need (not at
// all). Neither program reads an option file (--no-defaults), so the
// machine's MariaDB configuration plays no part. The server is stopped
// and its directory removed when the test ends (Start) or when the test
// binary ends (Shared and Main), and on Linux the kernel kills it if the
// test binary dies first.
//
// The programs are looked up as mariadbd and mariadb-install-db (their
// names before MariaDB 10.5: mysqld and mysql_install_db) on PATH, else in
// /usr/sbin and /usr/bin, where Debian's mariadb-server package puts them
// (/usr/sbin is not on every user's PATH). Without them the tests that
// need a server are skipped with a message, except when the environment
// has CI=true: then they fail. MySQL's own server (Oracle's mysqld, which
// has no install program) is not supported.
//
// mariadbd refuses to run as root unless told to: when the test binary
// runs as root, both programs get --user=root.
//
// The package needs no database driver: a test opens Server.DSN with
// github.com/go-sql-driver/mysql.
package mysqltest

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/internal/servertest"
)

// Server is a MariaDB server on a loopback port. Its user User has no
// password and every privilege, and it has the database "test". Its
// methods are safe for concurrent use.
type Server struct {
	Host string // "127.0.0.1"
	Port int
	User string // "root"
	Dir  string // the temporary directory: data/, tmp/, the socket, error.log

	proc servertest.Process
}

// Binaries are the MariaDB programs a Server needs.
type Binaries struct {
	InstallDB string // mariadb-install-db
	Server    string // mariadbd
}

// searchDirs are where find looks for the programs when they are not on
// PATH. A variable for the tests.
var searchDirs = []string{"/usr/sbin", "/usr/bin"}

// program counts the tests Find skipped.
var program = &servertest.Program{Name: "MariaDB", Tests: "MySQL/MariaDB", Install: "apt-get install mariadb-server"}

// Find returns the MariaDB programs, or skips tb (fails it when CI=true)
// when they are not installed.
func Find(tb testing.TB) Binaries {
	tb.Helper()
	b, err := find()
	program.Require(tb, err)
	return b
}

// find looks for the server and the install program, each by its current
// name and then its old one, on PATH and then in searchDirs.
func find() (Binaries, error) {
	server, err1 := lookup("mariadbd", "mysqld")
	install, err2 := lookup("mariadb-install-db", "mysql_install_db")
	switch {
	case err1 != nil:
		return Binaries{}, err1
	case err2 != nil:
		return Binaries{}, err2
	}
	return Binaries{InstallDB: install, Server: server}, nil
}

// lookup returns the path of the first of names found on PATH, else in
// searchDirs.
func lookup(names ...string) (string, error) {
	for _, name := range names {
		if path, err := exec.LookPath(name); err == nil {
			return path, nil
		}
	}
	for _, dir := range searchDirs {
		for _, name := range names {
			path := filepath.Join(dir, name)
			if isExecutable(path) {
				return path, nil
			}
		}
	}
	return "", fmt.Errorf("%s is neither on PATH nor in %s", strings.Join(names, " or "), strings.Join(searchDirs, ", "))
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// Start starts a MariaDB server of its own for tb and stops it when tb's
// test ends. It skips tb (fails it when CI=true) when MariaDB is not
// installed. Most tests should share one server instead: see Shared.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s, err := start(Find(tb))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

func start(b Binaries) (*Server, error) {
	dir, err := os.MkdirTemp("", "mysqltest-")
	if err != nil {
		return nil, fmt.Errorf("mysqltest: %w", err)
	}
	s := &Server{Host: "127.0.0.1", User: "root", Dir: dir}
	if err := os.Mkdir(s.tmpDir(), 0o700); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("mysqltest: %w", err)
	}
	if err := s.installDB(b.InstallDB); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := servertest.FreePort()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		s.Port = port
		if lastErr = s.launch(b.Server); lastErr == nil {
			return s, nil
		}
	}
	os.RemoveAll(dir)
	return nil, fmt.Errorf("mysqltest: starting %s: %w", filepath.Base(b.Server), lastErr)
}

func (s *Server) dataDir() string { return filepath.Join(s.Dir, "data") }
func (s *Server) tmpDir() string  { return filepath.Join(s.Dir, "tmp") }
func (s *Server) socket() string  { return filepath.Join(s.Dir, "mysqld.sock") }
func (s *Server) pidFile() string { return filepath.Join(s.Dir, "mysqld.pid") }
func (s *Server) logFile() string { return filepath.Join(s.Dir, "error.log") }

// serverOptions are the options of mariadbd that both the install
// program (which runs mariadbd to make the system tables) and the server
// get: the same InnoDB files, small and fast.
func serverOptions() []string {
	opts := []string{
		"--innodb-buffer-pool-size=16M",
		"--innodb-log-file-size=16M",
		"--innodb-doublewrite=0",
		"--innodb-flush-log-at-trx-commit=0",
		"--skip-name-resolve",
	}
	if os.Getuid() == 0 {
		opts = append(opts, "--user=root")
	}
	return opts
}

// command returns a command in s.Dir that is killed when the test binary
// dies.
func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = s.Dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "TZ=UTC")
	dieWithParent(cmd)
	return cmd
}

// installDB makes the data directory: the system tables, root without a
// password on localhost, 127.0.0.1 and ::1 (the "normal" authentication
// of the historical install), and the database "test".
func (s *Server) installDB(bin string) error {
	initSQL := filepath.Join(s.Dir, "init.sql")
	if err := os.WriteFile(initSQL, []byte("CREATE DATABASE IF NOT EXISTS test;\n"), 0o644); err != nil {
		return fmt.Errorf("mysqltest: %w", err)
	}
	args := append([]string{
		"--no-defaults", // first: the install program reads it only there
		"--datadir=" + s.dataDir(),
		"--auth-root-authentication-method=normal",
		"--skip-test-db",
		"--extra-file=" + initSQL,
	}, serverOptions()...)
	cmd := s.command(bin, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("mysqltest: %s: %w\n%s", strings.Join(cmd.Args, " "), err, tail(out))
	}
	return nil
}

func (s *Server) launch(bin string) error {
	log, err := os.OpenFile(s.logFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	args := append([]string{
		"--no-defaults", // first: mariadbd reads it only there
		"--datadir=" + s.dataDir(),
		"--tmpdir=" + s.tmpDir(),
		"--socket=" + s.socket(),
		"--pid-file=" + s.pidFile(),
		"--log-error=" + s.logFile(),
		"--port=" + strconv.Itoa(s.Port),
		"--bind-address=" + s.Host,
		"--max-connections=200",
		"--performance-schema=OFF",
		"--skip-log-bin",
		// Stopping flushes nothing: the data is thrown away.
		"--innodb-fast-shutdown=2",
	}, serverOptions()...)
	cmd := s.command(bin, args...)
	cmd.Stdout = log
	cmd.Stderr = log
	// Another test's server may hold the port (it was free a moment ago)
	// and greet: only this process's pid file, which mariadbd writes once
	// it listens, says the greeting is its own. This one then fails to
	// bind and exits, and start tries another port.
	ready := func() bool { return s.pidIs(cmd.Process.Pid) && s.ready() }
	return s.proc.Launch(cmd, ready, 10*time.Millisecond, 60*time.Second, s.logTail)
}

// pidIs reports whether the server's pid file holds pid.
func (s *Server) pidIs(pid int) bool {
	b, err := os.ReadFile(s.pidFile())
	return err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(pid)
}

// ready reports whether the server greets a client on its port: it
// accepts connections only once it has started, and the first packet it
// then sends is the handshake of protocol version 10. (Its port accepts
// TCP connections a little earlier, before the server takes them.)
func (s *Server) ready() bool {
	c, err := net.DialTimeout("tcp", s.Addr(), 200*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	// A packet: a 3-byte length, a sequence number, then the payload,
	// whose first byte is the protocol version (0xff for an error).
	var head [5]byte
	if _, err := io.ReadFull(c, head[:]); err != nil {
		return false
	}
	return head[4] == 10
}

// Addr returns the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort(s.Host, strconv.Itoa(s.Port)) }

// DSN returns a data source name, in the form of
// github.com/go-sql-driver/mysql, for database dbname ("test" when empty)
// as User over TCP, without parameters: append "?" and the driver's
// parameters as needed.
func (s *Server) DSN(dbname string) string {
	if dbname == "" {
		dbname = "test"
	}
	return fmt.Sprintf("%s@tcp(%s)/%s", s.User, s.Addr(), dbname)
}

// Log returns the server's error log so far.
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.logFile())
	return string(b)
}

func (s *Server) logTail() string { return tail([]byte(s.Log())) }

func tail(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(bytes.TrimSpace(b))
}

// Stop stops the server (SIGTERM: connections are closed, transactions
// rolled back, and with --innodb-fast-shutdown=2 nothing is flushed), and
// kills it when it has not exited within ten seconds. Its directory is
// left; Close removes it.
func (s *Server) Stop() { s.proc.Stop(syscall.SIGTERM) }

// Close stops the server and removes its directory.
func (s *Server) Close() {
	s.Stop()
	os.RemoveAll(s.Dir)
}

var shared servertest.Shared[*Server]

// Shared returns the test binary's shared server, starting it on first
// use; Main (or StopShared) stops it. It skips tb (fails it when CI=true)
// when MariaDB is not installed. Tests that share it keep apart by using
// tables (or databases) of their own.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	b := Find(tb)
	s, err := shared.Get(func() (*Server, error) { return start(b) })
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// StopShared stops the shared server, if one was started, and removes its
// directory.
func StopShared() { shared.Stop() }

// Report writes one line to w saying how many tests were skipped because
// MariaDB is not installed, and how to run them; nothing when none was.
func Report(w io.Writer) { program.Report(w) }

// Main runs m, stops the shared server and exits; call it from TestMain:
//
//	func TestMain(m *testing.M) { mysqltest.Main(m) }
//
// When tests were skipped because MariaDB is not installed, it says so,
// and how to run them, in one line on stderr after the tests. A test
// binary that needs other servers too calls m.Run, each helper's
// StopShared and Report, and os.Exit itself.
func Main(m *testing.M) {
	code := m.Run()
	StopShared()
	Report(os.Stderr)
	os.Exit(code)
}
