package main

import (
	"slices"
	"testing"
)

// TestContentionTable checks that the contention table lists the
// uncontended (Background) and contended rows only, with what contention
// adds taken per round against the same library's uncontended round,
// then the median, and - where the library has no uncontended row.
func TestContentionTable(t *testing.T) {
	fig := func(sent, inner, cmds, cpu float64) figures {
		return figures{SentPerAcq: sent, InnerPerAcq: inner, CmdsPerAcq: cmds, CPUPerAcq: cpu}
	}
	rows := []row{
		{scenario: "uncontended", library: pairedReference,
			rounds: []figures{fig(2, 8, 10, 80), fig(2, 8, 10, 100), fig(2, 8, 10, 60)}},
		{scenario: "uncontended-ctx", library: pairedReference, rounds: []figures{fig(2, 8, 10, 90)}},
		{scenario: "uncontended-paired", library: pairedReference, rounds: []figures{fig(2, 8, 10, 90)}},
		{scenario: "1proc-8g", library: pairedReference,
			rounds: []figures{fig(2, 24, 26, 200), fig(2, 24, 26, 300), fig(2, 25, 27, 100)}},
		{scenario: "1proc-8g", library: "redsync", rounds: []figures{fig(3, 2, 5, 70)}},
	}
	for i := range rows {
		rows[i].median = medianFigures(rows[i].rounds)
	}
	tab := contentionTable(rows)
	var got [][]string
	for _, r := range tab.rows {
		got = append(got, r[:2])
	}
	want := [][]string{{"uncontended", pairedReference}, {"1proc-8g", pairedReference}, {"1proc-8g", "redsync"}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("rows %v, want %v", got, want)
	}
	cell := func(r int, col string) string { return tab.rows[r][2+slices.Index(contentionColumns, col)] }
	// Per round, 1proc-8g less uncontended: CPU 120, 200, 40; inner 16,
	// 16, 17.
	for col, want := range map[string]string{"cpu µs/acq": "200.0", "+cpu µs": "120.0", "+inner": "16.00", "+sent": "0.00", "+cmds": "16.00"} {
		if got := cell(1, col); got != want {
			t.Errorf("1proc-8g / %s %s: %q, want %q", pairedReference, col, got, want)
		}
	}
	if got := cell(0, "+cpu µs"); got != "-" {
		t.Errorf("uncontended +cpu µs %q, want -", got)
	}
	if got := cell(2, "+inner"); got != "-" {
		t.Errorf("redsync without an uncontended row: +inner %q, want -", got)
	}
}
