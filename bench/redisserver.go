package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// redisServer is a redis-server process the bench started for itself.
type redisServer struct {
	Addr string
	cmd  *exec.Cmd
	dir  string
	exit chan struct{} // closed when the process has exited
}

// startRedisServer starts redis-server on a free loopback port, with no
// persistence and its files in a temporary directory, and waits until it
// answers PING. The caller must call Stop, which also cleans up after a
// failed start.
func startRedisServer(ctx context.Context) (*redisServer, error) {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not found (install it, or name a server with -redis): %w", err)
	}
	dir, err := os.MkdirTemp("", "fencedlock-bench-redis-")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &redisServer{
		Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		dir:  dir,
		exit: make(chan struct{}),
	}
	s.cmd = exec.Command(path,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--logfile", filepath.Join(dir, "redis.log"),
	)
	dieWithParent(s.cmd)
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("starting redis-server: %w", err)
	}
	go func() {
		_ = s.cmd.Wait()
		close(s.exit)
	}()
	if err := s.waitReady(ctx, 10*time.Second); err != nil {
		log := s.logTail()
		s.Stop()
		return nil, fmt.Errorf("redis-server on %s: %w%s", s.Addr, err, log)
	}
	return s, nil
}

// waitReady polls the server with PING until it answers, it exits, or
// timeout passes.
func (s *redisServer) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		c, err := dialRaw(s.Addr)
		if err == nil {
			reply, perr := c.Do("PING")
			c.Close()
			if perr == nil && reply == "PONG" {
				return nil
			}
			err = perr
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer to PING within %v: %v", timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.exit:
			return errors.New("exited during start-up")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// logTail returns the end of the server's log, for an error message.
func (s *redisServer) logTail() string {
	b, err := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return "\nredis.log:\n" + string(b)
}

// Stop kills the server, waits for it to exit and removes its directory.
// It is safe to call more than once.
func (s *redisServer) Stop() {
	if s == nil {
		return
	}
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		select {
		case <-s.exit:
		case <-time.After(5 * time.Second):
		}
	}
	if s.dir != "" {
		os.RemoveAll(s.dir)
		s.dir = ""
	}
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// rawConn is a minimal RESP2 connection for the bench's own commands
// (PING, INFO, FLUSHALL, ECHO). It opens no pool and sends no handshake,
// so it adds exactly one command to Redis' counters per call of Do.
type rawConn struct {
	conn net.Conn
	r    *bufio.Reader
}

// dialRaw connects to addr.
func dialRaw(addr string) (*rawConn, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	return &rawConn{conn: c, r: bufio.NewReader(c)}, nil
}

// Close closes the connection.
func (c *rawConn) Close() error { return c.conn.Close() }

// Do sends one command and returns its reply as a string: the text of a
// status or bulk reply, or the decimal form of an integer. An error reply
// is returned as an error.
func (c *rawConn) Do(args ...string) (string, error) {
	if err := c.conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.conn.Write([]byte(b.String())); err != nil {
		return "", err
	}
	return c.readReply()
}

// readReply reads one reply that is not an array.
func (c *rawConn) readReply() (string, error) {
	line, err := readLine(c.r)
	if err != nil {
		return "", err
	}
	if line == "" {
		return "", errors.New("empty reply line")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("redis: %s", line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", fmt.Errorf("bad bulk length %q", line)
		}
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(c.r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}

// readLine reads one CRLF-terminated line without its terminator.
func readLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r"), nil
}

// infoField returns the value of one field of an INFO reply.
func infoField(info, name string) (string, bool) {
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimRight(line, "\r"), ":"); ok && k == name {
			return v, true
		}
	}
	return "", false
}

// commandsProcessed returns the server's total_commands_processed.
func (c *rawConn) commandsProcessed() (int64, error) {
	info, err := c.Do("INFO", "stats")
	if err != nil {
		return 0, err
	}
	v, ok := infoField(info, "total_commands_processed")
	if !ok {
		return 0, errors.New("INFO stats has no total_commands_processed")
	}
	return strconv.ParseInt(v, 10, 64)
}
