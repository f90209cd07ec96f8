package main

import (
	"fmt"
	"math"
	"sort"
	"time"
)

// figures are one row's numbers for one round. Not-applicable numbers
// are NaN.
type figures struct {
	Acq        float64 // acquisitions in the timed pass
	Busy       float64 // percent of wall time the lock was measured held
	WaitP50    float64 // ms
	WaitP99    float64 // ms
	WaitMax    float64 // ms
	HoldMean   float64 // ms, mean measured hold (contended only)
	GapP50     float64 // ms, median gap from a release call to the next grant (contended only)
	CmdsPerAcq float64 // INFO total_commands_processed delta per acquisition
	SentPerAcq float64 // client-sent commands per acquisition (MONITOR)
	// InnerPerAcq is the commands scripts ran (redis.call) per
	// acquisition (MONITOR).
	InnerPerAcq float64
	CPUPerAcq   float64 // µs of Redis CPU per acquisition (uncontended: per cycle)
	// Allocs is the worker process's heap allocations per uncontended
	// cycle, the loop's own left out (uncontended only).
	Allocs   float64
	CycleP50 float64 // µs, uncontended only
	CycleP90 float64 // µs, uncontended only
	VsRef    float64 // paired only: median over blocks of the block median cycle / the reference library's
	// VsFastest is set in the reference library's paired rows only: its
	// blockRatio to each other library, the largest of them (against the
	// fastest peer of the round, FastestPeer).
	VsFastest   float64
	FastestPeer string
	// VsBackground is set in the reference library's
	// uncontended-paired-ctx row only: its blockRatio to its own
	// Background baseline in the same blocks.
	VsBackground float64
	Errors       int // errors of both passes
	Notes        []string
}

// runSummary is what one pass's merged results show.
type runSummary struct {
	acquisitions int
	wall         time.Duration
	holdSum      time.Duration
	waits        []int64 // sorted
	gaps         []int64 // sorted: from one hold's end to the next hold's start
	cycles       []int64 // sorted
	errors       int
	notes        []string
}

// summarize merges the per-process results of a pass and checks that no
// two measured holds overlap and that fencing tokens rise in hold order.
func summarize(out *passOutcome) runSummary {
	var s runSummary
	var holds []hold
	end := out.start // the end of the last measured hold
	for _, r := range out.results {
		s.waits = append(s.waits, r.Waits...)
		s.cycles = append(s.cycles, r.Cycles...)
		holds = append(holds, r.Holds...)
		s.errors += r.Errors
		for _, n := range r.ErrorSamples {
			s.notes = appendSample(s.notes, n)
		}
		for _, h := range r.Holds {
			end = max(end, h.End)
		}
	}
	s.acquisitions = len(s.waits)
	s.wall = time.Duration(end - out.start)
	sort.Slice(s.waits, func(i, j int) bool { return s.waits[i] < s.waits[j] })
	sort.Slice(s.cycles, func(i, j int) bool { return s.cycles[i] < s.cycles[j] })
	sort.Slice(holds, func(i, j int) bool { return holds[i].Start < holds[j].Start })
	for i, h := range holds {
		s.holdSum += time.Duration(h.End - h.Start)
		if i > 0 && h.Start >= holds[i-1].End {
			s.gaps = append(s.gaps, h.Start-holds[i-1].End)
		}
	}
	sort.Slice(s.gaps, func(i, j int) bool { return s.gaps[i] < s.gaps[j] })
	overlaps, tokenDrops := checkHolds(holds)
	if overlaps > 0 {
		s.errors += overlaps
		s.notes = append(s.notes, fmt.Sprintf("%d measured holds overlapped the previous one: mutual exclusion broken", overlaps))
	}
	if tokenDrops > 0 {
		s.errors += tokenDrops
		s.notes = append(s.notes, fmt.Sprintf("%d grants had a token not above the previous grant's", tokenDrops))
	}
	return s
}

// checkHolds counts holds (sorted by start) that begin before an earlier
// hold ended, and grants whose token is not above the token of the grant
// before them (where the library gives tokens).
func checkHolds(holds []hold) (overlaps, tokenDrops int) {
	var lastEnd int64
	var lastToken uint64
	for i, h := range holds {
		if i > 0 && h.Start < lastEnd {
			overlaps++
		}
		lastEnd = max(lastEnd, h.End)
		if h.Token != 0 {
			if lastToken != 0 && h.Token <= lastToken {
				tokenDrops++
			}
			lastToken = h.Token
		}
	}
	return overlaps, tokenDrops
}

// roundFigures computes one round's figures from its timed and counting
// passes.
func roundFigures(sc scenario, timed, counting *passOutcome) figures {
	t := summarize(timed)
	c := summarize(counting)
	f := figures{
		Acq:          float64(t.acquisitions),
		Busy:         math.NaN(),
		HoldMean:     math.NaN(),
		GapP50:       math.NaN(),
		WaitP50:      ms(percentile(t.waits, 50)),
		WaitP99:      ms(percentile(t.waits, 99)),
		WaitMax:      ms(percentile(t.waits, 100)),
		CmdsPerAcq:   perAcq(float64(timed.commands), t.acquisitions),
		SentPerAcq:   perAcq(float64(counting.monitor.Sent), c.acquisitions),
		InnerPerAcq:  perAcq(float64(counting.monitor.Inner), c.acquisitions),
		CPUPerAcq:    perAcq(float64(timed.cpu), t.acquisitions),
		Allocs:       math.NaN(),
		CycleP50:     math.NaN(),
		CycleP90:     math.NaN(),
		VsRef:        math.NaN(),
		VsFastest:    math.NaN(),
		VsBackground: math.NaN(),
		Errors:       t.errors + c.errors,
		Notes:        t.notes,
	}
	for _, n := range c.notes {
		f.Notes = appendSample(f.Notes, "counting pass: "+n)
	}
	if sc.cycles {
		f.CycleP50 = us(percentile(t.cycles, 50))
		f.CycleP90 = us(percentile(t.cycles, 90))
		if len(timed.results) == 1 {
			r := timed.results[0]
			f.Allocs = allocsPerCycle(r.Mallocs, r.AllocCycles, r.LoopAllocs)
		}
	} else if t.acquisitions > 0 {
		f.Busy = 100 * float64(t.holdSum) / float64(t.wall)
		f.HoldMean = ms(float64(t.holdSum) / float64(t.acquisitions))
		f.GapP50 = ms(percentile(t.gaps, 50))
	}
	return f
}

// percentile returns the nearest-rank p-th percentile of sorted values,
// or NaN for none.
func percentile(sorted []int64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return float64(sorted[rank-1])
}

// ms converts nanoseconds to milliseconds.
func ms(ns float64) float64 { return ns / 1e6 }

// us converts nanoseconds to microseconds.
func us(ns float64) float64 { return ns / 1e3 }

// perAcq divides n by acquisitions, NaN for none.
func perAcq(n float64, acquisitions int) float64 {
	if acquisitions == 0 {
		return math.NaN()
	}
	return n / float64(acquisitions)
}

// median returns the median of values, ignoring NaNs; NaN if none.
func median(values []float64) float64 {
	var v []float64
	for _, x := range values {
		if !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return math.NaN()
	}
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// medianFigures returns the median over rounds of each figure; errors and
// notes are summed and gathered, not medians.
func medianFigures(rounds []figures) figures {
	pick := func(get func(figures) float64) float64 {
		v := make([]float64, len(rounds))
		for i, f := range rounds {
			v[i] = get(f)
		}
		return median(v)
	}
	m := figures{
		Acq:          pick(func(f figures) float64 { return f.Acq }),
		Busy:         pick(func(f figures) float64 { return f.Busy }),
		WaitP50:      pick(func(f figures) float64 { return f.WaitP50 }),
		WaitP99:      pick(func(f figures) float64 { return f.WaitP99 }),
		WaitMax:      pick(func(f figures) float64 { return f.WaitMax }),
		HoldMean:     pick(func(f figures) float64 { return f.HoldMean }),
		GapP50:       pick(func(f figures) float64 { return f.GapP50 }),
		CmdsPerAcq:   pick(func(f figures) float64 { return f.CmdsPerAcq }),
		SentPerAcq:   pick(func(f figures) float64 { return f.SentPerAcq }),
		InnerPerAcq:  pick(func(f figures) float64 { return f.InnerPerAcq }),
		CPUPerAcq:    pick(func(f figures) float64 { return f.CPUPerAcq }),
		Allocs:       pick(func(f figures) float64 { return f.Allocs }),
		CycleP50:     pick(func(f figures) float64 { return f.CycleP50 }),
		CycleP90:     pick(func(f figures) float64 { return f.CycleP90 }),
		VsRef:        pick(func(f figures) float64 { return f.VsRef }),
		VsFastest:    pick(func(f figures) float64 { return f.VsFastest }),
		VsBackground: pick(func(f figures) float64 { return f.VsBackground }),
	}
	for _, f := range rounds {
		m.Errors += f.Errors
		for _, n := range f.Notes {
			m.Notes = appendSample(m.Notes, n)
		}
	}
	return m
}
