package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"
)

// The uncontended-paired scenario measures the uncontended
// acquire+release cycle of every selected library in one worker process,
// in alternating blocks of cycles, so that all libraries see the same
// state of the machine (loopback latency on a shared machine drifts
// several-fold between passes a few seconds apart). Each block runs every
// library for a few cycles, in an order rotated by one each block, and a
// library's cycles in a block are compared with the reference library's
// in the same block. The worker reads Redis' CPU time (INFO cpu, on a
// connection of its own) before and after each library's block, so each
// library gets its own Redis CPU figure from the same blocks, and the
// process's heap allocations around each library's block, for its
// allocations per cycle.
//
// The uncontended-paired-ctx scenario runs the same with a request ctx
// for every call, and adds the reference library with
// context.Background() as one more library of every block: its
// request-ctx cycle is compared with its Background cycle of the same
// blocks.

// pairedReference is the library the ratio column compares with.
const pairedReference = "fencedlock"

// pairedResult is one library's record of a paired run.
type pairedResult struct {
	Library string
	// Blocks holds the ns of each acquire+release cycle, per block, in run
	// order. Record.Cycles is left empty.
	Blocks [][]int64
	// BlockCPU holds the µs of Redis CPU from the reading before each
	// block to the reading after it, in run order; -1 where a reading
	// failed (counted as an error).
	BlockCPU []int64
	Record   childResult // waits, holds, errors
	// Background marks the reference library's baseline in a paired run
	// with a request ctx: its calls got context.Background().
	Background bool `json:",omitempty"`
	// Mallocs counts the process's heap allocations over the library's
	// blocks, AllocCycles their cycles, and LoopAllocs the loop's own
	// allocations per cycle (loopAllocs), part of Mallocs.
	Mallocs     uint64  `json:",omitempty"`
	AllocCycles int     `json:",omitempty"`
	LoopAllocs  float64 `json:",omitempty"`
}

// pairedLib is one library's state in a paired worker process.
type pairedLib struct {
	name        string
	background  bool          // the reference's Background baseline
	timeout     time.Duration // runCycles' call timeout
	client      libClient
	worker      lockWorker
	warm        *record
	rec         *record
	blocks      [][]int64
	blockCPU    []int64
	resource    string
	suffix      string // of its resources: ":" and the name, and ":background" for the baseline
	mallocs     uint64
	allocCycles int
	loopAllocs  float64
}

// pairedEntry is one library of a paired run's blocks.
type pairedEntry struct {
	name       string
	background bool
}

// pairedEntries lists the libraries of spec's blocks: every library of
// spec.Libraries, then the reference's Background baseline if spec asks
// for it and has the reference and a call timeout.
func pairedEntries(spec childSpec) []pairedEntry {
	var out []pairedEntry
	hasRef := false
	for _, name := range spec.Libraries {
		out = append(out, pairedEntry{name: name})
		hasRef = hasRef || name == pairedReference
	}
	if spec.BackgroundBaseline && hasRef && spec.CallTimeout > 0 {
		out = append(out, pairedEntry{name: pairedReference, background: true})
	}
	return out
}

// openPaired opens a client for every library of spec's blocks, each
// with a resource of its own and room to record every cycle.
func openPaired(spec childSpec) ([]*pairedLib, error) {
	var libs []*pairedLib
	for _, e := range pairedEntries(spec) {
		lib := libraryByName(e.name)
		if lib == nil {
			closePaired(libs)
			return nil, fmt.Errorf("unknown library %q", e.name)
		}
		client, err := lib.open(spec.Addr, spec.Options)
		if err != nil {
			closePaired(libs)
			return nil, fmt.Errorf("opening %s: %w", e.name, err)
		}
		l := &pairedLib{name: e.name, background: e.background, timeout: spec.CallTimeout, client: client,
			rec: newRecord(spec.Blocks * spec.BlockCycles), suffix: ":" + e.name}
		if e.background {
			l.timeout, l.suffix = 0, l.suffix+":background"
		}
		l.resource = spec.Resource + l.suffix
		l.worker = client.worker(l.resource)
		libs = append(libs, l)
	}
	return libs, nil
}

// closePaired closes every library's client.
func closePaired(libs []*pairedLib) {
	for _, l := range libs {
		_ = l.client.Close()
	}
}

// warmUpPaired runs each library's warm-up cycles on a warm-up resource
// of its own, one library after another, and measures the loop's own
// allocations with its call timeout.
func warmUpPaired(ctx context.Context, libs []*pairedLib, spec childSpec) {
	for _, l := range libs {
		w := spec
		w.Resource = l.resource
		w.WarmupResource = spec.WarmupResource + l.suffix
		w.Cycles = 1 // an uncontended run: warmUp runs WarmupCycles cycles
		w.CallTimeout = l.timeout
		l.warm = warmUp(ctx, l.client, w)
		l.loopAllocs = loopAllocs(l.timeout)
	}
}

// measurePaired runs spec.Blocks blocks from start; a block runs
// spec.BlockCycles cycles of each library, the libraries in an order
// rotated by one from one block to the next, with Redis' CPU time read on
// ctl before and after each library's cycles, and the process's heap
// allocations within those readings.
func measurePaired(ctx context.Context, libs []*pairedLib, ctl *rawConn, spec childSpec, start time.Time) *childResult {
	time.Sleep(time.Until(start))
	n := len(libs)
	for b := 0; b < spec.Blocks && ctx.Err() == nil; b++ {
		for i := range libs {
			l := libs[(spec.Rotation+b+i)%n]
			before := len(l.rec.cycles)
			cpu0, err0 := ctl.redisCPU(spec.CPU)
			mallocs, ran := runCycles(ctx, l.worker, spec.BlockCycles, l.timeout, l.rec)
			cpu1, err1 := ctl.redisCPU(spec.CPU)
			l.mallocs += mallocs
			l.allocCycles += ran
			l.blocks = append(l.blocks, l.rec.cycles[before:len(l.rec.cycles):len(l.rec.cycles)])
			if err := errors.Join(err0, err1); err != nil {
				l.rec.fail("reading Redis CPU: ", err)
				l.blockCPU = append(l.blockCPU, -1)
			} else {
				l.blockCPU = append(l.blockCPU, cpu1-cpu0)
			}
		}
	}
	res := &childResult{}
	for _, l := range libs {
		r := childResult{
			Waits:        l.rec.waits,
			Holds:        l.rec.holds,
			Errors:       l.rec.errors + l.warm.errors,
			ErrorSamples: l.rec.samples,
		}
		for _, s := range l.warm.samples {
			r.ErrorSamples = appendSample(r.ErrorSamples, s)
		}
		res.Paired = append(res.Paired, pairedResult{
			Library: l.name, Blocks: l.blocks, BlockCPU: l.blockCPU, Record: r, Background: l.background,
			Mallocs: l.mallocs, AllocCycles: l.allocCycles, LoopAllocs: l.loopAllocs,
		})
	}
	return res
}

// runPairedRound runs the paired scenario once, for every library, and
// returns each library's figures.
func (b *bench) runPairedRound(ctx context.Context, sc scenario, round int) (map[string]figures, error) {
	if err := b.flush(); err != nil {
		return nil, err
	}
	spec := b.pairedSpec(sc, round)
	out, err := b.runPass(ctx, pass{kind: timedPass, scenario: sc, spec: spec})
	if err != nil {
		return nil, err
	}
	if len(out.results) != 1 || len(out.results[0].Paired) != len(pairedEntries(spec)) {
		return nil, fmt.Errorf("worker process returned %d results", len(out.results))
	}
	return pairedFigures(out.start, out.results[0].Paired, out.results[0].CPUPairCost), nil
}

// pairedSpec returns the worker spec of a paired pass: every library,
// with the scenario's call timeout, and with a request ctx the
// reference's Background baseline.
func (b *bench) pairedSpec(sc scenario, round int) childSpec {
	names := make([]string, len(b.cfg.libs))
	for i, l := range b.cfg.libs {
		names[i] = l.name
	}
	resource := fmt.Sprintf("bench:%s:r%d", sc.name, round)
	return childSpec{
		Options:            sc.options(b.cfg.opts),
		Resource:           resource,
		WarmupResource:     resource + ":warmup",
		Goroutines:         1,
		Grace:              grace,
		WarmupCycles:       b.cfg.warmupCycles(),
		Libraries:          names,
		Blocks:             b.cfg.blocks,
		BlockCycles:        b.cfg.blockCyc,
		Rotation:           round - 1,
		CPU:                b.cpu,
		CallTimeout:        sc.callTimeout(),
		BackgroundBaseline: sc.requestCtx,
	}
}

// pairedFigures computes one round's figures of every library of a
// paired run; pairCost is the µs of Redis CPU a reading pair adds to a
// block. The reference's Background baseline, if the run had one, is no
// library of its own: it gives the reference's VsBackground, and its
// errors count as the reference's.
func pairedFigures(start int64, results []pairedResult, pairCost int64) map[string]figures {
	var refBlocks, baseBlocks []float64
	var base *pairedResult
	for i, r := range results {
		switch {
		case r.Background:
			base, baseBlocks = &results[i], blockMedians(r.Blocks)
		case r.Library == pairedReference:
			refBlocks = blockMedians(r.Blocks)
		}
	}
	vsFastest, fastest := math.NaN(), ""
	if refBlocks != nil {
		for _, r := range results {
			if r.Library == pairedReference {
				continue
			}
			// The peer the reference compares worst with is the fastest.
			if v := blockRatio(refBlocks, blockMedians(r.Blocks)); !math.IsNaN(v) && (fastest == "" || v > vsFastest) {
				vsFastest, fastest = v, r.Library
			}
		}
	}
	out := map[string]figures{}
	for _, r := range results {
		if r.Background {
			continue
		}
		rec := r.Record
		for _, blk := range r.Blocks {
			rec.Cycles = append(rec.Cycles, blk...)
		}
		s := summarize(&passOutcome{start: start, results: []childResult{rec}})
		f := figures{
			Acq:          float64(s.acquisitions),
			Busy:         math.NaN(),
			HoldMean:     math.NaN(),
			GapP50:       math.NaN(),
			WaitP50:      ms(percentile(s.waits, 50)),
			WaitP99:      ms(percentile(s.waits, 99)),
			WaitMax:      ms(percentile(s.waits, 100)),
			CmdsPerAcq:   math.NaN(),
			SentPerAcq:   math.NaN(),
			InnerPerAcq:  math.NaN(),
			CPUPerAcq:    blockCPUPerCycle(r, pairCost),
			Allocs:       allocsPerCycle(r.Mallocs, r.AllocCycles, r.LoopAllocs),
			CycleP50:     us(percentile(s.cycles, 50)),
			CycleP90:     us(percentile(s.cycles, 90)),
			VsRef:        math.NaN(),
			VsFastest:    math.NaN(),
			VsBackground: math.NaN(),
			Errors:       s.errors,
			Notes:        s.notes,
		}
		if refBlocks != nil {
			f.VsRef = blockRatio(blockMedians(r.Blocks), refBlocks)
		}
		if r.Library == pairedReference {
			f.VsFastest, f.FastestPeer = vsFastest, fastest
			if base != nil {
				f.VsBackground = blockRatio(refBlocks, baseBlocks)
				f.Errors += base.Record.Errors
				for _, n := range base.Record.ErrorSamples {
					f.Notes = appendSample(f.Notes, "Background baseline: "+n)
				}
			}
		}
		out[r.Library] = f
	}
	return out
}

// allocsPerCycle returns the heap allocations per cycle that are not the
// loop's own: mallocs over cycles, less loop; NaN without cycles.
func allocsPerCycle(mallocs uint64, cycles int, loop float64) float64 {
	if cycles == 0 {
		return math.NaN()
	}
	return float64(mallocs)/float64(cycles) - loop
}

// blockMedians returns the median cycle of each block, NaN for a block
// without cycles.
func blockMedians(blocks [][]int64) []float64 {
	out := make([]float64, len(blocks))
	for i, blk := range blocks {
		sorted := append([]int64(nil), blk...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
		out[i] = percentile(sorted, 50)
	}
	return out
}

// blockRatio returns the median over blocks of lib[i] / ref[i], leaving
// out blocks where either has no cycles; NaN if none is left.
func blockRatio(lib, ref []float64) float64 {
	var ratios []float64
	for i := 0; i < min(len(lib), len(ref)); i++ {
		if ref[i] > 0 {
			ratios = append(ratios, lib[i]/ref[i])
		}
	}
	return median(ratios)
}

// blockCPUPerCycle returns a library's µs of Redis CPU per cycle over its
// blocks whose CPU was read: their CPU less pairCost each, over their
// cycles. NaN if none.
func blockCPUPerCycle(r pairedResult, pairCost int64) float64 {
	var cpu, cycles int64
	for i, c := range r.BlockCPU {
		if c < 0 || i >= len(r.Blocks) {
			continue
		}
		cpu += c - pairCost
		cycles += int64(len(r.Blocks[i]))
	}
	if cycles == 0 {
		return math.NaN()
	}
	return float64(cpu) / float64(cycles)
}
