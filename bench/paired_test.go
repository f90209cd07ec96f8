package main

import (
	"math"
	"slices"
	"testing"
	"time"
)

// TestPairedEntries checks that a paired run adds the reference's
// Background baseline only when it is asked for, has a call timeout and
// runs the reference.
func TestPairedEntries(t *testing.T) {
	libs := []string{pairedReference, "redislock"}
	for _, tc := range []struct {
		name string
		spec childSpec
		want []pairedEntry
	}{
		{"Background", childSpec{Libraries: libs, BackgroundBaseline: true},
			[]pairedEntry{{name: pairedReference}, {name: "redislock"}}},
		{"request ctx, no baseline asked", childSpec{Libraries: libs, CallTimeout: requestTimeout},
			[]pairedEntry{{name: pairedReference}, {name: "redislock"}}},
		{"request ctx with baseline", childSpec{Libraries: libs, CallTimeout: requestTimeout, BackgroundBaseline: true},
			[]pairedEntry{{name: pairedReference}, {name: "redislock"}, {name: pairedReference, background: true}}},
		{"no reference", childSpec{Libraries: []string{"redislock"}, CallTimeout: time.Second, BackgroundBaseline: true},
			[]pairedEntry{{name: "redislock"}}},
	} {
		if got := pairedEntries(tc.spec); !slices.Equal(got, tc.want) {
			t.Errorf("%s: entries %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestPairedFiguresBackgroundBaseline checks that the reference's
// Background baseline gives its request ctx / Background ratio, is
// neither a row nor a peer (it is the fastest here), and that its errors
// count as the reference's.
func TestPairedFiguresBackgroundBaseline(t *testing.T) {
	results := []pairedResult{
		{Library: pairedReference, Blocks: [][]int64{{200, 200}, {300, 300}}, BlockCPU: []int64{100, 100}},
		{Library: "redislock", Blocks: [][]int64{{100, 100}, {200, 200}}, BlockCPU: []int64{100, 100}},
		{Library: pairedReference, Background: true, Blocks: [][]int64{{50, 50}, {100, 100}}, BlockCPU: []int64{100, 100},
			Record: childResult{Errors: 2, ErrorSamples: []string{"acquire: boom"}}},
	}
	figs := pairedFigures(0, results, 0)
	if len(figs) != 2 {
		t.Fatalf("%d rows, want 2 (the baseline has none)", len(figs))
	}
	ref := figs[pairedReference]
	// Per block: 200/100 and 300/200 against redislock, 200/50 and
	// 300/100 against the baseline.
	if ref.FastestPeer != "redislock" || ref.VsFastest != 1.75 {
		t.Errorf("fastest peer %q at %v, want redislock at 1.75", ref.FastestPeer, ref.VsFastest)
	}
	if ref.VsBackground != 3.5 {
		t.Errorf("request ctx / Background %v, want 3.5", ref.VsBackground)
	}
	if ref.Errors != 2 || !slices.Contains(ref.Notes, "Background baseline: acquire: boom") {
		t.Errorf("reference errors %d, notes %q: want the baseline's 2 and its message", ref.Errors, ref.Notes)
	}
	if got, want := figs["redislock"].VsRef, (100.0/200+200.0/300)/2; math.Abs(got-want) > 1e-12 {
		t.Errorf("redislock vs %s %v, want %v (median of 100/200 and 200/300)", pairedReference, got, want)
	}
}
