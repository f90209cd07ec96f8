package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// openPTY returns the master and the terminal of a new pseudo-terminal.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	var unlock int32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); errno != 0 {
		t.Fatalf("unlocking the pseudo-terminal: %v", errno)
	}
	var n uint32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, master.Fd(), syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); errno != 0 {
		t.Fatalf("naming the pseudo-terminal: %v", errno)
	}
	tty, err = os.OpenFile("/dev/pts/"+strconv.FormatUint(uint64(n), 10), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tty.Close() })
	return master, tty
}

// screen collects what a pseudo-terminal's master reads.
type screen struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *screen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// Run in a terminal as its foreground job, CMD can read from the
// terminal (in a process group of its own it would be stopped by
// SIGTTIN), and SIGINT is left to the terminal: a SIGINT sent to
// fencedlock alone does not reach CMD, the terminal's Ctrl-C does. The
// shell's trap records the SIGINTs it gets. The lock is released.
func TestRunInTerminal(t *testing.T) {
	e := newEnv(t)
	master, tty := openPTY(t)
	script := `trap 'echo "SIGINT $((n += 1))" >> got' INT; read line; echo "read: $line"; echo ready > ready; ` +
		`while [ ! -e stop ]; do sleep 0.02; done; exit 3`
	cmd := exec.Command(bin, "run", "-prefix", e.b.Prefix, "-redis", e.url, "tty", "--", "sh", "-c", script)
	cmd.Dir = e.dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	// A session of its own, with the pseudo-terminal as its controlling
	// terminal: fencedlock is its foreground job, as in a shell.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	var out screen
	go func() { _, _ = io.Copy(&out, master) }()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	if _, err := master.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "CMD to read from the terminal", func() bool { return strings.Contains(out.String(), "read: hello") })
	waitUntil(t, "CMD's trap", func() bool { return e.fileExists("ready") })
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // time for a SIGINT passed on to arrive, if it were
	if got := e.read("got"); got != "" {
		t.Fatalf("a SIGINT to fencedlock alone reached CMD: %q", got)
	}
	if _, err := master.Write([]byte{3}); err != nil { // Ctrl-C
		t.Fatal(err)
	}
	waitUntil(t, "CMD to get the terminal's SIGINT", func() bool { return e.read("got") != "" })
	e.touch("stop")
	select {
	case <-exited:
	case <-time.After(waitLimit):
		t.Fatalf("fencedlock did not exit; the terminal shows %q", out.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != 3 {
		t.Errorf("status %d, want CMD's 3; the terminal shows %q", code, out.String())
	}
	if got := e.read("got"); got != "SIGINT 1\n" {
		t.Errorf("CMD's trap wrote %q; want one SIGINT", got)
	}
	e.noLockLeft("tty")
}
