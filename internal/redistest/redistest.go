// Package redistest starts redis-server processes for tests and gives
// tests one way to run against both miniredis and a real Redis.
//
// Real-Redis tests need redis-server on PATH. Without it they are skipped
// with a message, except when the environment has CI=true: then they fail.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock/internal/servertest"
)

// Server is a redis-server process on a loopback port, with no
// persistence, in a temporary directory.
type Server struct {
	Addr string

	mu   sync.Mutex // protects cmd and done
	cmd  *exec.Cmd
	done <-chan struct{} // closed when cmd has exited
	args []string
	dir  string
}

// Binary returns the path of redis-server, or skips tb (fails it when
// CI=true) when it is not on PATH.
func Binary(tb testing.TB) string {
	tb.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		err = fmt.Errorf("redis-server is not on PATH: %w", err)
	}
	program.Require(tb, err)
	return path
}

// program counts the tests and benchmarks Binary skipped.
var program = &servertest.Program{Name: "redis-server", Tests: "real-Redis", Install: "apt-get install redis-server"}

// Start starts a redis-server and stops it when tb's test ends. extra
// arguments are passed on its command line, e.g. "--cluster-enabled", "yes".
// A first extra argument that is not an option is a config file, which
// redis-server reads only as its first argument (Sentinel needs one).
func Start(tb testing.TB, extra ...string) *Server {
	tb.Helper()
	s, err := start(Binary(tb), extra...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

func start(bin string, extra ...string) (*Server, error) {
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, err
	}
	var conf []string
	if len(extra) > 0 && !strings.HasPrefix(extra[0], "-") {
		conf, extra = extra[:1], extra[1:]
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := servertest.FreePort()
		if err != nil {
			return nil, err
		}
		args := append([]string{
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir,
			"--protected-mode", "no", "--loglevel", "warning",
			"--logfile", filepath.Join(dir, "redis.log"),
		}, extra...)
		args = append(conf[:len(conf):len(conf)], args...)
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), args: args, dir: dir}
		if lastErr = s.launch(bin); lastErr == nil {
			return s, nil
		}
	}
	os.RemoveAll(dir)
	return nil, fmt.Errorf("redistest: starting redis-server: %w", lastErr)
}

func (s *Server) launch(bin string) error {
	cmd := exec.Command(bin, s.args...)
	dieWithParent(cmd)
	// A server that refuses its command line (an option it does not
	// know, say) says why on stderr, before it opens its log file.
	out, err := os.Create(filepath.Join(s.dir, "redis.stderr"))
	if err != nil {
		return err
	}
	defer out.Close() // the server has its own copy
	cmd.Stdout, cmd.Stderr = out, out
	// Another test's server may hold the port (it was free a moment ago):
	// only an answer from this process means the server is up. This one
	// then fails to bind and exits, and the caller tries again.
	var other atomic.Int64 // the pid of another process that answered
	ready := func() bool {
		id := pid(s.Addr)
		if id != 0 && id != cmd.Process.Pid {
			other.Store(int64(id))
		}
		return id == cmd.Process.Pid
	}
	logTail := func() string {
		if id := other.Load(); id != 0 {
			return fmt.Sprintf("%s was answered by process %d, not by this one (%d); %s", s.Addr, id, cmd.Process.Pid, s.logTail())
		}
		return s.logTail()
	}
	done, err := servertest.Launch(cmd, ready, 5*time.Millisecond, 10*time.Second, logTail)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	return nil
}

// logTail returns the end of the server's stderr and of its log file.
func (s *Server) logTail() string {
	var parts []string
	for _, name := range []string{"redis.stderr", "redis.log"} {
		b, _ := os.ReadFile(filepath.Join(s.dir, name))
		if len(b) > 2000 {
			b = b[len(b)-2000:]
		}
		if t := strings.TrimSpace(string(b)); t != "" {
			parts = append(parts, name+": "+t)
		}
	}
	if len(parts) == 0 {
		return "(no output on stderr, no log)"
	}
	return strings.Join(parts, "\n")
}

// pid returns the process id of the server (or Sentinel) that answers
// at addr, from INFO, or 0 when none answers, or when it does not take
// commands yet (PING answers LOADING while it loads its data; INFO
// answers then too).
func pid(addr string) int {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return 0
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\nINFO server\r\n")); err != nil {
		return 0
	}
	r := bufio.NewReader(c)
	if pong, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(pong, "+PONG") {
		return 0
	}
	head, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(head, "$") {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(head[1:]))
	if err != nil || n < 0 {
		return 0
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			id, _ := strconv.Atoi(strings.TrimSpace(v))
			return id
		}
	}
	return 0
}

// Kill stops the server with SIGKILL. Its data is gone: it had no
// persistence.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd, s.done = nil, nil
	s.mu.Unlock()
	if cmd != nil {
		cmd.Process.Kill()
		<-done // its port is closed
	}
}

// Restart kills the server and starts it again, empty, on the same port.
// Another process may take the port in between (tests of other packages
// pick free ports at the same time): Restart tries again for up to 5
// seconds before it fails tb.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.Kill()
	os.Remove(filepath.Join(s.dir, "nodes.conf"))
	bin := Binary(tb)
	deadline := time.Now().Add(restartFor)
	for {
		err := s.launch(bin)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: restarting redis-server on %s: %v", s.Addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// restartFor is how long Restart keeps trying to start the server again.
const restartFor = 5 * time.Second

// Close kills the server and removes its directory.
func (s *Server) Close() {
	s.Kill()
	os.RemoveAll(s.dir)
}

// Client returns a client of the server, closed when tb's test ends.
func (s *Server) Client(tb testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	tb.Cleanup(func() { c.Close() })
	return c
}

// StartCluster starts a one-node Redis Cluster that serves all 16384
// slots, and returns the server. Use a redis.ClusterClient with its Addr.
func StartCluster(tb testing.TB) *Server {
	tb.Helper()
	s := Start(tb, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	ctx := context.Background()
	if err := AddSlots(ctx, c, 0, 16383); err != nil {
		tb.Fatalf("redistest: assigning the slots: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := c.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			return s
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: cluster not ok: %v %s", err, info)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// StartClusterN starts a Redis Cluster of n masters (no replicas) on
// loopback ports, the slots split evenly between them in order, and
// returns the servers. Use a redis.ClusterClient with their Addrs.
func StartClusterN(tb testing.TB, n int) []*Server {
	tb.Helper()
	servers := make([]*Server, n)
	for i := range servers {
		servers[i] = Start(tb, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	}
	FormCluster(tb, servers...)
	return servers
}

// FormCluster makes servers, started with --cluster-enabled yes and a
// --cluster-config-file of their own, a Redis Cluster of masters (no
// replicas), the slots split evenly between them in order, and waits
// until each of them says the cluster is ok and knows them all.
func FormCluster(tb testing.TB, servers ...*Server) {
	tb.Helper()
	ctx := context.Background()
	n := len(servers)
	clients := make([]*redis.Client, n)
	for i, s := range servers {
		clients[i] = redis.NewClient(&redis.Options{Addr: s.Addr})
		defer clients[i].Close()
	}
	for i, c := range clients {
		from, to := i*16384/n, (i+1)*16384/n-1
		if err := AddSlots(ctx, c, from, to); err != nil {
			tb.Fatalf("redistest: assigning the slots %d..%d: %v", from, to, err)
		}
		if i > 0 {
			host, port, _ := strings.Cut(servers[0].Addr, ":")
			if err := c.ClusterMeet(ctx, host, port).Err(); err != nil {
				tb.Fatalf("redistest: CLUSTER MEET: %v", err)
			}
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, c := range clients {
		for {
			info, err := c.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(n)+"\r") {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("redistest: cluster of %d not ok: %v %s", n, err, info)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
