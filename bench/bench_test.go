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
// (paired: a few small blocks), and checks that every fencedlock row is
// there, with acquisitions, no errors and a numeric Redis CPU per
// acquisition, allocations per cycle in the uncontended rows only,
// script-inner commands in the rows with a counting pass, that the paired
// rows have all their cycles and a ratio of 1.00 to themselves (other
// scenarios' rows have no ratio), that every key figure's table is there
// with numeric medians, that the contention table has what each
// contended scenario adds for both libraries, and that every target has
// a numeric median and a PASS or MISS.
func TestSmoke(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("redis-server is not on PATH, and CI=true requires this test to run")
		}
		t.Skip("redis-server is not on PATH: install it (e.g. apt-get install redis-server) to run the bench smoke test")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
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
		allocs := cells[slices.Index(columns, "allocs/cycle")]
		if sc.cycles && !positive(allocs) {
			t.Errorf("%s: allocs/cycle %q, want a positive number", sc.name, allocs)
		} else if !sc.cycles && allocs != "-" {
			t.Errorf("%s: allocs/cycle %q in a contended row, want -", sc.name, allocs)
		}
		inner := cells[slices.Index(columns, "inner/acq")]
		if !sc.paired && !positive(inner) {
			t.Errorf("%s: inner/acq %q, want a positive number", sc.name, inner)
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
	contention := textSection(out, "what an acquisition costs Redis, and what contention adds to the library's uncontended cycle (medians over rounds):")
	added := map[string]bool{}
	for _, line := range contention {
		cells := splitCells(line)
		if len(cells) == 2+len(contentionColumns) && numeric(cells[slices.Index(contentionColumns, "+inner")+2]) {
			added[cells[0]+"/"+cells[1]] = true
		}
	}
	for _, sc := range scenarios {
		for _, lib := range []string{"fencedlock", "redislock"} {
			if !sc.cycles && !added[sc.name+"/"+lib] {
				t.Errorf("contention table: no numeric +inner for %s / %s in:\n%s", sc.name, lib, strings.Join(contention, "\n"))
			}
		}
	}
	section := textSection(out, "targets:")
	// uncontended, uncontended-ctx and uncontended-ctx-heeding 2 each
	// (CPU, allocations), uncontended-paired 2 (cycle, CPU),
	// uncontended-paired-ctx and uncontended-paired-ctx-heeding 3 each
	// (and request ctx / Background), 1proc-8g and 4proc-2g 4 each (CPU,
	// busy, wait p99, wait max), 8proc-4g and 1proc-32g 3 each (no wait
	// max).
	const wantTargets = 28
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

// TestTargets checks the per-round ratios to the lowest peer, busy %
// against the peers' median of the same round, the bounds of the 1x8 and
// 8x4 shapes (8x4: CPU 1.25, wait p99 32 × 2 ms, no wait max) and the
// decision on the median.
func TestTargets(t *testing.T) {
	nan := math.NaN()
	fig := func(cpu, busy, p99 float64) figures {
		return figures{CPUPerAcq: cpu, Busy: busy, WaitP99: p99, WaitMax: 20, VsFastest: nan}
	}
	rows := []row{
		{scenario: "1proc-8g", library: pairedReference, rounds: []figures{fig(100, 90, 10), fig(120, 85, 10), fig(90, 89, 10)}},
		{scenario: "1proc-8g", library: "redsync", rounds: []figures{fig(50, 60, 1), fig(100, 86, 1), fig(200, 95, 1)}},
		{scenario: "1proc-8g", library: "redislock", rounds: []figures{fig(80, 80, 1), fig(150, 84, 1), fig(100, 88, 1)}},
		{scenario: "1proc-8g", library: "rueidislock", rounds: []figures{fig(90, 70, 1), fig(150, 90, 1), fig(100, 91, 1)}},
		{scenario: "8proc-4g", library: pairedReference, rounds: []figures{fig(120, 80, 60), fig(130, 80, 70), fig(100, 80, 63)}},
		{scenario: "8proc-4g", library: "redsync", rounds: []figures{fig(100, 70, 1), fig(100, 70, 1), fig(100, 70, 1)}},
	}
	ts := targets(rows)
	if len(ts) != 7 {
		t.Fatalf("%d targets, want 7 (1proc-8g: CPU, busy, wait p99, wait max; 8proc-4g: CPU, busy, wait p99)", len(ts))
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
	// The peers' medians are 70, 86 and 91: 90-70, 85-86, 89-91.
	busy := ts[1]
	if want := []float64{20, -1, -2}; !slices.Equal(busy.values, want) {
		t.Errorf("busy %% less the peers' median %v, want %v", busy.values, want)
	}
	cells = busy.cells()
	if got := cells[len(cells)-1]; got != "MISS" {
		t.Errorf("busy target %s, want MISS (median -1 < 0)", got)
	}
	if got := cells[slices.Index(targetColumns, "rounds met")]; got != "1/3" {
		t.Errorf("busy target met in %s rounds, want 1/3", got)
	}
	if got := ts[2].cells()[slices.Index(targetColumns, "bound")]; got != "<= 20" {
		t.Errorf("1proc-8g wait p99 bound %q, want <= 20", got)
	}
	if got := ts[3].cells()[slices.Index(targetColumns, "bound")]; got != "<= 50" {
		t.Errorf("1proc-8g wait max bound %q, want <= 50", got)
	}

	cpu8 := ts[4].cells()
	if got := cpu8[slices.Index(targetColumns, "bound")]; got != "<= 1.25" {
		t.Errorf("8proc-4g CPU bound %q, want <= 1.25", got)
	}
	if got := cpu8[len(cpu8)-1]; got != "PASS" {
		t.Errorf("8proc-4g CPU target %s, want PASS (median 1.2 <= 1.25)", got)
	}
	p99 := ts[6].cells()
	if got := p99[slices.Index(targetColumns, "bound")]; got != "<= 64" {
		t.Errorf("8proc-4g wait p99 bound %q, want <= 64 (32 waiters × 2 ms)", got)
	}
	if got := p99[slices.Index(targetColumns, "rounds met")]; got != "2/3" {
		t.Errorf("8proc-4g wait p99 met in %s rounds, want 2/3", got)
	}
}

// TestUncontendedTargets checks the targets of the uncontended
// scenarios: the cycle and request ctx ratios of the paired rows, the
// Redis CPU ratios and the allocations, with their bounds.
func TestUncontendedTargets(t *testing.T) {
	nan := math.NaN()
	fig := func(cpu, allocs, vsFastest, vsBackground float64) figures {
		return figures{CPUPerAcq: cpu, Allocs: allocs, VsFastest: vsFastest, FastestPeer: "redislock", VsBackground: vsBackground}
	}
	rows := []row{
		{scenario: "uncontended-ctx", library: pairedReference, rounds: []figures{fig(120, 21, nan, nan), fig(100, 19, nan, nan)}},
		{scenario: "uncontended-ctx", library: "redislock", rounds: []figures{fig(100, 30, nan, nan), fig(100, 30, nan, nan)}},
		{scenario: "uncontended-paired-ctx", library: pairedReference, rounds: []figures{fig(100, 40, 1.1, 1.04), fig(100, 40, 1.2, 1.06)}},
		{scenario: "uncontended-paired-ctx", library: "redislock", rounds: []figures{fig(100, 40, nan, nan), fig(100, 40, nan, nan)}},
	}
	ts := targets(rows)
	type want struct {
		what, bound string
		values      []float64
	}
	wants := []want{
		{"Redis CPU per cycle", "<= 1.25", []float64{1.2, 1}},
		{"allocations per cycle", "<= 20", []float64{21, 19}},
		{"cycle, " + pairedReference + " / fastest peer", "<= 1.15", []float64{1.1, 1.2}},
		{"cycle, " + pairedReference + " with request ctx / with Background ctx", "<= 1.05", []float64{1.04, 1.06}},
		{"Redis CPU per cycle", "<= 1.25", []float64{1, 1}},
	}
	if len(ts) != len(wants) {
		t.Fatalf("%d targets, want %d", len(ts), len(wants))
	}
	for i, w := range wants {
		if !strings.HasPrefix(ts[i].what, w.what) {
			t.Errorf("target %d is %q, want %q...", i, ts[i].what, w.what)
		}
		if got := ts[i].cells()[slices.Index(targetColumns, "bound")]; got != w.bound {
			t.Errorf("%s: bound %q, want %q", ts[i].what, got, w.bound)
		}
		if !slices.Equal(ts[i].values, w.values) {
			t.Errorf("%s: values %v, want %v", ts[i].what, ts[i].values, w.values)
		}
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

// TestSpecsCallTimeout checks which ctx each scenario's worker spec asks
// for: a request ctx in the -ctx and -ctx-heeding scenarios only (both
// passes of the per-library one; the paired one with the reference's
// Background baseline), context.Background() in the other uncontended
// ones and no call timeout in the contended ones; and go-redis clients
// with ContextTimeoutEnabled in the -heeding scenarios only.
func TestSpecsCallTimeout(t *testing.T) {
	b := &bench{cfg: config{libs: libraries, cycles: 100, blocks: 2, blockCyc: 3, duration: time.Second}}
	for _, sc := range scenarios {
		want := time.Duration(0)
		if strings.HasSuffix(sc.name, "-ctx") || strings.HasSuffix(sc.name, "-ctx-heeding") {
			want = requestTimeout
		}
		heeding := strings.HasSuffix(sc.name, "-heeding")
		if sc.paired {
			spec := b.pairedSpec(sc, 1)
			if spec.Options.ContextTimeout != heeding {
				t.Errorf("%s: ContextTimeoutEnabled %v, want %v", sc.name, spec.Options.ContextTimeout, heeding)
			}
			if spec.CallTimeout != want || spec.BackgroundBaseline != (want > 0) {
				t.Errorf("%s: call timeout %v, Background baseline %v; want %v, %v", sc.name, spec.CallTimeout, spec.BackgroundBaseline, want, want > 0)
			}
			entries := len(libraries)
			if want > 0 {
				entries++
			}
			if got := len(pairedEntries(spec)); got != entries {
				t.Errorf("%s: %d libraries in the blocks, want %d", sc.name, got, entries)
			}
			continue
		}
		for _, kind := range []passKind{timedPass, countingPass} {
			spec := b.passSpec(kind, sc, libraries[0], 1)
			if spec.CallTimeout != want {
				t.Errorf("%s, pass %d: call timeout %v, want %v", sc.name, kind, spec.CallTimeout, want)
			}
			if spec.Options.ContextTimeout != heeding {
				t.Errorf("%s, pass %d: ContextTimeoutEnabled %v, want %v", sc.name, kind, spec.Options.ContextTimeout, heeding)
			}
		}
	}
}
