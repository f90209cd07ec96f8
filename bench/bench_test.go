package main

import (
	"bytes"
	"context"
	"math"
	"os"
	"os/exec"
	"regexp"
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

// TestSmoke runs one short round of every scenario for fencedlock and
// redislock (its peer in the ratios) on a redis-server of its own
// (uncontended-paired: a few small blocks), and checks that every
// fencedlock row is there, with acquisitions, no errors and a numeric
// Redis CPU per acquisition, that the paired row has all its cycles and a
// ratio of 1.00 to itself (other scenarios' rows have no ratio), that
// every key figure's table is there with numeric medians, and that every
// target has a numeric median and a PASS or MISS.
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
	args := []string{"-libs", "fencedlock,redislock", "-rounds", "1", "-duration", "300ms", "-cycles", "200",
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
		if cpu := cells[slices.Index(columns, "cpu µs/acq")]; !positive(cpu) {
			t.Errorf("%s: cpu µs/acq %q, want a positive number", sc.name, cpu)
		}
	}
	out := stdout.String()
	for _, k := range keyFigures {
		section := textSection(out, k.title+":")
		if len(section) < 2 {
			t.Errorf("no table for the key figure %q in:\n%s", k.title, out)
			continue
		}
		for _, line := range section[1:] {
			cells := splitCells(line)
			// scenario, library, one round, median, range
			if len(cells) != 5 || cells[1] != pairedReference {
				continue
			}
			if !numeric(cells[3]) {
				t.Errorf("%s: %s median %q, want a number", k.title, cells[0], cells[3])
			}
		}
	}
	section := textSection(out, "targets:")
	const wantTargets = 11 // uncontended 1, uncontended-paired 2, contended 4 each
	if len(section) != 1+wantTargets {
		t.Fatalf("targets table has %d lines, want %d in:\n%s", len(section), 1+wantTargets, out)
	}
	for _, line := range section[1:] {
		cells := splitCells(line)
		if len(cells) != len(targetColumns) {
			t.Errorf("target row %q has %d cells, want %d", line, len(cells), len(targetColumns))
			continue
		}
		if med := cells[slices.Index(targetColumns, "median")]; !numeric(med) {
			t.Errorf("target %q / %s: median %q, want a number", cells[0], cells[1], med)
		}
		if res := cells[len(cells)-1]; res != "PASS" && res != "MISS" {
			t.Errorf("target %q / %s: result %q, want PASS or MISS", cells[0], cells[1], res)
		}
	}
}

// textSection returns the lines after the line title up to the next
// blank line.
func textSection(out, title string) []string {
	lines := strings.Split(out, "\n")
	start := slices.Index(lines, title)
	if start < 0 {
		return nil
	}
	var section []string
	for _, l := range lines[start+1:] {
		if strings.TrimSpace(l) == "" {
			break
		}
		section = append(section, l)
	}
	return section
}

// splitCells splits a line of an aligned text table into its cells,
// which are separated by two spaces or more.
func splitCells(line string) []string {
	return regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(line), -1)
}

// numeric reports whether s is a number.
func numeric(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}

// positive reports whether s is a number above zero.
func positive(s string) bool {
	v, err := strconv.ParseFloat(s, 64)
	return err == nil && v > 0
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

// TestTargets checks the per-round ratios to the lowest peer and the
// decision on the median.
func TestTargets(t *testing.T) {
	nan := math.NaN()
	fig := func(cpu, busy float64) figures {
		return figures{CPUPerAcq: cpu, Busy: busy, WaitP99: 10, WaitMax: 20, VsFastest: nan}
	}
	rows := []row{
		{scenario: "1proc-8g", library: pairedReference, rounds: []figures{fig(100, 90), fig(120, 85), fig(90, 89)}},
		{scenario: "1proc-8g", library: "redsync", rounds: []figures{fig(50, 60), fig(100, 60), fig(200, 60)}},
		{scenario: "1proc-8g", library: "redislock", rounds: []figures{fig(80, 60), fig(150, 60), fig(100, 60)}},
	}
	ts := targets(rows)
	if len(ts) != 4 {
		t.Fatalf("%d targets, want 4", len(ts))
	}
	cpu := ts[0]
	if want := []float64{2, 1.2, 0.9}; !slices.Equal(cpu.values, want) {
		t.Errorf("CPU ratios %v, want %v", cpu.values, want)
	}
	if want := []string{"redsync", "redsync", "redislock"}; !slices.Equal(cpu.peers, want) {
		t.Errorf("lowest peers %v, want %v", cpu.peers, want)
	}
	cells := cpu.cells()
	if got := cells[len(cells)-1]; got != "MISS" {
		t.Errorf("CPU target %s, want MISS (median 1.2 > 1.00)", got)
	}
	if got := cells[slices.Index(targetColumns, "rounds met")]; got != "1/3" {
		t.Errorf("CPU target met in %s rounds, want 1/3", got)
	}
	busy := ts[1].cells()
	if got := busy[len(busy)-1]; got != "PASS" {
		t.Errorf("busy target %s, want PASS (median 89 >= 88)", got)
	}
}

// TestBlockCPUPerCycle checks that blocks whose CPU was not read are
// left out, with their cycles.
func TestBlockCPUPerCycle(t *testing.T) {
	r := pairedResult{
		Blocks:   [][]int64{{1, 1}, {1, 1, 1, 1}, {1, 1}},
		BlockCPU: []int64{210, -1, 410},
	}
	if got, want := blockCPUPerCycle(r, 10), 150.0; got != want {
		t.Errorf("blockCPUPerCycle = %v, want %v", got, want)
	}
}
