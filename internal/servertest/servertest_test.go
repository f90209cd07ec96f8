package servertest

import (
	"bytes"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestRequire(t *testing.T) {
	p := &Program{Name: "frobd", Tests: "frob", Install: "apt-get install frobd"}
	var buf bytes.Buffer
	p.Report(&buf)
	if buf.Len() != 0 {
		t.Errorf("report with nothing skipped: %q", buf.String())
	}

	t.Setenv("CI", "")
	ft := &Recorder{TB: t}
	ft.Run(func() { p.Require(ft, nil) })
	if ft.WasSkipped || ft.WasFailed {
		t.Fatalf("Require(nil) skipped %v, failed %v", ft.WasSkipped, ft.WasFailed)
	}
	missing := errors.New("frobd is not on PATH")
	for i := 0; i < 2; i++ {
		ft = &Recorder{TB: t}
		ft.Run(func() { p.Require(ft, missing) })
		if !ft.WasSkipped || ft.WasFailed || !strings.Contains(ft.Msg, "apt-get install frobd") || !strings.Contains(ft.Msg, "not on PATH") {
			t.Fatalf("Require without the program: skipped %v, failed %v, message %q; want a skip saying how to install it", ft.WasSkipped, ft.WasFailed, ft.Msg)
		}
	}
	if p.Skipped() != 2 {
		t.Errorf("Skipped = %d, want 2", p.Skipped())
	}
	p.Report(&buf)
	out := buf.String()
	if strings.Count(out, "\n") != 1 || !strings.HasPrefix(out, "2 frob tests skipped") {
		t.Errorf("report is not one line starting %q: %q", "2 frob tests skipped", out)
	}
	for _, want := range []string{"frobd", "apt-get install frobd", "CI=true"} {
		if !strings.Contains(out, want) {
			t.Errorf("report %q does not mention %q", out, want)
		}
	}

	t.Setenv("CI", "true")
	ft = &Recorder{TB: t}
	ft.Run(func() { p.Require(ft, missing) })
	if !ft.WasFailed || ft.WasSkipped || !strings.Contains(ft.Msg, "CI=true") {
		t.Fatalf("Require with CI=true: skipped %v, failed %v, message %q; want a failure", ft.WasSkipped, ft.WasFailed, ft.Msg)
	}
	if p.Skipped() != 2 {
		t.Errorf("a failure was counted as a skip: Skipped = %d", p.Skipped())
	}
}

type closer struct{ closed int }

func (c *closer) Close() { c.closed++ }

func TestShared(t *testing.T) {
	var sh Shared[*closer]
	starts := 0
	start := func() (*closer, error) {
		starts++
		if starts == 1 {
			return nil, errors.New("first start fails")
		}
		return &closer{}, nil
	}
	if _, err := sh.Get(start); err == nil {
		t.Fatal("Get returned no error of start")
	}
	a, err := sh.Get(start)
	if err != nil || a == nil {
		t.Fatalf("Get after a failed start = %v, %v", a, err)
	}
	if b, _ := sh.Get(start); b != a || starts != 2 {
		t.Fatalf("second Get started again (starts %d) or returned another server", starts)
	}
	sh.Stop()
	sh.Stop()
	if a.closed != 1 {
		t.Errorf("server closed %d times, want 1", a.closed)
	}
	if c, _ := sh.Get(start); c == a || starts != 3 {
		t.Errorf("Get after Stop did not start a new server")
	}
}

func TestLaunch(t *testing.T) {
	logTail := func() string { return "the log" }
	never := func() bool { return false }

	t.Run("ready", func(t *testing.T) {
		cmd := exec.Command("sleep", "30")
		polls := 0
		exited, err := Launch(cmd, func() bool { polls++; return polls == 3 }, time.Millisecond, 10*time.Second, logTail)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-exited:
			t.Fatal("exited closed while the process runs")
		default:
		}
		cmd.Process.Kill()
		<-exited
	})
	t.Run("exits_at_start", func(t *testing.T) {
		_, err := Launch(exec.Command("false"), never, time.Millisecond, 10*time.Second, logTail)
		if err == nil || !strings.Contains(err.Error(), "false exited at start: the log") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("not_ready", func(t *testing.T) {
		cmd := exec.Command("sleep", "30")
		_, err := Launch(cmd, never, time.Millisecond, 50*time.Millisecond, logTail)
		if err == nil || !strings.Contains(err.Error(), "sleep was not ready within 50ms: the log") {
			t.Errorf("err = %v", err)
		}
		if cmd.ProcessState == nil {
			t.Error("the process was not waited for")
		}
	})
	t.Run("not_found", func(t *testing.T) {
		if _, err := Launch(exec.Command("/nonexistent/frobd"), never, time.Millisecond, time.Second, logTail); err == nil {
			t.Error("no error for a missing binary")
		}
	})
}

func TestFreePort(t *testing.T) {
	port, err := FreePort()
	if err != nil || port <= 0 {
		t.Fatalf("FreePort = %d, %v", port, err)
	}
}
