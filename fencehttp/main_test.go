package fencehttp_test

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestMain fails the package when goroutines of net/http (servers,
// connections, transports) outlive the tests: every httptest.Server and
// client the tests start must be closed.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if left := leftoverGoroutines(2 * time.Second); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: %d goroutines of net/http left after the tests:\n\n%s\n", len(left), strings.Join(left, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}

// leftoverGoroutines waits up to timeout for the goroutines running
// net/http code to end, and returns the stacks of those still running.
func leftoverGoroutines(timeout time.Duration) []string {
	deadline := time.Now().Add(timeout)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var left []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "net/http.") && !strings.Contains(g, "leftoverGoroutines") {
				left = append(left, g)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(10 * time.Millisecond)
	}
}
