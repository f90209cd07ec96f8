// Package servertest holds what the test helpers that run server
// processes (internal/redistest, internal/pgtest, internal/mysqltest)
// share: skipping the tests that need a program that is not installed, or
// failing them in CI; one server shared by all the tests of a test binary;
// free loopback ports; and waiting for a started server to answer.
package servertest

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A Program is a server program that some tests need. Its methods are
// safe for concurrent use.
type Program struct {
	Name    string // the program, as the messages name it: "redis-server"
	Tests   string // the tests that need it: "real-Redis"
	Install string // how to install it: "apt-get install redis-server"

	skipped atomic.Int64
}

// Require returns at once when err is nil. Otherwise err says why the
// program was not found, and Require fails tb when the environment has
// CI=true, so that CI cannot pass without the tests, and skips tb
// otherwise, with a message saying how to run them.
func (p *Program) Require(tb testing.TB, err error) {
	tb.Helper()
	if err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		tb.Fatalf("%v; CI=true requires the %s tests: install %s (e.g. %s)", err, p.Tests, p.Name, p.Install)
	}
	p.skipped.Add(1)
	tb.Skipf("%v: install %s (e.g. %s) to run the %s tests", err, p.Name, p.Install, p.Tests)
}

// Skipped returns how many tests Require skipped.
func (p *Program) Skipped() int64 { return p.skipped.Load() }

// Report writes one line to w saying how many tests Require skipped and
// how to run them, and nothing when it skipped none. A skip message of
// one test among many is easy to miss; the helpers' Main functions print
// this line after the tests. (`go test ./...` shows it for a failing
// package, or with -v; for a passing package it prints only "ok".)
func (p *Program) Report(w io.Writer) {
	n := p.skipped.Load()
	if n == 0 {
		return
	}
	tests := "tests"
	if n == 1 {
		tests = "test"
	}
	fmt.Fprintf(w, "%d %s %s skipped: %s was not found; install it (e.g. %s) to run them, or set CI=true to make its absence fail\n", n, p.Tests, tests, p.Name, p.Install)
}

// Shared is one server for all the tests of a test binary, started by
// the first Get and closed by Stop. Its methods are safe for concurrent
// use.
type Shared[S interface{ Close() }] struct {
	mu      sync.Mutex // protects server and started
	server  S
	started bool
}

// Get returns the shared server, calling start for it the first time, or
// after a Stop. An error of start is returned, and the next Get tries
// again.
func (sh *Shared[S]) Get(start func() (S, error)) (S, error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !sh.started {
		s, err := start()
		if err != nil {
			return s, err
		}
		sh.server, sh.started = s, true
	}
	return sh.server, nil
}

// Stop closes the shared server, if one was started.
func (sh *Shared[S]) Stop() {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.started {
		sh.server.Close()
		var zero S
		sh.server, sh.started = zero, false
	}
}

// FreePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Launch starts cmd and waits until ready reports true, polling it every
// poll. It returns a channel that is closed when cmd has exited. When cmd
// exits first, or ready is still false after timeout (then Launch kills
// cmd), it returns an error naming the program, with logTail(), the end
// of the server's log.
func Launch(cmd *exec.Cmd, ready func() bool, poll, timeout time.Duration, logTail func() string) (<-chan struct{}, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	name := filepath.Base(cmd.Path)
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return nil, fmt.Errorf("%s exited at start: %s", name, logTail())
		default:
		}
		if ready() {
			return exited, nil
		}
		time.Sleep(poll)
	}
	cmd.Process.Kill()
	<-exited
	return nil, fmt.Errorf("%s was not ready within %v: %s", name, timeout, logTail())
}

// A Process is the running process of a helper's server: Launch starts
// it and Stop ends it. Its methods are safe for concurrent use.
type Process struct {
	mu   sync.Mutex // protects cmd and done
	cmd  *exec.Cmd
	done <-chan struct{} // closed when cmd has exited
}

// Launch starts cmd as the process, as the function Launch does.
func (p *Process) Launch(cmd *exec.Cmd, ready func() bool, poll, timeout time.Duration, logTail func() string) error {
	done, err := Launch(cmd, ready, poll, timeout, logTail)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	return nil
}

// Stop sends sig to the process and waits for it to exit, killing it when
// it has not exited within ten seconds. A process not running is left
// alone.
func (p *Process) Stop(sig os.Signal) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd, p.done = nil, nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

// A Recorder is a testing.TB that records a skip or a failure instead of
// acting on it, for testing helpers that skip or fail the tests calling
// them. Its other methods are the embedded TB's.
type Recorder struct {
	testing.TB
	WasSkipped, WasFailed bool
	Msg                   string // the message of the skip or failure
}

// Helper does nothing.
func (r *Recorder) Helper() {}

// Skipf records a skip and ends the goroutine, as testing.T.Skipf does.
func (r *Recorder) Skipf(format string, args ...any) {
	r.WasSkipped, r.Msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// Fatalf records a failure and ends the goroutine, as testing.T.Fatalf
// does.
func (r *Recorder) Fatalf(format string, args ...any) {
	r.WasFailed, r.Msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// Run runs f on a goroutine of its own, which Skipf and Fatalf can end,
// and waits for it.
func (r *Recorder) Run(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
}
