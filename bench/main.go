// Command bench compares fencedlock with other Redis lock libraries for
// Go (redsync, redislock and rueidislock) on one real redis-server.
//
// Its scenarios (-scenarios, all by default, in this order):
//
//   - uncontended: acquire+release cycles back to back, each library in
//     its own worker process, every call with context.Background();
//   - uncontended-ctx: the same, every acquire and release call with a
//     ctx of its own with a 5s deadline, made for the call, as a request
//     handler's;
//   - uncontended-paired and uncontended-paired-ctx: the same two, with
//     every library in one process in alternating blocks, which cancels
//     the machine's drift between passes; the -ctx one also runs
//     fencedlock with context.Background() in every block, the baseline
//     of its request ctx / Background ratio;
//   - uncontended-ctx-heeding and uncontended-paired-ctx-heeding: the two
//     -ctx scenarios with every go-redis client made with
//     ContextTimeoutEnabled, the client fencedlock's docs advise for
//     request contexts;
//   - 1proc-8g, 4proc-2g, 8proc-4g, 1proc-32g: processes × goroutines
//     contending for one lock, each holding it -hold.
//
// It prints one row per library and scenario (acquisitions, how busy the
// lock was kept, wait percentiles, Redis commands and CPU per
// acquisition, heap allocations per uncontended cycle, errors), the key
// figures round by round, what an acquisition costs Redis with and
// without contention, and fencedlock's targets, each PASS or MISS on the
// median over rounds, with the rounds that met it.
//
// Every contended scenario runs -duration (3s) per timed pass; with the
// defaults a run of -rounds 5 takes about 10 minutes on 2 cores.
//
// Without -redis it starts its own redis-server on a free loopback port
// and kills it at exit. Run it from this directory:
//
//	go run .            # aligned text
//	go run . -markdown  # a Markdown table
//	go run . -v         # and every round's figures
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"
)

// config holds the parsed flags.
type config struct {
	redisAddr string
	duration  time.Duration
	rounds    int
	hold      time.Duration
	cycles    int
	blocks    int // paired scenarios: blocks per round
	blockCyc  int // paired scenarios: cycles per library per block
	libs      []*library
	scenarios []scenario
	markdown  bool
	verbose   bool
	opts      libOptions
}

// Derived settings of the passes.
const (
	// warmupDuration is the warm-up of a contended pass.
	warmupDuration = 300 * time.Millisecond
	// grace is how long after a contended run ends its last waiters may
	// still wait for the lock before their wait is cut off (an error).
	// Draining the waiters takes a few retry delays: well under it.
	grace = 2 * time.Second
)

// countingDuration is the length of a contended counting pass.
func (c config) countingDuration() time.Duration {
	return max(c.duration/3, 300*time.Millisecond).Round(time.Millisecond)
}

// countingCycles is the length of an uncontended counting pass.
func (c config) countingCycles() int { return max(c.cycles/5, 100) }

// warmupCycles is the warm-up of an uncontended pass.
func (c config) warmupCycles() int { return max(c.cycles/10, 50) }

// parseFlags parses the command line.
func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.redisAddr, "redis", "", "address of a Redis to use (its keys are kept: no FLUSHALL); empty: start a redis-server")
	fs.DurationVar(&c.duration, "duration", 3*time.Second, "length of each contended timed run")
	fs.IntVar(&c.rounds, "rounds", 3, "rounds; each runs every library once per scenario, and the table shows medians")
	fs.DurationVar(&c.opts.TTL, "ttl", 10*time.Second, "lock TTL for every library")
	fs.DurationVar(&c.hold, "hold", time.Millisecond, "how long a contending goroutine holds the lock (a sleep)")
	fs.IntVar(&c.cycles, "cycles", 3000, "acquire+release cycles of the uncontended timed run")
	fs.IntVar(&c.blocks, "blocks", 60, "the paired scenarios: blocks per round, each running every library in turn")
	fs.IntVar(&c.blockCyc, "block-cycles", 50, "the paired scenarios: acquire+release cycles per library per block")
	libs := fs.String("libs", libraryNames(), "libraries to run, comma-separated")
	scens := fs.String("scenarios", scenarioNames(), "scenarios to run, comma-separated")
	fs.BoolVar(&c.markdown, "markdown", false, "print Markdown instead of aligned text")
	fs.BoolVar(&c.verbose, "v", false, "also print every round's figures")
	fs.DurationVar(&c.opts.RedsyncDelay, "redsync-delay", 0, "redsync retry delay; 0 keeps its default (random 50-250ms)")
	fs.DurationVar(&c.opts.RedislockMin, "redislock-min", 16*time.Millisecond, "redislock ExponentialBackoff minimum")
	fs.DurationVar(&c.opts.RedislockMax, "redislock-max", 64*time.Millisecond, "redislock ExponentialBackoff maximum")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	var err error
	if c.libs, err = parseLibraries(*libs); err != nil {
		return c, err
	}
	if c.scenarios, err = parseScenarios(*scens); err != nil {
		return c, err
	}
	switch {
	case c.duration <= 0:
		return c, errors.New("-duration must be positive")
	case c.rounds < 1:
		return c, errors.New("-rounds must be at least 1")
	case c.opts.TTL < time.Millisecond:
		return c, errors.New("-ttl must be at least 1ms")
	case c.hold < 0:
		return c, errors.New("-hold must not be negative")
	case c.cycles < 1:
		return c, errors.New("-cycles must be at least 1")
	case c.blocks < 1 || c.blockCyc < 1:
		return c, errors.New("-blocks and -block-cycles must be at least 1")
	case c.opts.RedislockMin <= 0 || c.opts.RedislockMax < c.opts.RedislockMin:
		return c, errors.New("-redislock-min must be positive and at most -redislock-max")
	}
	return c, nil
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == childFlag {
		childMain()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the program, returning its exit code. Every process it starts
// is gone when it returns.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 2
	}
	if err := runBench(ctx, cfg, stdout, stderr); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("interrupted: %w", err)
		}
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	return 0
}

// bench is a benchmark run in progress.
type bench struct {
	cfg      config
	addr     string
	owned    bool     // the bench started the server: it may FLUSHALL
	ctl      *rawConn // the bench's own commands
	progress io.Writer

	// Set by calibrate.
	cpu        cpuSource     // the INFO cpu fields read
	overhead   serverReading // what an empty timed-pass window counts
	pairCost   int64         // µs of CPU between two back-to-back INFO cpu
	idlePerSec float64       // µs of CPU per second of the idle server
}

// runBench connects to (or starts) Redis, runs every round and writes
// the report to stdout; progress goes to stderr.
func runBench(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	b := &bench{cfg: cfg, addr: cfg.redisAddr, progress: stderr}
	if b.addr == "" {
		srv, err := startRedisServer(ctx)
		if err != nil {
			return err
		}
		defer srv.Stop()
		b.addr, b.owned = srv.Addr, true
	}
	ctl, err := dialRaw(b.addr)
	if err != nil {
		return fmt.Errorf("connecting to Redis at %s: %w", b.addr, err)
	}
	defer ctl.Close()
	b.ctl = ctl
	if err := b.calibrate(); err != nil {
		return err
	}
	h, err := b.header()
	if err != nil {
		return err
	}
	start := readHost()
	rows, err := b.runRounds(ctx)
	if err != nil {
		return err
	}
	h.host = describeHost(start, readHost())
	writeReport(stdout, h, rows, cfg.markdown, cfg.verbose)
	return nil
}

// runRounds runs every round: in each, every scenario, and in each
// scenario every library, in an order rotated by one each round. The
// paired scenario runs every library in one pass, once per round.
func (b *bench) runRounds(ctx context.Context) ([]row, error) {
	rows := make([]row, 0, len(b.cfg.scenarios)*len(b.cfg.libs))
	index := map[string]int{}
	for _, sc := range b.cfg.scenarios {
		for _, lib := range b.cfg.libs {
			index[sc.name+"/"+lib.name] = len(rows)
			rows = append(rows, row{scenario: sc.name, library: lib.name})
		}
	}
	for round := 1; round <= b.cfg.rounds; round++ {
		for _, sc := range b.cfg.scenarios {
			if sc.paired {
				figs, err := b.runPairedRound(ctx, sc, round)
				if err != nil {
					return nil, fmt.Errorf("round %d, %s: %w", round, sc.name, err)
				}
				for _, lib := range b.cfg.libs {
					i := index[sc.name+"/"+lib.name]
					rows[i].rounds = append(rows[i].rounds, figs[lib.name])
					b.logProgress(round, sc, lib, figs[lib.name])
				}
				continue
			}
			for _, lib := range rotate(b.cfg.libs, round-1) {
				f, err := b.runRow(ctx, sc, lib, round)
				if err != nil {
					return nil, fmt.Errorf("round %d, %s, %s: %w", round, sc.name, lib.name, err)
				}
				i := index[sc.name+"/"+lib.name]
				rows[i].rounds = append(rows[i].rounds, f)
				b.logProgress(round, sc, lib, f)
			}
		}
	}
	for i := range rows {
		rows[i].median = medianFigures(rows[i].rounds)
	}
	return rows, nil
}

// rotate returns libs starting at index n (mod len).
func rotate(libs []*library, n int) []*library {
	n %= len(libs)
	return append(append([]*library{}, libs[n:]...), libs[:n]...)
}

// runRow runs one library in one scenario for one round: the timed pass,
// then the counting pass.
func (b *bench) runRow(ctx context.Context, sc scenario, lib *library, round int) (figures, error) {
	var outs [2]*passOutcome
	for i, kind := range []passKind{timedPass, countingPass} {
		if err := b.flush(); err != nil {
			return figures{}, err
		}
		out, err := b.runPass(ctx, pass{kind: kind, scenario: sc, lib: lib, spec: b.passSpec(kind, sc, lib, round)})
		if err != nil {
			return figures{}, err
		}
		outs[i] = out
	}
	return roundFigures(sc, outs[0], outs[1]), nil
}

// passSpec returns the worker spec of a pass, with a resource name of
// its own.
func (b *bench) passSpec(kind passKind, sc scenario, lib *library, round int) childSpec {
	kindName := "timed"
	if kind == countingPass {
		kindName = "counting"
	}
	resource := fmt.Sprintf("bench:%s:%s:r%d:%s", sc.name, lib.name, round, kindName)
	spec := childSpec{
		Options:        sc.options(b.cfg.opts),
		Resource:       resource,
		WarmupResource: resource + ":warmup",
		Goroutines:     sc.goroutines,
		Hold:           b.cfg.hold,
		Grace:          grace,
	}
	if sc.cycles {
		spec.CallTimeout = sc.callTimeout()
	}
	switch {
	case sc.cycles && kind == countingPass:
		spec.Cycles, spec.WarmupCycles = b.cfg.countingCycles(), b.cfg.warmupCycles()
	case sc.cycles:
		spec.Cycles, spec.WarmupCycles = b.cfg.cycles, b.cfg.warmupCycles()
	case kind == countingPass:
		spec.Duration, spec.Warmup = b.cfg.countingDuration(), warmupDuration
	default:
		spec.Duration, spec.Warmup = b.cfg.duration, warmupDuration
	}
	return spec
}

// flush empties a server the bench started; a named server is left
// alone (every pass has resources of its own anyway).
func (b *bench) flush() error {
	if !b.owned {
		return nil
	}
	if _, err := b.ctl.Do("FLUSHALL"); err != nil {
		return fmt.Errorf("FLUSHALL: %w", err)
	}
	return nil
}

// logProgress writes one line per finished row to the progress stream.
func (b *bench) logProgress(round int, sc scenario, lib *library, f figures) {
	cells := f.cells()
	fmt.Fprintf(b.progress, "round %d/%d %-18s %-11s", round, b.cfg.rounds, sc.name, lib.name)
	for i, c := range cells {
		fmt.Fprintf(b.progress, " %s %s", columns[i], c)
	}
	fmt.Fprintln(b.progress)
}

// header describes the run for the report.
type header struct {
	redis   string
	cpu     string
	allocs  string
	machine string
	run     string
	host    string      // when it ran, and the host's steal time meanwhile
	libs    [][2]string // name and version, configuration
}

// header gathers the run's description.
func (b *bench) header() (header, error) {
	info, err := b.ctl.Do("INFO", "server")
	if err != nil {
		return header{}, fmt.Errorf("INFO server: %w", err)
	}
	version, _ := infoField(info, "redis_version")
	h := header{redis: fmt.Sprintf("redis-server %s at %s", version, b.addr)}
	if b.owned {
		h.redis += ", started by the bench (--save '' --appendonly no), FLUSHALL before every pass"
	} else {
		h.redis += ", named with -redis (no FLUSHALL; other clients' commands would count too)"
	}
	h.cpu = fmt.Sprintf("%s, read before and after each timed pass (never during a MONITOR pass) "+
		"less an empty window's %d µs (median of %d); paired scenarios: read by the worker process before and after each library's block, "+
		"less %d µs per pair; idle server: %.0f µs/s (its periodic tasks; included in every window, not subtracted)",
		b.cpu.describe(), b.overhead.cpu, pairSamples, b.pairCost, b.idlePerSec)
	versions := moduleVersions()
	h.machine = fmt.Sprintf("%s/%s, %d CPUs, GOMAXPROCS %d, %s, go-redis %s",
		runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(),
		versions["github.com/redis/go-redis/v9"])
	c := b.cfg
	h.run = fmt.Sprintf("rounds %d (library order rotated by one each round); contended: %v timed pass + %v counting pass, "+
		"each after a %v warm-up on another resource, hold %v (a sleep); uncontended: %d timed + %d counting cycles, each after %d warm-up cycles; "+
		"paired: one pass, all libraries in one process, %d warm-up cycles each, then %d blocks of %d cycles per library, order rotated by one each block "+
		"(uncontended-paired-ctx and -ctx-heeding: %s with context.Background() as one more library); "+
		"request ctx: context.WithTimeout(context.Background(), %v) per call; "+
		"lock TTL %v; every pass in fresh worker processes, one Redis client per process and library",
		c.rounds, c.duration, c.countingDuration(), warmupDuration, c.hold,
		c.cycles, c.countingCycles(), c.warmupCycles(),
		c.warmupCycles(), c.blocks, c.blockCyc, pairedReference, requestTimeout, c.opts.TTL)
	h.allocs = fmt.Sprintf("runtime.MemStats.Mallocs of the worker process over its timed cycles (after the warm-up), per cycle, "+
		"less the loop's own, which each worker measures on a lock that does nothing (here: %.2f per cycle with context.Background(), %.2f with a request ctx)",
		loopAllocs(0), loopAllocs(requestTimeout))
	for _, lib := range c.libs {
		h.libs = append(h.libs, [2]string{lib.name + " " + versions[lib.module], lib.describe(c.opts)})
	}
	return h, nil
}

// moduleVersions maps the module paths this binary was built with to
// their versions; a replaced module shows its replacement.
func moduleVersions() map[string]string {
	out := map[string]string{}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return out
	}
	for _, m := range bi.Deps {
		v := m.Version
		if r := m.Replace; r != nil {
			v = r.Version
			if v == "" || v == "(devel)" {
				v = "(local " + r.Path + ")"
			}
		}
		out[m.Path] = v
	}
	return out
}

// write writes the header as text or Markdown.
func (h header) write(w io.Writer, markdown bool) {
	if markdown {
		fmt.Fprintln(w, "Redis lock libraries compared:")
		fmt.Fprintln(w)
		fmt.Fprintf(w, "- Redis: %s\n- Redis CPU: %s\n- Allocations: %s\n- Machine: %s\n- Run: %s\n- Host: %s\n", h.redis, h.cpu, h.allocs, h.machine, h.run, h.host)
		for _, l := range h.libs {
			fmt.Fprintf(w, "- **%s**: %s\n", l[0], l[1])
		}
		return
	}
	fmt.Fprintln(w, "Redis lock libraries compared")
	fmt.Fprintf(w, "redis:   %s\ncpu:     %s\nallocs:  %s\nmachine: %s\nrun:     %s\nhost:    %s\nlibraries:\n", h.redis, h.cpu, h.allocs, h.machine, h.run, h.host)
	for _, l := range h.libs {
		fmt.Fprintf(w, "  %s: %s\n", l[0], l[1])
	}
}
