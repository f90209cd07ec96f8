//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/racetest"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// The tests run the fencedlock binary, built once by TestMain, against
// the test binary's shared redis-server. The test binary is also the
// fenced writer that CMD runs (see putHelper).

// bin is the path of the fencedlock binary.
var bin string

// envHelper, set to "put", makes the test binary the fenced writer.
const envHelper = "FENCEDLOCK_TEST_HELPER"

// helperModes are what the test binary can be instead of the tests, by
// the value of FENCEDLOCK_TEST_HELPER.
var helperModes = map[string]func() int{"put": putHelper}

// Environment of the writer: the prefix of its RedisStore, and the value
// it writes. It writes to the resource in FENCEDLOCK_RESOURCE with the
// token in FENCEDLOCK_TOKEN, on the Redis in FENCEDLOCK_REDIS_URL.
const (
	envStorePrefix = "FENCEDLOCK_TEST_STORE_PREFIX"
	envValue       = "FENCEDLOCK_TEST_VALUE"
)

// Exit statuses of the writer.
const (
	putRefused = 1 // the store refused the token: ErrStaleToken
	putFailed  = 3 // any other error
)

// waitLimit bounds every wait of the tests for a process or a state: far
// above what they take, so that a loaded machine does not fail them.
const waitLimit = 20 * time.Second

func TestMain(m *testing.M) {
	if helper := helperModes[os.Getenv(envHelper)]; helper != nil {
		os.Exit(helper())
	}
	dir, err := os.MkdirTemp("", "fencedlock-cmd-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "fencedlock")
	build := exec.Command("go", "build", "-o", bin)
	if racetest.Enabled { // the binary under test is built with -race too
		build.Args = append(build.Args, "-race")
	}
	build.Args = append(build.Args, ".")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building fencedlock: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	redistest.StopShared()
	os.RemoveAll(dir)
	os.Exit(code)
}

// putHelper writes FENCEDLOCK_TEST_VALUE to a RedisStore with the token
// of the lock it runs under, and says on stdout what happened: "accepted
// TOKEN", or the error. Its exit status is 0, putRefused or putFailed.
func putHelper() int {
	token, err := fencedlock.ParseToken(os.Getenv(envToken))
	if err != nil {
		fmt.Println("no token:", err)
		return putFailed
	}
	opts, err := redis.ParseURL(os.Getenv(envRedisURL))
	if err != nil {
		fmt.Println(err)
		return putFailed
	}
	client := redis.NewClient(opts)
	defer client.Close()
	store := fencedlock.NewRedisStore(client, fencedlock.WithStorePrefix(os.Getenv(envStorePrefix)))
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	err = store.Put(ctx, os.Getenv(envResource), token, []byte(os.Getenv(envValue)))
	switch {
	case err == nil:
		fmt.Println("accepted", token)
		return 0
	case errors.Is(err, fencedlock.ErrStaleToken):
		fmt.Println(err)
		return putRefused
	}
	fmt.Println(err)
	return putFailed
}

// env is what a test needs to run fencedlock: a Redis, with a prefix of
// the test's own, a directory, and a Locker to look at the locks.
type env struct {
	t      *testing.T
	b      *redistest.Backend
	url    string
	dir    string
	locker *fencedlock.Locker
}

// newEnv returns an env on the shared redis-server. It skips the test
// without redis-server (fails it with CI=true).
func newEnv(t *testing.T) *env {
	t.Helper()
	b := redistest.Real(t)
	return &env{
		t: t, b: b, url: "redis://" + b.Client.Options().Addr, dir: t.TempDir(),
		locker: fencedlock.New(b.Client, fencedlock.WithPrefix(b.Prefix)),
	}
}

// newBareEnv returns an env without Redis, for runs that must fail
// before they contact it: its URL names a port nobody listens on.
func newBareEnv(t *testing.T) *env {
	return &env{t: t, url: "redis://" + closedAddr(t), dir: t.TempDir()}
}

// closedAddr returns a loopback address where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// proc is a fencedlock process that a test started.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdout string // file names
	stderr string
	exited chan struct{}
}

// start starts fencedlock with args, the Redis of e in FENCEDLOCK_REDIS_URL
// and extra environment. "-prefix P" is inserted after the command name,
// so that its locks are the test's. It runs in a process group of its
// own, so that whether the test runs in a terminal does not matter (see
// prepare), and is killed if the test ends first.
func (e *env) start(args []string, extraEnv ...string) *proc {
	e.t.Helper()
	if len(args) > 0 && e.b != nil {
		args = append([]string{args[0], "-prefix", e.b.Prefix}, args[1:]...)
	}
	return e.startRaw(args, extraEnv...)
}

// startRaw is start without the prefix.
func (e *env) startRaw(args []string, extraEnv ...string) *proc {
	e.t.Helper()
	return e.launch(exec.Command(bin, args...), extraEnv...)
}

// launch starts cmd, fencedlock or a program that executes it, as
// startRaw does. A cmd.Stderr the caller set is kept (errText then
// reads nothing).
func (e *env) launch(cmd *exec.Cmd, extraEnv ...string) *proc {
	e.t.Helper()
	name := fmt.Sprintf("%s/p%d", e.dir, time.Now().UnixNano())
	p := &proc{t: e.t, cmd: cmd, stdout: name + ".out", stderr: name + ".err", exited: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), envRedisURL+"="+e.url)
	if racetest.Enabled && os.Getenv("GORACE") == "" {
		// A race-enabled program waits a second at a clean exit for
		// reports from other goroutines; races found while it runs
		// are reported anyway.
		p.cmd.Env = append(p.cmd.Env, "GORACE=atexit_sleep_ms=20")
	}
	if e.b != nil {
		p.cmd.Env = append(p.cmd.Env, envStorePrefix+"="+e.b.Prefix)
	}
	p.cmd.Env = append(p.cmd.Env, extraEnv...)
	p.cmd.Dir = e.dir
	p.cmd.SysProcAttr = newGroup()
	// Files, not pipes: a process that CMD leaves behind does not hold
	// up Wait.
	files := []*os.File{createFile(e.t, p.stdout)}
	p.cmd.Stdout = files[0]
	if p.cmd.Stderr == nil {
		files = append(files, createFile(e.t, p.stderr))
		p.cmd.Stderr = files[1]
	}
	err := p.cmd.Start()
	for _, f := range files {
		f.Close()
	}
	if err != nil {
		e.t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	e.t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

func createFile(t *testing.T, name string) *os.File {
	t.Helper()
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// wait waits for p to exit and returns its exit status, or fails the
// test after waitLimit.
func (p *proc) wait() int {
	p.t.Helper()
	select {
	case <-p.exited:
	case <-time.After(waitLimit):
		_ = p.cmd.Process.Kill()
		<-p.exited
		p.t.Fatalf("%q did not exit within %v; stderr: %s", p.cmd.Args, waitLimit, p.errText())
	}
	return p.cmd.ProcessState.ExitCode()
}

// running reports whether p has not exited yet.
func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// signal sends sig to the fencedlock process alone.
func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
}

func (p *proc) outText() string { return readText(p.t, p.stdout) }
func (p *proc) errText() string { return readText(p.t, p.stderr) }

func readText(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return string(b)
}

// runStatus runs fencedlock to its end and returns its exit status,
// stdout and stderr.
func (e *env) runStatus(args []string, extraEnv ...string) (int, string, string) {
	e.t.Helper()
	p := e.start(args, extraEnv...)
	code := p.wait()
	return code, p.outText(), p.errText()
}

// waitUntil polls cond until it holds, or fails the test after
// waitLimit, naming what it waited for.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", waitLimit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fileExists reports whether a file of the test's directory exists.
func (e *env) fileExists(name string) bool {
	_, err := os.Stat(filepath.Join(e.dir, name))
	return err == nil
}

// touch creates an empty file in the test's directory.
func (e *env) touch(name string) {
	e.t.Helper()
	if err := os.WriteFile(filepath.Join(e.dir, name), nil, 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// read returns the text of a file in the test's directory.
func (e *env) read(name string) string {
	e.t.Helper()
	return readText(e.t, filepath.Join(e.dir, name))
}

// inspect returns what Redis holds for resource under the test's prefix.
func (e *env) inspect(resource string) fencedlock.Info {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	info, err := e.locker.Inspect(ctx, resource)
	if err != nil {
		e.t.Fatal(err)
	}
	return info
}

// noLockLeft fails the test when resource's lock key exists, or anyone
// waits for it.
func (e *env) noLockLeft(resource string) {
	e.t.Helper()
	key := e.b.Prefix + ":{" + resource + "}:lock"
	if n, err := e.b.Client.Exists(context.Background(), key).Result(); err != nil || n != 0 {
		e.t.Errorf("lock key %s left behind (EXISTS %d, %v)", key, n, err)
	}
	if info := e.inspect(resource); info.Held || info.Waiters != 0 {
		e.t.Errorf("%q left behind: %+v", resource, info)
	}
}

// hold takes resource's lock as another owner would, until the test ends.
func (e *env) hold(resource string) *fencedlock.Lock {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	lock, err := e.locker.TryAcquire(ctx, resource, time.Minute)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = lock.Release(context.Background()) })
	return lock
}

// helper is the command line of the fenced writer, for sh.
func helper(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return envHelper + "=put " + shQuote(self)
}

// shQuote quotes s for sh.
func shQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// oneLine fails the test unless text is one line holding every part.
func oneLine(t *testing.T, text string, parts ...string) {
	t.Helper()
	if strings.Count(text, "\n") != 1 || !strings.HasSuffix(text, "\n") {
		t.Errorf("want one line, got %q", text)
	}
	for _, part := range parts {
		if !strings.Contains(text, part) {
			t.Errorf("%q does not say %q", text, part)
		}
	}
}
