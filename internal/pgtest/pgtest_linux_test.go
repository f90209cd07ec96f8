package pgtest

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
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
