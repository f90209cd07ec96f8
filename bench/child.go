package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"sync"
	"time"
)

// childFlag, as the first argument, runs the program as a worker process
// of a pass. It is not listed in -help.
const childFlag = "-child"

// childSpec tells a worker process what to run. The parent sends it as
// the first line on the child's standard input.
type childSpec struct {
	Library        string
	Addr           string
	Options        libOptions
	Resource       string        // the measured resource
	WarmupResource string        // the resource the warm-up uses
	Goroutines     int           // contending goroutines (1 for cycles)
	Hold           time.Duration // sleep while holding (contended runs)
	Duration       time.Duration // length of a contended run
	Cycles         int           // > 0: an uncontended run of this many cycles
	Warmup         time.Duration // warm-up length of a contended run
	WarmupCycles   int           // warm-up cycles of an uncontended run
	Grace          time.Duration // how long after the run a waiter may still wait
	// CallTimeout, in an uncontended run, gives every acquire and release
	// call a ctx of its own with this deadline (see runCycles); 0 gives
	// them context.Background().
	CallTimeout time.Duration `json:",omitempty"`

	// A paired run (uncontended-paired, -ctx) sets Libraries instead of
	// Library: a client of each, on Resource and WarmupResource suffixed
	// with ":" and the library's name, WarmupCycles each, then Blocks
	// blocks of BlockCycles cycles per library, the libraries in an order
	// rotated by one each block, starting Rotation places in.
	Libraries   []string `json:",omitempty"`
	Blocks      int      `json:",omitempty"`
	BlockCycles int      `json:",omitempty"`
	Rotation    int      `json:",omitempty"`
	// BackgroundBaseline, in a paired run with a CallTimeout, adds the
	// reference library once more, its calls with context.Background(),
	// on a resource of its own (suffixed ":background"), as one more
	// library of every block: the baseline its request-ctx cycle is
	// compared with.
	BackgroundBaseline bool `json:",omitempty"`
	// CPU names the INFO cpu fields a paired run reads around each
	// block, on a connection of its own.
	CPU cpuSource `json:",omitempty"`
}

// startMessage is the parent's go: the time, in Unix nanoseconds, at
// which every worker process begins its run.
type startMessage struct {
	Start int64
}

// childMessage is one line a child writes on its standard output: Ready
// after its warm-up, then its Result (or an Error at any point).
type childMessage struct {
	Ready  bool         `json:",omitempty"`
	Error  string       `json:",omitempty"`
	Result *childResult `json:",omitempty"`
}

// childResult is the raw record of one worker process's run.
type childResult struct {
	Waits        []int64  // ns from calling acquire to holding, per acquisition
	Holds        []hold   // measured holds, per acquisition
	Cycles       []int64  // ns per acquire+release cycle (uncontended runs)
	Errors       int      // failed acquires and releases
	ErrorSamples []string // a few distinct error messages
	// Mallocs counts the heap allocations (runtime.MemStats.Mallocs) the
	// process made during the AllocCycles cycles of an uncontended run,
	// and LoopAllocs is the allocations per cycle of the loop itself
	// (loopAllocs), which are part of Mallocs.
	Mallocs     uint64  `json:",omitempty"`
	AllocCycles int     `json:",omitempty"`
	LoopAllocs  float64 `json:",omitempty"`
	// Paired holds a paired run's records, one per library, instead of
	// the fields above, and CPUPairCost the µs of Redis CPU between two
	// back-to-back INFO cpu readings of the worker, measured before the
	// run (cpuPairCost).
	Paired      []pairedResult `json:",omitempty"`
	CPUPairCost int64          `json:",omitempty"`
}

// hold is one measured hold: from acquire returning to calling release,
// in Unix ns, and the fencing token of the grant (0 where the library has
// none).
type hold struct {
	Start int64  `json:"s"`
	End   int64  `json:"e"`
	Token uint64 `json:"t,omitempty"`
}

// maxErrorSamples bounds the distinct error messages a record keeps.
const maxErrorSamples = 5

// record collects one goroutine's measurements.
type record struct {
	waits   []int64
	holds   []hold
	cycles  []int64
	errors  int
	samples []string
}

// newRecord returns a record with room for n acquisitions, so that
// recording them allocates nothing.
func newRecord(n int) *record {
	return &record{waits: make([]int64, 0, n), holds: make([]hold, 0, n), cycles: make([]int64, 0, n)}
}

// fail counts an error and keeps its message if it is new.
func (r *record) fail(prefix string, err error) {
	r.errors++
	r.samples = appendSample(r.samples, prefix+err.Error())
}

// merge adds other's measurements to r.
func (r *record) merge(other *record) {
	r.waits = append(r.waits, other.waits...)
	r.holds = append(r.holds, other.holds...)
	r.cycles = append(r.cycles, other.cycles...)
	r.errors += other.errors
	for _, s := range other.samples {
		r.samples = appendSample(r.samples, s)
	}
}

// runChild is the worker process: it reads its spec, warms up, reports
// ready, runs from the start time it is sent, reports its result and
// exits when its standard input closes. A closed standard input at any
// point (the parent is gone) ends it.
func runChild(stdin io.Reader, stdout io.Writer) int {
	dec := json.NewDecoder(stdin)
	enc := json.NewEncoder(stdout)
	fail := func(err error) int {
		_ = enc.Encode(childMessage{Error: err.Error()})
		return 1
	}
	var spec childSpec
	if err := dec.Decode(&spec); err != nil {
		return fail(fmt.Errorf("reading spec: %w", err))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	starts := make(chan startMessage, 1)
	go func() {
		// The only message after the spec is the start; EOF ends the child.
		var m startMessage
		if err := dec.Decode(&m); err == nil {
			starts <- m
			_, _ = io.Copy(io.Discard, stdin)
		}
		cancel()
	}()

	var run func(start time.Time) *childResult
	if len(spec.Libraries) > 0 {
		libs, err := openPaired(spec)
		if err != nil {
			return fail(err)
		}
		defer closePaired(libs)
		ctl, err := dialRaw(spec.Addr)
		if err != nil {
			return fail(fmt.Errorf("connecting for INFO cpu: %w", err))
		}
		defer ctl.Close()
		warmUpPaired(ctx, libs, spec)
		pairCost, err := ctl.cpuPairCost(spec.CPU)
		if err != nil {
			return fail(err)
		}
		run = func(start time.Time) *childResult {
			res := measurePaired(ctx, libs, ctl, spec, start)
			res.CPUPairCost = pairCost
			return res
		}
	} else {
		lib := libraryByName(spec.Library)
		if lib == nil {
			return fail(fmt.Errorf("unknown library %q", spec.Library))
		}
		client, err := lib.open(spec.Addr, spec.Options)
		if err != nil {
			return fail(fmt.Errorf("opening %s: %w", lib.name, err))
		}
		defer client.Close()
		warm := warmUp(ctx, client, spec)
		var loop float64
		if spec.Cycles > 0 {
			loop = loopAllocs(spec.CallTimeout)
		}
		run = func(start time.Time) *childResult {
			res := measure(ctx, client, spec, start)
			res.LoopAllocs = loop
			res.Errors += warm.errors
			for _, s := range warm.samples {
				res.ErrorSamples = appendSample(res.ErrorSamples, s)
			}
			return res
		}
	}
	if err := enc.Encode(childMessage{Ready: true}); err != nil {
		return 1
	}
	var start startMessage
	select {
	case start = <-starts:
	case <-ctx.Done():
		return 1
	}
	res := run(time.Unix(0, start.Start))
	if err := enc.Encode(childMessage{Result: res}); err != nil {
		return 1
	}
	<-ctx.Done() // standard input closed: the parent has the result
	return 0
}

// appendSample appends s to samples unless present or full.
func appendSample(samples []string, s string) []string {
	for _, have := range samples {
		if have == s {
			return samples
		}
	}
	if len(samples) >= maxErrorSamples {
		return samples
	}
	return append(samples, s)
}

// warmUp runs the pass's loop briefly on another resource, so that the
// connections, pools and script caches the run needs exist before it
// starts. Its errors are returned to be reported with the run's.
func warmUp(ctx context.Context, client libClient, spec childSpec) *record {
	w := spec
	w.Resource = spec.WarmupResource
	w.Duration = spec.Warmup
	w.Cycles = spec.WarmupCycles
	if (spec.Cycles > 0 && w.Cycles <= 0) || (spec.Cycles <= 0 && w.Duration <= 0) {
		return &record{}
	}
	res := measure(ctx, client, w, time.Now())
	r := &record{errors: res.Errors}
	for _, s := range res.ErrorSamples {
		r.samples = append(r.samples, "warm-up: "+s)
	}
	return r
}

// measure runs spec's goroutines from start and returns their merged
// record.
func measure(ctx context.Context, client libClient, spec childSpec, start time.Time) *childResult {
	time.Sleep(time.Until(start))
	// The waiters still waiting when the run ends may finish: a
	// cancellation, not a deadline, bounds them (a deadline would shorten
	// rueidislock's lock validity).
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := time.AfterFunc(time.Until(start.Add(spec.Duration+spec.Grace)), cancel)
	defer stop.Stop()

	n := spec.Goroutines
	if spec.Cycles > 0 {
		n = 1
	}
	records := make([]*record, n)
	var mallocs uint64
	var cycles int
	var wg sync.WaitGroup
	for i := range records {
		records[i] = &record{}
		if spec.Cycles > 0 {
			records[i] = newRecord(spec.Cycles)
		}
		wg.Add(1)
		go func(r *record, w lockWorker) {
			defer wg.Done()
			if spec.Cycles > 0 {
				// n is 1: this is the only writer, read after wg.Wait.
				mallocs, cycles = runCycles(ctx, w, spec.Cycles, spec.CallTimeout, r)
			} else {
				runContended(ctx, w, start.Add(spec.Duration), spec.Hold, spec.Grace, r)
			}
		}(records[i], client.worker(spec.Resource))
	}
	wg.Wait()

	all := &record{}
	for _, r := range records {
		all.merge(r)
	}
	sort.Slice(all.holds, func(i, j int) bool { return all.holds[i].Start < all.holds[j].Start })
	return &childResult{
		Waits:        all.waits,
		Holds:        all.holds,
		Cycles:       all.cycles,
		Errors:       all.errors,
		ErrorSamples: all.samples,
		Mallocs:      mallocs,
		AllocCycles:  cycles,
	}
}

// runContended loops until end: acquire (waiting), hold for the hold
// time, release. ctx ends grace after end: a wait still going on then is
// cut off and counted as an error. Releases do not depend on ctx: a lock
// taken is always released.
func runContended(ctx context.Context, w lockWorker, end time.Time, holdFor, grace time.Duration, r *record) {
	for time.Now().Before(end) {
		t0 := time.Now()
		token, err := w.acquire(ctx)
		t1 := time.Now()
		if err != nil {
			if ctx.Err() != nil {
				r.fail("acquire: ", fmt.Errorf("still waiting %v after the run ended, cut off: %w", grace, err))
				return
			}
			r.fail("acquire: ", err)
			time.Sleep(time.Millisecond)
			continue
		}
		time.Sleep(holdFor)
		t2 := time.Now()
		if err := w.release(context.Background()); err != nil {
			r.fail("release: ", err)
		}
		r.waits = append(r.waits, int64(t1.Sub(t0)))
		r.holds = append(r.holds, hold{Start: t1.UnixNano(), End: t2.UnixNano(), Token: token})
	}
}

// runCycles runs up to cycles acquire+release cycles back to back,
// until stop ends, and returns the heap allocations the process made
// meanwhile (runtime.MemStats.Mallocs, every goroutine's) and the cycles
// it ran. With a timeout, each cycle runs as a request handler would: a
// ctx with that deadline, made for the acquire call, lasts until the
// release has returned (rueidislock ties its lock to it), and the
// release call gets one of its own; making and cancelling them is part of
// the cycle. Without, both calls get context.Background().
func runCycles(stop context.Context, w lockWorker, cycles int, timeout time.Duration, r *record) (mallocs uint64, ran int) {
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for ; ran < cycles && stop.Err() == nil; ran++ {
		t0 := time.Now()
		actx, cancelAcquire := callContext(timeout)
		token, err := w.acquire(actx)
		t1 := time.Now()
		if err != nil {
			cancelAcquire()
			r.fail("acquire: ", err)
			continue
		}
		rctx, cancelRelease := callContext(timeout)
		if err := w.release(rctx); err != nil {
			r.fail("release: ", err)
		}
		cancelRelease()
		cancelAcquire()
		t2 := time.Now()
		r.waits = append(r.waits, int64(t1.Sub(t0)))
		r.holds = append(r.holds, hold{Start: t1.UnixNano(), End: t1.UnixNano(), Token: token})
		r.cycles = append(r.cycles, int64(t2.Sub(t0)))
	}
	runtime.ReadMemStats(&m1)
	return m1.Mallocs - m0.Mallocs, ran
}

// callContext returns the ctx of one call of an uncontended cycle: with
// a timeout, a new ctx with that deadline; else context.Background() and
// a cancel func that does nothing.
func callContext(timeout time.Duration) (context.Context, context.CancelFunc) {
	if timeout <= 0 {
		return context.Background(), func() {}
	}
	return context.WithTimeout(context.Background(), timeout)
}

// nopWorker is a lock that does nothing: runCycles on it measures the
// loop's own cost.
type nopWorker struct{}

func (nopWorker) acquire(context.Context) (uint64, error) { return 0, nil }
func (nopWorker) release(context.Context) error           { return nil }

// loopCycles is how many cycles loopAllocs runs.
const loopCycles = 1000

// loopAllocs returns runCycles' own heap allocations per cycle with the
// given call timeout (the ctxs it makes): runCycles on nopWorker, after a
// first run that warms it up.
func loopAllocs(timeout time.Duration) float64 {
	var mallocs uint64
	var ran int
	for i := 0; i < 2; i++ {
		mallocs, ran = runCycles(context.Background(), nopWorker{}, loopCycles, timeout, newRecord(loopCycles))
	}
	return float64(mallocs) / float64(ran)
}

// childMain is main for a worker process.
func childMain() {
	os.Exit(runChild(os.Stdin, os.Stdout))
}
