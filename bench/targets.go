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
	// targetCycleRatio bounds the reference's paired cycle over the
	// fastest peer's (VsFastest), with a Background and with a request
	// ctx alike.
	targetCycleRatio = 1.15
	// targetCtxOverBackground bounds the reference's request-ctx cycle
	// over its Background cycle in the same paired blocks (VsBackground).
	targetCtxOverBackground = 1.05
	// targetUncontendedCPU bounds the reference's Redis CPU per
	// uncontended cycle over the lowest peer's.
	targetUncontendedCPU = 1.25
	// targetAllocs bounds the reference's heap allocations per
	// uncontended cycle (Allocs).
	targetAllocs = 20
)

// contendedTarget is what a contended scenario asks of the reference,
// besides a busy % at least the peers' median.
type contendedTarget struct {
	cpu     float64 // Redis CPU per acquisition over the lowest peer's, at most
	waitP99 float64 // ms at most
	waitMax float64 // ms at most; 0: no bound
	// waitPerWaiter, when set, makes the wait p99 bound this many ms per
	// contending goroutine instead of waitP99.
	waitPerWaiter float64
}

// contendedTargets maps contended scenarios to their targets.
var contendedTargets = map[string]contendedTarget{
	"1proc-8g":  {cpu: 1.00, waitP99: 20, waitMax: 50},
	"4proc-2g":  {cpu: 1.00, waitP99: 30, waitMax: 100},
	"8proc-4g":  {cpu: 1.25, waitPerWaiter: 2},
	"1proc-32g": {cpu: 1.25, waitPerWaiter: 2},
}

// target is one checked figure: its value per round and its bound.
type target struct {
	what     string
	scenario string
	values   []float64 // per round
	peers    []string  // per round, the peer compared with (ratios to a peer only)
	compared string    // what the values compare with, where peers is nil
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
		t.what, t.scenario, strings.Join(per, " "), t.comparedWith(),
		t.format(med), rangeText,
		op + bound,
		fmt.Sprintf("%d/%d", passing, known), result,
	}
}

// comparedWith says what t's values compare with.
func (t target) comparedWith() string {
	if t.peers == nil && t.compared != "" {
		return t.compared
	}
	return peerCounts(t.peers)
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

// peersMedianDiff returns, per round, the reference's value of get less
// the median of the peers' values in the same round (NaN without a
// peer's value), and the most peers a round had.
func peersMedianDiff(rows []row, ref *row, get func(figures) float64) ([]float64, int) {
	values := make([]float64, len(ref.rounds))
	most := 0
	for i, f := range ref.rounds {
		var peers []float64
		for _, r := range rows {
			if r.scenario != ref.scenario || r.library == ref.library || i >= len(r.rounds) {
				continue
			}
			if v := get(r.rounds[i]); !math.IsNaN(v) {
				peers = append(peers, v)
			}
		}
		values[i] = get(f) - median(peers)
		most = max(most, len(peers))
	}
	return values, most
}

// targets computes every target whose scenario ran.
func targets(rows []row) []target {
	cpu := func(f figures) float64 { return f.CPUPerAcq }
	ref := pairedReference
	var out []target
	for _, sc := range scenarios {
		own := findRow(rows, sc.name, ref)
		if own == nil {
			continue
		}
		ratios, peers := lowestPeerRatio(rows, own, cpu)
		if sc.cycles {
			if sc.paired {
				fastest := make([]string, len(own.rounds))
				for i, f := range own.rounds {
					fastest[i] = f.FastestPeer
				}
				out = append(out, target{
					what:     "cycle, " + ref + " / fastest peer, " + sc.ctxName() + " for all, median over blocks",
					scenario: sc.name, values: ownValues(own, func(f figures) float64 { return f.VsFastest }), peers: fastest,
					bound: targetCycleRatio, ratio: true,
				})
				if sc.requestCtx {
					out = append(out, target{
						what:     "cycle, " + ref + " with " + sc.ctxName() + " / with Background ctx, median over blocks",
						scenario: sc.name, values: ownValues(own, func(f figures) float64 { return f.VsBackground }),
						compared: ref + ", Background ctx", bound: targetCtxOverBackground, ratio: true,
					})
				}
			}
			out = append(out, target{
				what:     "Redis CPU per cycle, " + ref + " / lowest peer, " + sc.ctxName() + " for all",
				scenario: sc.name, values: ratios, peers: peers, bound: targetUncontendedCPU, ratio: true,
			})
			if !sc.paired {
				out = append(out, target{
					what:     "allocations per cycle, " + ref + "'s worker process less the loop's own, " + sc.ctxName(),
					scenario: sc.name, values: ownValues(own, func(f figures) float64 { return f.Allocs }),
					compared: "- (absolute)", bound: targetAllocs, prec: 1,
				})
			}
			continue
		}
		ct, ok := contendedTargets[sc.name]
		if !ok {
			continue
		}
		busy, npeers := peersMedianDiff(rows, own, func(f figures) float64 { return f.Busy })
		out = append(out,
			target{
				what:     "Redis CPU per acquisition, " + ref + " / lowest peer",
				scenario: sc.name, values: ratios, peers: peers, bound: ct.cpu, ratio: true,
			},
			target{
				what:     "busy %, " + ref + " less the peers' median (points)",
				scenario: sc.name, values: busy, compared: fmt.Sprintf("median of %d peers", npeers),
				bound: 0, atLeast: true, prec: 1,
			},
		)
		p99 := target{
			what:     "wait p99 ms, " + ref,
			scenario: sc.name, values: ownValues(own, func(f figures) float64 { return f.WaitP99 }),
			compared: "- (absolute)", bound: ct.waitP99, prec: 2,
		}
		if ct.waitPerWaiter > 0 {
			p99.bound = ct.waitPerWaiter * float64(sc.contenders())
			p99.what += fmt.Sprintf(" (bound %d waiters × %s ms)", sc.contenders(), strconv.FormatFloat(ct.waitPerWaiter, 'f', -1, 64))
		}
		out = append(out, p99)
		if ct.waitMax > 0 {
			out = append(out, target{
				what:     "wait max ms, " + ref,
				scenario: sc.name, values: ownValues(own, func(f figures) float64 { return f.WaitMax }),
				compared: "- (absolute)", bound: ct.waitMax, prec: 2,
			})
		}
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
		"every comparison is taken per round, between libraries of the same round (paired: of the same blocks); result: PASS when the median over rounds meets the bound, - when it cannot be computed (no peer ran); rounds met: in how many rounds the value met the bound",
		"cycle time / fastest peer: per round, " + pairedReference + "'s blockRatio (median over blocks of its block median cycle / the peer's in the same block) to each peer, all with the same kind of ctx; the largest, i.e. against the fastest peer",
		"request ctx / Background ctx: per round, the median over uncontended-paired-ctx's (or -ctx-heeding's) blocks of " + pairedReference + "'s block median cycle with a request ctx / its block median cycle with context.Background() in the same block",
		"lowest peer: per round, the peer with the lowest Redis CPU per acquisition (uncontended: per cycle) in the same scenario",
		"busy %: per round, " + pairedReference + "'s busy % less the median of the other libraries' busy % in the same scenario and round: at least 0 means at least the peers' median",
		"allocations per cycle: see allocs/cycle above; request ctx: " + requestTimeout.String() + " deadline, a ctx of its own for each call (see ctx above)",
		"compared with: how many rounds each peer was the one compared with; - (absolute): the value is " + pairedReference + "'s own",
	} {
		if markdown {
			fmt.Fprintln(w, "- "+l)
		} else {
			fmt.Fprintln(w, "  "+l)
		}
	}
}
