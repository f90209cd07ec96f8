package main

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
)

// The project's performance targets, which fencedlock (the
// reference) is checked against. Each is decided on the median over
// rounds; the report also says in how many rounds it held.

// Uncontended targets.
const (
	// targetCycleRatio bounds the reference's uncontended-paired cycle
	// over the fastest peer's (VsFastest).
	targetCycleRatio = 1.05
	// targetUncontendedCPU bounds the reference's Redis CPU per
	// uncontended cycle over the lowest peer's.
	targetUncontendedCPU = 1.10
	// targetContendedCPU bounds the reference's Redis CPU per contended
	// acquisition over the lowest peer's.
	targetContendedCPU = 1.00
)

// contendedTarget is what a contended scenario asks of the reference.
type contendedTarget struct {
	busy    float64 // busy % at least
	waitP99 float64 // ms at most
	waitMax float64 // ms at most
}

// contendedTargets maps contended scenarios to their targets.
var contendedTargets = map[string]contendedTarget{
	"1proc-8g": {busy: 88, waitP99: 20, waitMax: 50},
	"4proc-2g": {busy: 80, waitP99: 30, waitMax: 100},
}

// target is one checked figure: its value per round and its bound.
type target struct {
	what     string
	scenario string
	values   []float64 // per round
	peers    []string  // per round, the peer compared with (ratios only)
	bound    float64
	atLeast  bool // the value must be >= bound (else <= bound)
	ratio    bool // a ratio: three decimals, its bound two
	prec     int  // decimals of a value that is not a ratio
}

// format formats one value of t.
func (t target) format(v float64) string {
	if t.ratio {
		return formatFixed(v, 3)
	}
	return formatFixed(v, t.prec)
}

// holds reports whether v meets the target; false for NaN.
func (t target) holds(v float64) bool {
	if math.IsNaN(v) {
		return false
	}
	if t.atLeast {
		return v >= t.bound
	}
	return v <= t.bound
}

// cells formats the target's row.
func (t target) cells() []string {
	med, lo, hi := spread(t.values)
	per := make([]string, len(t.values))
	passing, known := 0, 0
	for i, v := range t.values {
		per[i] = t.format(v)
		if !math.IsNaN(v) {
			known++
			if t.holds(v) {
				passing++
			}
		}
	}
	op := "<= "
	if t.atLeast {
		op = ">= "
	}
	bound := strconv.FormatFloat(t.bound, 'f', -1, 64)
	if t.ratio {
		bound = formatFixed(t.bound, 2)
	}
	rangeText := "-"
	if !math.IsNaN(lo) {
		rangeText = t.format(lo) + "–" + t.format(hi)
	}
	result := "-"
	if !math.IsNaN(med) {
		result = "MISS"
		if t.holds(med) {
			result = "PASS"
		}
	}
	return []string{
		t.what, t.scenario, strings.Join(per, " "), peerCounts(t.peers),
		t.format(med), rangeText,
		op + bound,
		fmt.Sprintf("%d/%d", passing, known), result,
	}
}

// peerCounts summarizes which peers the rounds compared with, as
// "redislock×3 rueidislock×2"; "-" when none.
func peerCounts(peers []string) string {
	counts := map[string]int{}
	for _, p := range peers {
		if p != "" {
			counts[p]++
		}
	}
	names := make([]string, 0, len(counts))
	for p := range counts {
		names = append(names, p)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, p := range names {
		parts[i] = fmt.Sprintf("%s×%d", p, counts[p])
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// findRow returns the row of one scenario and library, or nil.
func findRow(rows []row, scenario, library string) *row {
	for i := range rows {
		if rows[i].scenario == scenario && rows[i].library == library {
			return &rows[i]
		}
	}
	return nil
}

// ownValues returns the reference's value of get in each round.
func ownValues(ref *row, get func(figures) float64) []float64 {
	out := make([]float64, len(ref.rounds))
	for i, f := range ref.rounds {
		out[i] = get(f)
	}
	return out
}

// lowestPeerRatio returns, per round, the reference's value of get over
// the lowest peer's value in the same round, and that peer; NaN and ""
// in a round without a peer's value.
func lowestPeerRatio(rows []row, ref *row, get func(figures) float64) ([]float64, []string) {
	values := make([]float64, len(ref.rounds))
	peers := make([]string, len(ref.rounds))
	for i, f := range ref.rounds {
		low, name := math.NaN(), ""
		for _, r := range rows {
			if r.scenario != ref.scenario || r.library == ref.library || i >= len(r.rounds) {
				continue
			}
			if v := get(r.rounds[i]); v > 0 && (name == "" || v < low) {
				low, name = v, r.library
			}
		}
		values[i], peers[i] = get(f)/low, name
	}
	return values, peers
}

// targets computes every target whose scenario ran.
func targets(rows []row) []target {
	cpu := func(f figures) float64 { return f.CPUPerAcq }
	var out []target
	for _, sc := range scenarios {
		ref := findRow(rows, sc.name, pairedReference)
		if ref == nil {
			continue
		}
		if sc.paired {
			peers := make([]string, len(ref.rounds))
			for i, f := range ref.rounds {
				peers[i] = f.FastestPeer
			}
			out = append(out, target{
				what: "cycle, " + pairedReference + " / fastest peer (median over blocks)", scenario: sc.name,
				values: ownValues(ref, func(f figures) float64 { return f.VsFastest }), peers: peers,
				bound: targetCycleRatio, ratio: true,
			})
		}
		ratios, peers := lowestPeerRatio(rows, ref, cpu)
		if sc.cycles {
			out = append(out, target{
				what: "Redis CPU per cycle, " + pairedReference + " / lowest peer", scenario: sc.name,
				values: ratios, peers: peers, bound: targetUncontendedCPU, ratio: true,
			})
			continue
		}
		ct, ok := contendedTargets[sc.name]
		if !ok {
			continue
		}
		out = append(out,
			target{
				what: "Redis CPU per acquisition, " + pairedReference + " / lowest peer", scenario: sc.name,
				values: ratios, peers: peers, bound: targetContendedCPU, ratio: true,
			},
			target{what: pairedReference + " busy %", scenario: sc.name,
				values: ownValues(ref, func(f figures) float64 { return f.Busy }), bound: ct.busy, atLeast: true, prec: 1},
			target{what: pairedReference + " wait p99, ms", scenario: sc.name,
				values: ownValues(ref, func(f figures) float64 { return f.WaitP99 }), bound: ct.waitP99, prec: 2},
			target{what: pairedReference + " wait max, ms", scenario: sc.name,
				values: ownValues(ref, func(f figures) float64 { return f.WaitMax }), bound: ct.waitMax, prec: 2},
		)
	}
	return out
}

// targetColumns heads the targets table.
var targetColumns = []string{"target", "scenario", "per round", "compared with", "median", "range", "bound", "rounds met", "result"}

// writeTargets writes the targets table and how it is decided.
func writeTargets(w io.Writer, rows []row, markdown bool) {
	ts := targets(rows)
	if len(ts) == 0 {
		return
	}
	t := table{header: targetColumns}
	for _, tg := range ts {
		t.rows = append(t.rows, tg.cells())
	}
	fmt.Fprintln(w)
	if markdown {
		fmt.Fprintln(w, "Targets:")
		fmt.Fprintln(w)
	} else {
		fmt.Fprintln(w, "targets:")
	}
	t.write(w, markdown, 2)
	fmt.Fprintln(w)
	for _, l := range []string{
		"ratios are taken per round, between libraries of the same round; result: PASS when the median over rounds meets the bound, - when it cannot be computed (no peer ran)",
		"cycle / fastest peer: per round, " + pairedReference + "'s blockRatio (median over blocks of its block median cycle / the peer's in the same block) to each peer; the largest, i.e. against the fastest peer",
		"lowest peer: per round, the peer with the lowest Redis CPU per acquisition (per cycle) in the same scenario",
		"compared with: how many rounds each peer was the one compared with",
	} {
		if markdown {
			fmt.Fprintln(w, "- "+l)
		} else {
			fmt.Fprintln(w, "  "+l)
		}
	}
}
