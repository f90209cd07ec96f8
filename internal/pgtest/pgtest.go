// Package pgtest starts PostgreSQL servers for tests.
//
// A Server is a fresh cluster made by initdb in a temporary directory and
// run by the postgres binary itself (not pg_ctl), on a free loopback port,
// with its unix socket inside that directory, trust authentication, and
// fsync off: fast, and as durable as the tests need (not at all). It is
// stopped and its directory removed when the test ends (Start) or when the
// test binary ends (Shared and Main), and on Linux the kernel kills it if
// the test binary dies first.
//
// Its dynamic shared memory is in files of the data directory
// (dynamic_shared_memory_type=mmap), not in /dev/shm, so that a server
// killed without the chance to clean up leaves no segment there. What it
// still leaves is the small System V shared memory segment every
// postmaster makes (its key and id are on the seventh line of
// data/postmaster.pid); ipcrm -m removes it.
//
// The binaries are looked up as initdb and postgres on PATH, else in the
// newest /usr/lib/postgresql/VERSION/bin, where Debian's postgresql
// package puts them without adding them to PATH. Without them the tests
// that need a server are skipped with a message, except when the
// environment has CI=true: then they fail.
//
// initdb and postgres refuse to run as root. When the test binary runs as
// root, pgtest runs them as the "postgres" system user (Debian's package
// creates it), in a directory that user owns.
//
// The package needs no database driver: a test opens Server.DSN with the
// driver it uses.
package pgtest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock/internal/servertest"
)

// Server is a PostgreSQL server on a loopback port. Its superuser is User,
// with no password (trust authentication), and it has the database
// "postgres". Its methods are safe for concurrent use.
type Server struct {
	Host string // "127.0.0.1"
	Port int
	User string // the superuser: "postgres"
	Dir  string // the temporary directory: data/, sock/, postgres.log

	proc servertest.Process
}

// Binaries are the PostgreSQL programs a Server needs.
type Binaries struct {
	Initdb   string
	Postgres string
}

// debianRoot is where Debian's packages install the binaries of each
// major version, in debianRoot/VERSION/bin. A variable for the tests.
var debianRoot = "/usr/lib/postgresql"

// program counts the tests Find skipped.
var program = &servertest.Program{Name: "PostgreSQL", Tests: "PostgreSQL", Install: "apt-get install postgresql"}

// Find returns the PostgreSQL binaries, or skips tb (fails it when
// CI=true) when they are not installed.
func Find(tb testing.TB) Binaries {
	tb.Helper()
	b, err := find()
	program.Require(tb, err)
	return b
}

// find looks for initdb and postgres on PATH, then in the newest
// debianRoot/VERSION/bin.
func find() (Binaries, error) {
	if initdb, err := exec.LookPath("initdb"); err == nil {
		// Take postgres from initdb's directory, so that both are of
		// one version, else from PATH.
		if pg, err := exec.LookPath(filepath.Join(filepath.Dir(initdb), "postgres")); err == nil {
			return Binaries{Initdb: initdb, Postgres: pg}, nil
		}
		if pg, err := exec.LookPath("postgres"); err == nil {
			return Binaries{Initdb: initdb, Postgres: pg}, nil
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(debianRoot, "*", "bin"))
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, dir := range dirs {
		b := Binaries{Initdb: filepath.Join(dir, "initdb"), Postgres: filepath.Join(dir, "postgres")}
		if isExecutable(b.Initdb) && isExecutable(b.Postgres) {
			return b, nil
		}
	}
	return Binaries{}, fmt.Errorf("initdb and postgres are neither on PATH nor in %s/*/bin", debianRoot)
}

// versionOf returns the major version of a debianRoot/VERSION/bin
// directory as a number, so that 10 sorts above 9; 0 when it is not one.
func versionOf(binDir string) float64 {
	v, err := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	if err != nil {
		return 0
	}
	return v
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// Start starts a PostgreSQL server of its own for tb and stops it when
// tb's test ends. It skips tb (fails it when CI=true) when PostgreSQL is
// not installed. Most tests should share one server instead: see Shared.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s, err := start(Find(tb))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

// owner is the user that runs initdb and postgres: nil for the test
// binary's own user, else the postgres system user (when it runs as root).
type owner struct {
	uid, gid uint32
}

func lookupOwner() (*owner, error) {
	if os.Getuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, and initdb and postgres refuse to run as root: a \"postgres\" user to run them as is needed (apt-get install postgresql creates it): %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("user postgres has uid %q, gid %q: not numbers", u.Uid, u.Gid)
	}
	if uid == 0 {
		return nil, errors.New("user postgres is root")
	}
	return &owner{uid: uint32(uid), gid: uint32(gid)}, nil
}

// makeDir makes the server's temporary directory, owned by o and
// reachable by it: when os.TempDir is not (a parent without the others'
// search bit), it tries /tmp.
func makeDir(o *owner) (string, error) {
	parents := []string{os.TempDir()}
	if o != nil && parents[0] != "/tmp" {
		parents = append(parents, "/tmp")
	}
	var lastErr error
	for _, parent := range parents {
		if o != nil {
			if err := reachable(parent); err != nil {
				lastErr = err
				continue
			}
		}
		dir, err := os.MkdirTemp(parent, "pgtest-")
		if err != nil {
			lastErr = err
			continue
		}
		if o != nil {
			if err := os.Chown(dir, int(o.uid), int(o.gid)); err != nil {
				os.RemoveAll(dir)
				return "", err
			}
		}
		return dir, nil
	}
	return "", fmt.Errorf("no temporary directory the postgres user can reach: %w", lastErr)
}

// reachable reports whether a user other than root and dir's owners can
// search dir and each of its parents.
func reachable(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s (mode %v) is not searchable by other users", d, fi.Mode().Perm())
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

func start(b Binaries) (*Server, error) {
	o, err := lookupOwner()
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	dir, err := makeDir(o)
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	s := &Server{Host: "127.0.0.1", User: "postgres", Dir: dir}
	if err := s.initdb(b.Initdb, o); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := s.mkdirOwned(s.socketDir(), o); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := servertest.FreePort()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		s.Port = port
		if lastErr = s.launch(b.Postgres, o); lastErr == nil {
			return s, nil
		}
	}
	os.RemoveAll(dir)
	return nil, fmt.Errorf("pgtest: starting postgres: %w", lastErr)
}

// mkdirOwned makes directory path, owned by o.
func (s *Server) mkdirOwned(path string, o *owner) error {
	if err := os.Mkdir(path, 0o700); err != nil {
		return err
	}
	if o != nil {
		return os.Chown(path, int(o.uid), int(o.gid))
	}
	return nil
}

func (s *Server) dataDir() string   { return filepath.Join(s.Dir, "data") }
func (s *Server) socketDir() string { return filepath.Join(s.Dir, "sock") }
func (s *Server) logFile() string   { return filepath.Join(s.Dir, "postgres.log") }

// command returns a command that runs as o (nil: as the test binary's
// user) in s.Dir, and is killed when the test binary dies.
func (s *Server) command(o *owner, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = s.Dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "TZ=UTC")
	setProcAttr(cmd, o)
	return cmd
}

func (s *Server) initdb(bin string, o *owner) error {
	cmd := s.command(o, bin,
		"--pgdata", s.dataDir(), "--username", "postgres", "--auth", "trust",
		"--encoding", "UTF8", "--locale", "C", "--no-sync", "--no-instructions")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgtest: %s: %w\n%s", strings.Join(cmd.Args, " "), err, tail(out))
	}
	return nil
}

func (s *Server) launch(bin string, o *owner) error {
	log, err := os.OpenFile(s.logFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := s.command(o, bin,
		"-D", s.dataDir(),
		"-p", strconv.Itoa(s.Port),
		"-c", "listen_addresses="+s.Host,
		"-c", "unix_socket_directories="+s.socketDir(),
		"-c", "fsync=off",
		// Dynamic shared memory in data/pg_dynshmem, which goes with
		// the directory, instead of /dev/shm, where a killed server
		// would leave it.
		"-c", "dynamic_shared_memory_type=mmap",
		"-c", "synchronous_commit=off",
		"-c", "full_page_writes=off",
		"-c", "max_connections=200",
		"-c", "log_min_messages=warning",
		"-c", "log_min_error_statement=panic",
	)
	cmd.Stdout = log
	cmd.Stderr = log
	return s.proc.Launch(cmd, s.ready, 10*time.Millisecond, 30*time.Second, s.logTail)
}

// ready reports whether the postmaster says it accepts connections (the
// last line of postmaster.pid, which pg_ctl reads too) and its port
// answers.
func (s *Server) ready() bool {
	b, err := os.ReadFile(filepath.Join(s.dataDir(), "postmaster.pid"))
	if err != nil {
		return false
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) < 8 || strings.TrimSpace(lines[len(lines)-1]) != "ready" {
		return false
	}
	c, err := net.DialTimeout("tcp", s.Addr(), 200*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// Addr returns the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort(s.Host, strconv.Itoa(s.Port)) }

// DSN returns a connection string for database dbname ("postgres" when
// empty) as the superuser, in the key=value form lib/pq and pgx accept,
// with TLS off.
func (s *Server) DSN(dbname string) string {
	if dbname == "" {
		dbname = "postgres"
	}
	return fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable connect_timeout=10", s.Host, s.Port, s.User, quoteDSN(dbname))
}

// quoteDSN quotes a value of a key=value connection string when needed.
func quoteDSN(v string) string {
	if v != "" && !strings.ContainsAny(v, ` '\`) {
		return v
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// Log returns the server's log so far.
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.logFile())
	return string(b)
}

func (s *Server) logTail() string { return tail([]byte(s.Log())) }

func tail(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// Stop stops the server with a fast shutdown (SIGINT: sessions are ended,
// transactions rolled back), and kills it when it has not exited within
// ten seconds. Its directory is left; Close removes it.
func (s *Server) Stop() { s.proc.Stop(syscall.SIGINT) }

// Close stops the server and removes its directory.
func (s *Server) Close() {
	s.Stop()
	os.RemoveAll(s.Dir)
}

var shared servertest.Shared[*Server]

// Shared returns the test binary's shared server, starting it on first
// use; Main (or StopShared) stops it. It skips tb (fails it when CI=true)
// when PostgreSQL is not installed. Tests that share it keep apart by
// using tables (or databases) of their own.
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
// PostgreSQL is not installed, and how to run them; nothing when none
// was.
func Report(w io.Writer) { program.Report(w) }

// Main runs m, stops the shared server and exits; call it from TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// When tests were skipped because PostgreSQL is not installed, it says so,
// and how to run them, in one line on stderr after the tests. A test
// binary that needs other servers too calls m.Run, each helper's
// StopShared and Report, and os.Exit itself.
func Main(m *testing.M) {
	code := m.Run()
	StopShared()
	Report(os.Stderr)
	os.Exit(code)
}
