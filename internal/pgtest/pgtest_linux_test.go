package pgtest

import (
	"bufio"
	"bytes"
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

// As root, the server runs as the postgres user, in a directory it owns.
func TestRunsAsPostgresUserWhenRoot(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("not running as root")
	}
	s := Shared(t)
	o, err := lookupOwner()
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{s.Dir, s.dataDir(), s.socketDir()} {
		if uid := ownerOf(t, dir); uid != o.uid {
			t.Errorf("%s is owned by uid %d; want %d (postgres)", dir, uid, o.uid)
		}
	}
	pid := strings.TrimSpace(query(t, s, "SELECT pg_backend_pid()::text"))
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Skipf("cannot read the backend's status: %v", err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "Uid:") {
			if f := strings.Fields(line); len(f) < 2 || f[1] != fmt.Sprint(o.uid) {
				t.Errorf("backend %s runs with %q; want uid %d", pid, line, o.uid)
			}
		}
	}
}

func ownerOf(t *testing.T, path string) uint32 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Uid
}

// When the test binary dies, the kernel kills its postgres. Whatever
// happens, the test leaves no postgres and no shared memory behind: its
// cleanup kills a postmaster that outlived its test binary, and removes
// the System V segment that a postmaster killed with SIGKILL leaves.
// (Dynamic shared memory is in files of the data directory, which the
// cleanup removes too: the server runs with
// dynamic_shared_memory_type=mmap.)
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
	pm, err := readPostmasterPID(dataDir)
	if err != nil {
		t.Error(err)
	}
	t.Cleanup(func() {
		reap(t, pm, dataDir)
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
			t.Fatalf("postgres on %s still accepts connections 10s after its test binary was killed", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if pm.pid != 0 && waitGone(pm.pid, dataDir, 10*time.Second) != nil {
		t.Errorf("postmaster %d still runs 10s after its test binary was killed", pm.pid)
	}
}

// postmaster is what postmaster.pid says of a running server.
type postmaster struct {
	pid         int
	key, shmid  int64 // of its System V shared memory segment
	hasSegment  bool
	description string // for the messages
}

// readPostmasterPID reads dataDir/postmaster.pid: the postmaster's PID on
// its first line, and the key and id of its System V shared memory
// segment on its seventh.
func readPostmasterPID(dataDir string) (postmaster, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return postmaster{}, err
	}
	lines := strings.Split(string(b), "\n")
	var pm postmaster
	if len(lines) < 7 {
		return pm, fmt.Errorf("postmaster.pid has %d lines; want 7 or more:\n%s", len(lines), b)
	}
	if pm.pid, err = strconv.Atoi(strings.TrimSpace(lines[0])); err != nil || pm.pid <= 0 {
		return postmaster{}, fmt.Errorf("postmaster.pid: PID %q", lines[0])
	}
	pm.description = fmt.Sprintf("postmaster %d", pm.pid)
	if f := strings.Fields(lines[6]); len(f) == 2 {
		key, err1 := strconv.ParseInt(f[0], 10, 64)
		shmid, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 == nil && err2 == nil {
			pm.key, pm.shmid, pm.hasSegment = key, shmid, true
			pm.description += fmt.Sprintf(", shared memory key %d id %d", key, shmid)
		}
	}
	if !pm.hasSegment {
		return pm, fmt.Errorf("postmaster.pid: no shared memory key and id on line 7: %q", lines[6])
	}
	return pm, nil
}

// reap kills pm, the postmaster of dataDir, if it still runs, and
// removes its System V shared memory segment once no process is attached
// to it (the backends exit when they see the postmaster die).
func reap(t *testing.T, pm postmaster, dataDir string) {
	t.Helper()
	if pm.pid != 0 && isPostmasterOf(pm.pid, dataDir) {
		t.Errorf("%s outlived its test binary: killing it", pm.description)
		syscall.Kill(pm.pid, syscall.SIGKILL)
		if err := waitGone(pm.pid, dataDir, 10*time.Second); err != nil {
			t.Error(err)
		}
	}
	if !pm.hasSegment {
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		nattch, ok := segment(pm.key, pm.shmid)
		if !ok {
			return // gone: postgres removed it
		}
		if nattch == 0 || time.Now().After(deadline) {
			if nattch != 0 {
				t.Errorf("%d processes still attached to the shared memory of %s 10s after it died", nattch, pm.description)
			}
			if out, err := exec.Command("ipcrm", "-m", strconv.FormatInt(pm.shmid, 10)).CombinedOutput(); err != nil {
				t.Errorf("ipcrm -m %d: %v: %s", pm.shmid, err, bytes.TrimSpace(out))
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// isPostmasterOf reports whether process pid runs, not as a zombie, the
// postgres command line of dataDir's server ("postgres -D dataDir ..."):
// a PID reused by another process is not it.
func isPostmasterOf(pid int, dataDir string) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	if i := bytes.LastIndexByte(stat, ')'); i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(string(cmdline), "\x00")
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "-D" && args[i+1] == dataDir {
			return true
		}
	}
	return false
}

// waitGone waits until process pid is no longer dataDir's postmaster.
func waitGone(pid int, dataDir string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for isPostmasterOf(pid, dataDir) {
		if time.Now().After(deadline) {
			return fmt.Errorf("postmaster %d still runs %v after SIGKILL", pid, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// segment looks up the System V shared memory segment of key and shmid in
// /proc/sysvipc/shm, and returns the number of processes attached to it.
func segment(key, shmid int64) (nattch int64, ok bool) {
	b, err := os.ReadFile("/proc/sysvipc/shm")
	if err != nil {
		return 0, false
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) == 0 {
		return 0, false
	}
	// The header names the columns: key shmid perms size cpid lpid nattch ...
	cols := strings.Fields(lines[0])
	idx := func(name string) int {
		for i, c := range cols {
			if c == name {
				return i
			}
		}
		return -1
	}
	ki, si, ni := idx("key"), idx("shmid"), idx("nattch")
	if ki < 0 || si < 0 || ni < 0 {
		return 0, false
	}
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) <= ni || len(f) <= ki || len(f) <= si {
			continue
		}
		k, err1 := strconv.ParseInt(f[ki], 10, 64)
		s, err2 := strconv.ParseInt(f[si], 10, 64)
		n, err3 := strconv.ParseInt(f[ni], 10, 64)
		if err1 == nil && err2 == nil && err3 == nil && k == key && s == shmid {
			return n, true
		}
	}
	return 0, false
}
