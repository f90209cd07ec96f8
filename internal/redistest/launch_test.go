package redistest

import (
	"path/filepath"
	"strings"
	"testing"
)

// A server whose port another test's server took between FreePort and
// the bind exits at once; the answer of that other server must not pass
// for its own. (In CI another server took a Sentinel's port that way, and
// the test then waited for a Sentinel that was never there.)
func TestLaunchDoesNotTakeAnotherServerForItself(t *testing.T) {
	other := Start(t)
	_, port, _ := strings.Cut(other.Addr, ":")
	dir := t.TempDir()
	s := &Server{Addr: other.Addr, dir: dir, args: []string{
		"--port", port, "--bind", "127.0.0.1", "--save", "", "--dir", dir,
		"--logfile", filepath.Join(dir, "redis.log"),
	}}
	if err := s.launch(Binary(t)); err == nil {
		s.Kill()
		t.Fatalf("launch on %s, a port another server holds, succeeded", s.Addr)
	} else if !strings.Contains(err.Error(), "exited at start") {
		t.Fatalf("launch on a taken port: %v, want the server's exit", err)
	}
	if got, want := pid(other.Addr), other.cmd.Process.Pid; got != want {
		t.Fatalf("pid(%s) = %d, want %d", other.Addr, got, want)
	}
}
