package mysqltest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// When the test binary dies, the kernel kills its mariadbd. Whatever
// happens, the test leaves no mariadbd behind: its cleanup kills one that
// outlived its test binary.
func TestDiesWithTestBinary(t *testing.T) {
	Find(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	f := strings.Fields(line)
	if err != nil || len(f) != 3 || f[0] != "started" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child said %q (%v); want \"started ADDR DIR\"", line, err)
	}
	addr, dir := f[1], f[2]
	dataDir := filepath.Join(dir, "data")
	pid, err := readPID(filepath.Join(dir, "mysqld.pid"))
	if err != nil {
		t.Error(err)
	}
	t.Cleanup(func() {
		if pid != 0 && isServerOf(pid, dataDir) {
			t.Errorf("mariadbd %d outlived its test binary: killing it", pid)
			syscall.Kill(pid, syscall.SIGKILL)
			waitGone(pid, dataDir, 10*time.Second)
		}
		os.RemoveAll(dir)
	})
	cmd.Process.Kill()
	cmd.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("mariadbd on %s still accepts connections 10s after its test binary was killed", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if pid != 0 && waitGone(pid, dataDir, 10*time.Second) != nil {
		t.Errorf("mariadbd %d still runs 10s after its test binary was killed", pid)
	}
}

// readPID reads the server's PID from its pid file.
func readPID(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("%s: PID %q", path, b)
	}
	return pid, nil
}

// isServerOf reports whether process pid runs, not as a zombie, the
// mariadbd of dataDir (its command line has --datadir=dataDir): a PID
// reused by another process is not it.
func isServerOf(pid int, dataDir string) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	if i := strings.LastIndexByte(string(stat), ')'); i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	for _, arg := range strings.Split(string(cmdline), "\x00") {
		if arg == "--datadir="+dataDir {
			return true
		}
	}
	return false
}

// waitGone waits until process pid is no longer dataDir's server.
func waitGone(pid int, dataDir string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for isServerOf(pid, dataDir) {
		if time.Now().After(deadline) {
			return fmt.Errorf("mariadbd %d still runs %v later", pid, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}
