package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// scenario is one way of using a lock.
type scenario struct {
	name       string
	procs      int  // worker processes
	goroutines int  // contending goroutines per process
	cycles     bool // uncontended acquire+release cycles, one goroutine
	// paired: every library in one process, in alternating blocks of
	// uncontended cycles, once per round (see paired.go)
	paired bool
	// requestCtx: every acquire and release call of the uncontended
	// cycles gets a ctx of its own with a requestTimeout deadline, as a
	// request handler's; else context.Background().
	requestCtx bool
	// heeding: the go-redis clients are made with ContextTimeoutEnabled
	// (see libOptions.ContextTimeout).
	heeding bool
}

// requestTimeout is the deadline of a request ctx.
const requestTimeout = 5 * time.Second

// scenarios lists the scenarios, in table order.
var scenarios = []scenario{
	{name: "uncontended", procs: 1, goroutines: 1, cycles: true},
	{name: "uncontended-ctx", procs: 1, goroutines: 1, cycles: true, requestCtx: true},
	{name: "uncontended-paired", procs: 1, goroutines: 1, cycles: true, paired: true},
	{name: "uncontended-paired-ctx", procs: 1, goroutines: 1, cycles: true, paired: true, requestCtx: true},
	{name: "uncontended-ctx-heeding", procs: 1, goroutines: 1, cycles: true, requestCtx: true, heeding: true},
	{name: "uncontended-paired-ctx-heeding", procs: 1, goroutines: 1, cycles: true, paired: true, requestCtx: true, heeding: true},
	{name: "1proc-8g", procs: 1, goroutines: 8},
	{name: "4proc-2g", procs: 4, goroutines: 2},
	{name: "8proc-4g", procs: 8, goroutines: 4},
	{name: "1proc-32g", procs: 1, goroutines: 32},
}

// contenders returns how many goroutines contend in sc, over all its
// processes.
func (sc scenario) contenders() int { return sc.procs * sc.goroutines }

// callTimeout is the deadline of the ctx each uncontended call of sc
// gets; 0 for context.Background().
func (sc scenario) callTimeout() time.Duration {
	if sc.requestCtx {
		return requestTimeout
	}
	return 0
}

// ctxName names the ctx the calls of an uncontended scenario get.
func (sc scenario) ctxName() string {
	switch {
	case sc.heeding:
		return "request ctx, ContextTimeoutEnabled clients"
	case sc.requestCtx:
		return "request ctx"
	}
	return "Background ctx"
}

// options returns the libraries' options for sc's passes: o, with the
// go-redis clients heeding ctx deadlines if sc asks for it.
func (sc scenario) options(o libOptions) libOptions {
	o.ContextTimeout = sc.heeding
	return o
}

// parseScenarios parses the -scenarios flag.
func parseScenarios(list string) ([]scenario, error) {
	var out []scenario
	seen := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" || seen[name] {
			continue
		}
		found := false
		for _, sc := range scenarios {
			if sc.name == name {
				out = append(out, sc)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown scenario %q (known: %s)", name, scenarioNames())
		}
		seen[name] = true
	}
	if len(out) == 0 {
		return nil, errors.New("no scenario selected")
	}
	return out, nil
}

// scenarioNames returns the known scenarios' names, comma-separated.
func scenarioNames() string {
	names := make([]string, len(scenarios))
	for i, sc := range scenarios {
		names[i] = sc.name
	}
	return strings.Join(names, ",")
}

// passKind tells a timed pass from a counting pass.
type passKind int

const (
	timedPass    passKind = iota // INFO command counts and CPU, no MONITOR
	countingPass                 // shorter, under MONITOR
)

// pass is one run of one scenario with one library.
type pass struct {
	kind     passKind
	scenario scenario
	lib      *library  // nil for a paired pass, which sets spec.Libraries
	spec     childSpec // Goroutines and Resource set; Library and Addr filled in by run
}

// passOutcome is what a pass brings back.
type passOutcome struct {
	start    int64         // Unix ns the workers were told to start at
	results  []childResult // one per worker process
	commands int64         // timed pass: total_commands_processed delta
	cpu      int64         // timed pass: µs of Redis CPU (bench.cpu)
	monitor  monitorCounts // counting pass
}

// startDelay is how far ahead of now the parent sets the start time, so
// that every worker process has it before it comes.
const startDelay = 100 * time.Millisecond

// runPass starts the pass's worker processes, waits until they are warm,
// opens the measurement window (INFO stats and cpu for a timed pass,
// MONITOR for a counting pass), starts them, collects their results and
// closes the window. The processes are killed on every
// way out.
func (b *bench) runPass(ctx context.Context, p pass) (*passOutcome, error) {
	spec := p.spec
	if p.lib != nil {
		spec.Library = p.lib.name
	}
	spec.Addr = b.addr
	children := make([]*childProc, 0, p.scenario.procs)
	defer func() {
		for _, c := range children {
			c.kill()
		}
	}()
	for i := 0; i < p.scenario.procs; i++ {
		c, err := startChild(spec)
		if err != nil {
			return nil, err
		}
		children = append(children, c)
	}
	setupTimeout := 60*time.Second + spec.Warmup
	for _, c := range children {
		if _, err := c.receive(ctx, setupTimeout, func(m childMessage) bool { return m.Ready }); err != nil {
			return nil, err
		}
	}

	out := &passOutcome{}
	var mon *commandMonitor
	var before serverReading
	var err error
	if p.kind == countingPass {
		if mon, err = startMonitor(b.addr); err != nil {
			return nil, fmt.Errorf("starting MONITOR: %w", err)
		}
		defer mon.close()
	} else if before, err = b.openWindow(); err != nil {
		return nil, fmt.Errorf("INFO before the run: %w", err)
	}

	out.start = time.Now().Add(startDelay).UnixNano()
	for _, c := range children {
		if err := c.send(startMessage{Start: out.start}); err != nil {
			return nil, err
		}
	}
	runTimeout := startDelay + spec.Duration + spec.Grace + 60*time.Second
	for _, c := range children {
		m, err := c.receive(ctx, runTimeout, func(m childMessage) bool { return m.Result != nil })
		if err != nil {
			return nil, err
		}
		out.results = append(out.results, *m.Result)
	}

	if p.kind == countingPass {
		if out.monitor, err = mon.Stop(); err != nil {
			return nil, err
		}
	} else {
		d, err := b.closeWindow(before)
		if err != nil {
			return nil, fmt.Errorf("INFO after the run: %w", err)
		}
		out.commands, out.cpu = d.commands, d.cpu
	}
	// Every child is told to exit before any is waited for: their exits
	// overlap (a -race build sleeps a second at exit).
	for _, c := range children {
		c.stdin.Close()
	}
	for _, c := range children {
		if err := c.finish(); err != nil {
			return nil, err
		}
	}
	children = nil
	return out, nil
}

// childProc is a running worker process.
type childProc struct {
	cmd      *exec.Cmd
	stdin    io.WriteCloser
	enc      *json.Encoder
	messages chan childMessage // closed when its standard output ends
	stderr   *tailBuffer
	exited   chan struct{}
	waitErr  error
}

// startChild starts a worker process of this same executable and sends
// it spec.
func startChild(spec childSpec) (*childProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding the bench executable: %w", err)
	}
	c := &childProc{
		cmd:      exec.Command(exe, childFlag),
		messages: make(chan childMessage, 2),
		stderr:   &tailBuffer{max: 8 << 10},
		exited:   make(chan struct{}),
	}
	c.cmd.Stderr = c.stderr
	dieWithParent(c.cmd)
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting a worker process: %w", err)
	}
	go c.readMessages(stdout)
	c.enc = json.NewEncoder(c.stdin)
	if err := c.send(spec); err != nil {
		c.kill()
		return nil, err
	}
	return c, nil
}

// readMessages decodes the child's output lines until it ends, then
// reaps the process.
func (c *childProc) readMessages(stdout io.Reader) {
	dec := json.NewDecoder(bufio.NewReaderSize(stdout, 1<<20))
	for {
		var m childMessage
		if err := dec.Decode(&m); err != nil {
			break
		}
		c.messages <- m
	}
	close(c.messages)
	c.waitErr = c.cmd.Wait()
	close(c.exited)
}

// send writes one message to the child's standard input.
func (c *childProc) send(v any) error {
	if err := c.enc.Encode(v); err != nil {
		return fmt.Errorf("writing to a worker process: %w%s", err, c.stderr.suffix())
	}
	return nil
}

// receive waits for the message that want accepts. An error message, the
// end of the child's output, ctx or timeout end the wait with an error.
func (c *childProc) receive(ctx context.Context, timeout time.Duration, want func(childMessage) bool) (childMessage, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case m, ok := <-c.messages:
			switch {
			case !ok:
				<-c.exited
				return m, fmt.Errorf("worker process ended early (%v)%s", c.waitErr, c.stderr.suffix())
			case m.Error != "":
				return m, fmt.Errorf("worker process: %s%s", m.Error, c.stderr.suffix())
			case want(m):
				return m, nil
			}
		case <-ctx.Done():
			return childMessage{}, ctx.Err()
		case <-timer.C:
			return childMessage{}, fmt.Errorf("worker process silent for %v%s", timeout, c.stderr.suffix())
		}
	}
}

// finish closes the child's standard input, which makes it exit, and
// waits for it.
func (c *childProc) finish() error {
	c.stdin.Close()
	select {
	case <-c.exited:
	case <-time.After(10 * time.Second):
		c.kill()
		return fmt.Errorf("worker process did not exit%s", c.stderr.suffix())
	}
	if c.waitErr != nil {
		return fmt.Errorf("worker process: %v%s", c.waitErr, c.stderr.suffix())
	}
	return nil
}

// kill ends the child at once and waits until it is reaped.
func (c *childProc) kill() {
	c.stdin.Close()
	if c.cmd.Process != nil {
		_ = c.cmd.Process.Kill()
	}
	select {
	case <-c.exited:
	case <-time.After(5 * time.Second):
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// suffix returns the buffered text as an error-message suffix.
func (t *tailBuffer) suffix() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(string(t.buf))
	if s == "" {
		return ""
	}
	return "\nworker stderr:\n" + s
}
