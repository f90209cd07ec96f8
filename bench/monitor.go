package main

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// monitorCounts is what a MONITOR window saw.
type monitorCounts struct {
	Sent  int // commands sent by clients
	Inner int // commands run by scripts (redis.call), not counted in Sent
}

// commandMonitor counts the commands Redis executes through a MONITOR
// connection, between Start and Stop. Stop marks the end of the window
// with an ECHO of a random marker, sent on a connection opened before the
// window, so the window holds none of the bench's own commands.
type commandMonitor struct {
	conn   net.Conn
	marker *rawConn
	text   string // the marker's text
	done   chan struct{}
	counts monitorCounts
	err    error
}

// startMonitor opens the MONITOR connection and the marker connection.
// Every command Redis runs after it returns is counted.
func startMonitor(addr string) (*commandMonitor, error) {
	var nonce [8]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, err
	}
	marker, err := dialRaw(addr)
	if err != nil {
		return nil, err
	}
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		marker.Close()
		return nil, err
	}
	m := &commandMonitor{
		conn:   conn,
		marker: marker,
		text:   "fencedlock-bench-window-end-" + hex.EncodeToString(nonce[:]),
		done:   make(chan struct{}),
	}
	r := bufio.NewReader(conn)
	if err := m.subscribe(r); err != nil {
		m.close()
		return nil, err
	}
	go m.read(r)
	return m, nil
}

// subscribe sends MONITOR and reads its +OK.
func (m *commandMonitor) subscribe(r *bufio.Reader) error {
	if err := m.conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return err
	}
	if _, err := m.conn.Write([]byte("MONITOR\r\n")); err != nil {
		return err
	}
	line, err := readLine(r)
	if err != nil {
		return err
	}
	if line != "+OK" {
		return fmt.Errorf("MONITOR answered %q", line)
	}
	return m.conn.SetDeadline(time.Time{})
}

// read counts monitor lines until the marker arrives or the connection
// fails.
func (m *commandMonitor) read(r *bufio.Reader) {
	defer close(m.done)
	for {
		line, err := readLine(r)
		if err != nil {
			m.err = fmt.Errorf("reading MONITOR: %w", err)
			return
		}
		if strings.Contains(line, m.text) {
			return
		}
		if !strings.HasPrefix(line, "+") {
			continue
		}
		if isScriptInner(line) {
			m.counts.Inner++
		} else {
			m.counts.Sent++
		}
	}
}

// isScriptInner reports whether a MONITOR line shows a command that a
// script ran: its source in brackets is "<db> lua" rather than a client
// address, as in `+1700000000.000001 [0 lua] "GET" "k"`.
func isScriptInner(line string) bool {
	open := strings.IndexByte(line, '[')
	if open < 0 {
		return false
	}
	end := strings.IndexByte(line[open:], ']')
	if end < 0 {
		return false
	}
	return strings.HasSuffix(line[open:open+end], "lua")
}

// Stop ends the window and returns its counts.
func (m *commandMonitor) Stop() (monitorCounts, error) {
	defer m.close()
	if _, err := m.marker.Do("ECHO", m.text); err != nil {
		return monitorCounts{}, fmt.Errorf("sending the MONITOR end marker: %w", err)
	}
	select {
	case <-m.done:
	case <-time.After(30 * time.Second):
		return monitorCounts{}, errors.New("MONITOR did not show the end marker within 30s")
	}
	return m.counts, m.err
}

// close closes both connections; the reader then ends.
func (m *commandMonitor) close() {
	m.conn.Close()
	m.marker.Close()
}
