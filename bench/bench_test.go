package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary serve as the bench's worker processes,
// which the bench starts by re-executing itself.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == childFlag {
		childMain()
	}
	os.Exit(m.Run())
}

// TestSmoke runs one short round of every scenario for fencedlock on a
// redis-server of its own (uncontended-paired: a few small blocks), and
// checks that every row is there, with acquisitions and no errors, and
// that the paired row has all its cycles and a ratio of 1.00 to itself.
// Other scenarios' rows have no ratio.
func TestSmoke(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("redis-server is not on PATH, and CI=true requires this test to run")
		}
		t.Skip("redis-server is not on PATH: install it (e.g. apt-get install redis-server) to run the bench smoke test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	const blocks, blockCycles = 4, 20
	args := []string{"-libs", "fencedlock", "-rounds", "1", "-duration", "300ms", "-cycles", "200",
		"-blocks", strconv.Itoa(blocks), "-block-cycles", strconv.Itoa(blockCycles)}
	if code := run(ctx, args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit code %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(stdout.String(), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 2+len(columns) && fields[1] == "fencedlock" {
			rows[fields[0]] = fields[2:]
		}
	}
	for _, sc := range scenarios {
		cells, ok := rows[sc.name]
		if !ok {
			t.Errorf("no fencedlock row for %s in:\n%s", sc.name, stdout.String())
			continue
		}
		if acq := cells[0]; acq == "0" || acq == "-" {
			t.Errorf("%s: %s acquisitions", sc.name, acq)
		}
		if errs := cells[len(cells)-1]; errs != "0" {
			t.Errorf("%s: %s errors\n%s", sc.name, errs, stdout.String())
		}
		want := "-"
		if sc.paired {
			want = "1.00"
			if acq, full := cells[0], strconv.Itoa(blocks*blockCycles); acq != full {
				t.Errorf("%s: %s acquisitions, want %s", sc.name, acq, full)
			}
			if cells[slices.Index(columns, "cycle p50 µs")] == "-" {
				t.Errorf("%s: no cycle p50", sc.name)
			}
		}
		if got := cells[slices.Index(columns, "vs "+pairedReference)]; got != want {
			t.Errorf("%s: vs %s %s, want %s", sc.name, pairedReference, got, want)
		}
	}
}

// TestIsScriptInner checks the MONITOR line classification.
func TestIsScriptInner(t *testing.T) {
	for line, want := range map[string]bool{
		`+1700000000.000001 [0 lua] "GET" "k"`:                     true,
		`+1700000000.000001 [0 127.0.0.1:5555] "EVALSHA" "ab" "1"`: false,
		`+1700000000.000001 [0 unix:/tmp/redis.sock] "PING"`:       false,
		`+1700000000.000001 [0 127.0.0.1:5555] "ECHO" "lua]"`:      false,
	} {
		if got := isScriptInner(line); got != want {
			t.Errorf("isScriptInner(%q) = %v, want %v", line, got, want)
		}
	}
}

// TestPercentile checks the nearest-rank percentile.
func TestPercentile(t *testing.T) {
	v := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for p, want := range map[float64]float64{50: 5, 90: 9, 99: 10, 100: 10, 1: 1} {
		if got := percentile(v, p); got != want {
			t.Errorf("percentile(%v) = %v, want %v", p, got, want)
		}
	}
}
