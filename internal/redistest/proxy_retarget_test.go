package redistest

import (
	"bufio"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// rtServer is a TCP server that greets every connection with its name and
// then echoes what it reads, prefixed with the name, until the client
// closes. It stops when the test ends.
func rtServer(t *testing.T, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	var mu sync.Mutex // protects conns
	var conns []net.Conn
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				if _, err := c.Write([]byte(name + "\n")); err != nil {
					return
				}
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(name + ":" + line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// rtDial connects to addr and returns the connection and a reader of its
// lines, failing the test on a read that takes more than two seconds.
func rtDial(t *testing.T, addr string) (net.Conn, func() (string, error)) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r := bufio.NewReader(c)
	return c, func() (string, error) {
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		line, err := r.ReadString('\n')
		return strings.TrimSuffix(line, "\n"), err
	}
}

// Retarget closes the connections to the old target, and connections made
// after it reach the new one; the proxy's faults keep working on them.
func TestProxyRetarget(t *testing.T) {
	a, b := rtServer(t, "A"), rtServer(t, "B")
	p := NewProxy(t, a)

	old, readOld := rtDial(t, p.Addr())
	if got, err := readOld(); err != nil || got != "A" {
		t.Fatalf("before Retarget: greeted %q, %v; want A", got, err)
	}

	p.Retarget(b)

	// The old connection is closed: its next read ends, and nothing it
	// sends reaches A any more.
	old.Write([]byte("ping\n"))
	if got, err := readOld(); err == nil {
		t.Fatalf("the connection to the old target is still open after Retarget: read %q", got)
	}

	c, read := rtDial(t, p.Addr())
	if got, err := read(); err != nil || got != "B" {
		t.Fatalf("after Retarget: greeted %q, %v; want B", got, err)
	}
	if _, err := c.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	if got, err := read(); err != nil || got != "B:ping" {
		t.Fatalf("echo after Retarget: %q, %v; want B:ping", got, err)
	}

	// Pause still holds the traffic of connections to the new target.
	p.Pause()
	if _, err := c.Write([]byte("held\n")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, err := c.Read(make([]byte, 16)); err == nil {
		t.Fatalf("read %d bytes while the proxy was paused", n)
	}
	p.Resume()
	if got, err := read(); err != nil || got != "B:held" {
		t.Fatalf("after Resume: %q, %v; want B:held", got, err)
	}

	// Retargeting back works the same way.
	p.Retarget(a)
	if got, err := read(); err == nil {
		t.Fatalf("the connection to B is still open after Retarget to A: read %q", got)
	}
	_, read = rtDial(t, p.Addr())
	if got, err := read(); err != nil || got != "A" {
		t.Fatalf("after Retarget back: greeted %q, %v; want A", got, err)
	}
}
