package main

import (
	"fmt"
	"io"
	"math"
	"strconv"
)

// keyFigure is a figure the targets depend on: the report lists it for
// every round, with its median and its range over rounds.
type keyFigure struct {
	title   string
	get     func(figures) float64
	prec    int
	applies func(scenario) bool
}

func contended(sc scenario) bool   { return !sc.cycles }
func uncontended(sc scenario) bool { return sc.cycles }
func counted(sc scenario) bool     { return !sc.paired }
func anyScenario(scenario) bool    { return true }

// keyFigures lists the key figures, in report order.
var keyFigures = []keyFigure{
	{"uncontended cycle p50, µs", func(f figures) float64 { return f.CycleP50 }, 0, uncontended},
	{"Redis CPU per acquisition (uncontended: per cycle), µs", func(f figures) float64 { return f.CPUPerAcq }, 1, anyScenario},
	{"heap allocations per uncontended cycle (worker process, the loop's own left out)", func(f figures) float64 { return f.Allocs }, 1, uncontended},
	{"busy %", func(f figures) float64 { return f.Busy }, 1, contended},
	{"wait p99, ms", func(f figures) float64 { return f.WaitP99 }, 2, contended},
	{"wait max, ms", func(f figures) float64 { return f.WaitMax }, 2, contended},
	{"Redis commands per acquisition (total_commands_processed, script-inner calls included)", func(f figures) float64 { return f.CmdsPerAcq }, 2, counted},
	{"commands sent per acquisition (MONITOR, counting pass)", func(f figures) float64 { return f.SentPerAcq }, 2, counted},
	{"script-inner commands per acquisition (MONITOR, counting pass)", func(f figures) float64 { return f.InnerPerAcq }, 2, counted},
}

// scenarioByName returns the scenario called name; ok is false if none.
func scenarioByName(name string) (scenario, bool) {
	for _, sc := range scenarios {
		if sc.name == name {
			return sc, true
		}
	}
	return scenario{}, false
}

// spread returns the median, minimum and maximum of values, ignoring
// NaNs; all NaN if none.
func spread(values []float64) (med, lo, hi float64) {
	med, lo, hi = median(values), math.NaN(), math.NaN()
	for _, v := range values {
		if math.IsNaN(v) {
			continue
		}
		if math.IsNaN(lo) || v < lo {
			lo = v
		}
		if math.IsNaN(hi) || v > hi {
			hi = v
		}
	}
	return med, lo, hi
}

// formatRange formats lo–hi with prec decimals, "-" for NaN.
func formatRange(lo, hi float64, prec int) string {
	if math.IsNaN(lo) {
		return "-"
	}
	return formatFixed(lo, prec) + "–" + formatFixed(hi, prec)
}

// keyFigureTable lists one key figure of every row it applies to: each
// round's value, the median over rounds and the range (min–max).
func keyFigureTable(k keyFigure, rows []row) table {
	rounds := 0
	for _, r := range rows {
		rounds = max(rounds, len(r.rounds))
	}
	t := table{header: []string{"scenario", "library"}}
	for i := 1; i <= rounds; i++ {
		t.header = append(t.header, "r"+strconv.Itoa(i))
	}
	t.header = append(t.header, "median", "range")
	for _, r := range rows {
		sc, ok := scenarioByName(r.scenario)
		if !ok || !k.applies(sc) {
			continue
		}
		cells := []string{r.scenario, r.library}
		values := make([]float64, rounds)
		for i := range values {
			values[i] = math.NaN()
			if i < len(r.rounds) {
				values[i] = k.get(r.rounds[i])
			}
			cells = append(cells, formatFixed(values[i], k.prec))
		}
		med, lo, hi := spread(values)
		t.rows = append(t.rows, append(cells, formatFixed(med, k.prec), formatRange(lo, hi, k.prec)))
	}
	return t
}

// writeKeyFigures writes a table per key figure.
func writeKeyFigures(w io.Writer, rows []row, markdown bool) {
	fmt.Fprintln(w)
	if markdown {
		fmt.Fprintln(w, "Key figures per round (r1, r2, ...), their median over rounds and range (min–max):")
	} else {
		fmt.Fprintln(w, "key figures per round (r1, r2, ...), their median over rounds and range (min–max):")
	}
	for _, k := range keyFigures {
		t := keyFigureTable(k, rows)
		if len(t.rows) == 0 {
			continue
		}
		fmt.Fprintln(w)
		if markdown {
			fmt.Fprintf(w, "%s:\n\n", k.title)
		} else {
			fmt.Fprintf(w, "%s:\n", k.title)
		}
		t.write(w, markdown, 2)
	}
}
