package main

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// row is one library in one scenario: its figures of every round and
// their medians.
type row struct {
	scenario string
	library  string
	rounds   []figures
	median   figures
}

// columns of the tables, after "scenario" and "library".
var columns = []string{
	"acq", "busy%", "hold ms", "gap p50 ms", "wait p50 ms", "wait p99 ms", "wait max ms",
	"cmds/acq", "sent/acq", "inner/acq", "cpu µs/acq", "allocs/cycle", "cycle p50 µs", "cycle p90 µs", "vs " + pairedReference, "errors",
}

// cells formats f for the table, in columns' order.
func (f figures) cells() []string {
	return []string{
		formatFixed(f.Acq, 0),
		formatFixed(f.Busy, 1),
		formatMillis(f.HoldMean),
		formatMillis(f.GapP50),
		formatMillis(f.WaitP50),
		formatMillis(f.WaitP99),
		formatMillis(f.WaitMax),
		formatFixed(f.CmdsPerAcq, 2),
		formatFixed(f.SentPerAcq, 2),
		formatFixed(f.InnerPerAcq, 2),
		formatFixed(f.CPUPerAcq, 1),
		formatFixed(f.Allocs, 1),
		formatFixed(f.CycleP50, 0),
		formatFixed(f.CycleP90, 0),
		formatFixed(f.VsRef, 2),
		strconv.Itoa(f.Errors),
	}
}

// formatFixed formats v with prec decimals, "-" for NaN.
func formatFixed(v float64, prec int) string {
	if math.IsNaN(v) {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

// formatMillis formats a duration in ms with about three significant
// digits.
func formatMillis(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case v < 1:
		return formatFixed(v, 3)
	case v < 10:
		return formatFixed(v, 2)
	case v < 100:
		return formatFixed(v, 1)
	}
	return formatFixed(v, 0)
}

// table is a header and rows of cells.
type table struct {
	header []string
	rows   [][]string
}

// summaryTable is the medians table.
func summaryTable(rows []row) table {
	t := table{header: append([]string{"scenario", "library"}, columns...)}
	for _, r := range rows {
		t.rows = append(t.rows, append([]string{r.scenario, r.library}, r.median.cells()...))
	}
	return t
}

// roundsTable lists every round's figures.
func roundsTable(rows []row) table {
	t := table{header: append([]string{"scenario", "library", "round"}, columns...)}
	for _, r := range rows {
		for i, f := range r.rounds {
			cells := append([]string{r.scenario, r.library, strconv.Itoa(i + 1)}, f.cells()...)
			t.rows = append(t.rows, cells)
		}
	}
	return t
}

// writeText writes t as aligned plain text: text columns (the first
// textCols) left-aligned, numbers right-aligned.
func (t table) writeText(w io.Writer, textCols int) {
	widths := make([]int, len(t.header))
	for _, cells := range append([][]string{t.header}, t.rows...) {
		for i, c := range cells {
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	line := func(cells []string) {
		parts := make([]string, len(cells))
		for i, c := range cells {
			pad := strings.Repeat(" ", widths[i]-len([]rune(c)))
			if i < textCols {
				parts[i] = c + pad
			} else {
				parts[i] = pad + c
			}
		}
		fmt.Fprintln(w, strings.TrimRight(strings.Join(parts, "  "), " "))
	}
	line(t.header)
	for _, cells := range t.rows {
		line(cells)
	}
}

// writeMarkdown writes t as a Markdown table, numbers right-aligned.
func (t table) writeMarkdown(w io.Writer, textCols int) {
	fmt.Fprintln(w, "| "+strings.Join(t.header, " | ")+" |")
	align := make([]string, len(t.header))
	for i := range align {
		align[i] = "---:"
		if i < textCols {
			align[i] = "---"
		}
	}
	fmt.Fprintln(w, "| "+strings.Join(align, " | ")+" |")
	for _, cells := range t.rows {
		fmt.Fprintln(w, "| "+strings.Join(cells, " | ")+" |")
	}
}

// write writes t in the chosen format.
func (t table) write(w io.Writer, markdown bool, textCols int) {
	if markdown {
		t.writeMarkdown(w, textCols)
	} else {
		t.writeText(w, textCols)
	}
}

// legend explains the columns.
func legend() []string {
	return []string{
		"acq: acquisitions in the timed pass (uncontended scenarios: cycles)",
		"busy%: sum of measured holds (acquire returned to release called) / wall time from the start to the last release",
		"hold: mean measured hold (the -hold sleep and its overshoot, which differs between libraries: busy% follows it)",
		"gap: median time from one release call to the next grant's acquire returning (the hand-off), contended only",
		"wait: from calling acquire to holding the lock (uncontended: the acquire call)",
		"cmds/acq: INFO stats total_commands_processed delta over the timed pass, less the bench's INFO, per acquisition; includes commands scripts run (redis.call)",
		"sent/acq: commands sent by clients per acquisition, counted with MONITOR (script-inner calls left out) in a separate, shorter counting pass; " +
			"each is a request to Redis (a round trip, unless a client pipelines several)",
		"inner/acq: commands scripts ran (redis.call) per acquisition, counted with MONITOR in the same counting pass",
		"cpu µs/acq: Redis CPU (see cpu: above) over the timed pass, less the bench's own INFO calls, per acquisition (uncontended: per acquire+release cycle); " +
			"paired: the library's blocks' CPU (each read around the block, less the reading pair's cost) over their cycles",
		"allocs/cycle: uncontended only: the worker process's heap allocations (runtime.MemStats.Mallocs, all its goroutines) over the timed cycles, after the warm-up, per cycle, " +
			"less the loop's own (the same loop on a lock that does nothing, in the same process: the request ctxs it makes); paired: over the library's blocks",
		"cycle: one acquire+release, uncontended only; p50 and p90 over all the row's cycles",
		"ctx: uncontended and uncontended-paired pass context.Background() to every acquire and release; uncontended-ctx and uncontended-paired-ctx give each call " +
			"context.WithTimeout(context.Background(), " + requestTimeout.String() + "), made for the call as a request handler's ctx (the acquire's is cancelled once the release has returned, " +
			"the release's after it); making and cancelling them is part of the cycle. Contended scenarios pass the run's ctx (no deadline). " +
			"The -heeding scenarios do the same with every go-redis client (fencedlock's, redsync's, redislock's) made with ContextTimeoutEnabled; the others use go-redis's defaults",
		"uncontended-paired, uncontended-paired-ctx (paired): every library in ONE worker process, a client each, each on a lock of its own: warm-up cycles per library, then blocks of cycles " +
			"per library, the library order rotated by one each block (and each round). Its rows compare with each other, not with the uncontended rows: " +
			"they share the machine's state, which drifts between passes. " +
			"One pass, no counting pass: cmds/acq, sent/acq and inner/acq are - (its commands mix the libraries). " +
			"uncontended-paired-ctx's and uncontended-paired-ctx-heeding's blocks also run " + pairedReference + " with context.Background() on a lock of its own, as one more library (no row of its own): " +
			"the baseline of its request ctx / Background ctx ratio in the targets",
		"vs " + pairedReference + ": paired only: median over blocks of (the library's median cycle in the block / " + pairedReference +
			"'s median cycle in the same block); 1.00 for " + pairedReference + " itself, - without it; below 1: faster",
		"errors: total over all rounds and both passes (paired: its one pass), warm-ups included: failed acquires and releases, waits cut off " + grace.String() + " after the run ended, overlapping holds, tokens out of order; never a median",
		"figures other than errors: median over rounds",
	}
}

// writeReport writes the header, the medians table, the legend, the
// per-round table (verbose) and the error notes.
func writeReport(w io.Writer, h header, rows []row, markdown, verbose bool) {
	h.write(w, markdown)
	fmt.Fprintln(w)
	summaryTable(rows).write(w, markdown, 2)
	fmt.Fprintln(w)
	for _, l := range legend() {
		if markdown {
			fmt.Fprintln(w, "- "+l)
		} else {
			fmt.Fprintln(w, "  "+l)
		}
	}
	writeKeyFigures(w, rows, markdown)
	writeContention(w, rows, markdown)
	writeTargets(w, rows, markdown)
	if verbose {
		fmt.Fprintln(w)
		if markdown {
			fmt.Fprintln(w, "Per round:")
			fmt.Fprintln(w)
		} else {
			fmt.Fprintln(w, "per round:")
		}
		roundsTable(rows).write(w, markdown, 3)
	}
	writeNotes(w, rows, markdown)
}

// writeNotes lists the error messages seen, per row.
func writeNotes(w io.Writer, rows []row, markdown bool) {
	first := true
	for _, r := range rows {
		if len(r.median.Notes) == 0 {
			continue
		}
		if first {
			fmt.Fprintln(w)
			fmt.Fprintln(w, "Errors seen:")
			if markdown {
				fmt.Fprintln(w)
			}
			first = false
		}
		for _, n := range r.median.Notes {
			fmt.Fprintf(w, "- %s / %s: %s\n", r.scenario, r.library, n)
		}
	}
}

// contentionColumns heads the contention table, after "scenario" and
// "library".
var contentionColumns = []string{
	"sent/acq", "inner/acq", "cmds/acq", "cpu µs/acq",
	"+sent", "+inner", "+cmds", "+cpu µs",
}

// overUncontended returns, per round, get of r less get of the same
// library's uncontended row in the same round; NaN where either is
// missing.
func overUncontended(rows []row, r row, get func(figures) float64) []float64 {
	base := findRow(rows, "uncontended", r.library)
	out := make([]float64, len(r.rounds))
	for i, f := range r.rounds {
		out[i] = math.NaN()
		if base != nil && i < len(base.rounds) {
			out[i] = get(f) - get(base.rounds[i])
		}
	}
	return out
}

// contentionTable lists, for each library, what an acquisition costs
// Redis in the uncontended scenario (an acquire and its release: the
// least it can cost) and in each contended one, and what contention adds
// to the uncontended cycle (per round, then the median).
func contentionTable(rows []row) table {
	t := table{header: append([]string{"scenario", "library"}, contentionColumns...)}
	gets := []struct {
		get  func(figures) float64
		prec int
	}{
		{func(f figures) float64 { return f.SentPerAcq }, 2},
		{func(f figures) float64 { return f.InnerPerAcq }, 2},
		{func(f figures) float64 { return f.CmdsPerAcq }, 2},
		{func(f figures) float64 { return f.CPUPerAcq }, 1},
	}
	for _, r := range rows {
		sc, ok := scenarioByName(r.scenario)
		if !ok || sc.paired || (sc.cycles && sc.name != "uncontended") {
			continue
		}
		cells := []string{r.scenario, r.library}
		for _, g := range gets {
			cells = append(cells, formatFixed(g.get(r.median), g.prec))
		}
		for _, g := range gets {
			extra := math.NaN()
			if !sc.cycles {
				extra = median(overUncontended(rows, r, g.get))
			}
			cells = append(cells, formatFixed(extra, g.prec))
		}
		t.rows = append(t.rows, cells)
	}
	return t
}

// writeContention writes the contention table and how to read it.
func writeContention(w io.Writer, rows []row, markdown bool) {
	t := contentionTable(rows)
	hasContended := false
	for _, r := range t.rows {
		hasContended = hasContended || r[0] != "uncontended"
	}
	if !hasContended {
		return
	}
	fmt.Fprintln(w)
	if markdown {
		fmt.Fprintln(w, "What an acquisition costs Redis, and what contention adds to the library's uncontended cycle (medians over rounds):")
		fmt.Fprintln(w)
	} else {
		fmt.Fprintln(w, "what an acquisition costs Redis, and what contention adds to the library's uncontended cycle (medians over rounds):")
	}
	t.write(w, markdown, 2)
	fmt.Fprintln(w)
	for _, l := range []string{
		"sent/acq, inner/acq: commands clients sent (each a request to Redis) and commands scripts ran, per acquisition with its release (MONITOR, counting pass); " +
			"cmds/acq: both, as INFO counts them (timed pass); cpu µs/acq: Redis CPU (timed pass)",
		"uncontended rows: one acquire and its release with no one waiting, context.Background(): the least an acquisition can cost with that library",
		"+sent, +inner, +cmds, +cpu µs: per round, the contended figure less the same library's uncontended one, then the median over rounds: " +
			"what waiting and handing the lock over add per acquisition (a polling library's refused attempts; a queue's place and hand-over)",
	} {
		if markdown {
			fmt.Fprintln(w, "- "+l)
		} else {
			fmt.Fprintln(w, "  "+l)
		}
	}
}
