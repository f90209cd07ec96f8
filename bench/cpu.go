package main

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"time"
)

// Redis CPU time is read from INFO cpu: the main thread's user and system
// time where the server reports them (Redis 6.2 and later), else the
// whole process's. Both are seconds with microsecond resolution; the
// bench works in whole microseconds.

// The INFO cpu fields the bench reads.
const (
	cpuUserMain = "used_cpu_user_main_thread"
	cpuSysMain  = "used_cpu_sys_main_thread"
	cpuUser     = "used_cpu_user"
	cpuSys      = "used_cpu_sys"
)

// cpuSource says which INFO cpu fields a reading sums. The zero value
// reads the whole process.
type cpuSource struct {
	MainThread bool // the *_main_thread fields
}

// fields returns the user and system field names of s.
func (s cpuSource) fields() (user, sys string) {
	if s.MainThread {
		return cpuUserMain, cpuSysMain
	}
	return cpuUser, cpuSys
}

// describe says what s reads, for the report.
func (s cpuSource) describe() string {
	user, sys := s.fields()
	if s.MainThread {
		return fmt.Sprintf("INFO cpu %s + %s (the main thread only)", user, sys)
	}
	return fmt.Sprintf("INFO cpu %s + %s: FALLBACK, this server has no %s/%s, so the figures include its background threads",
		user, sys, cpuUserMain, cpuSysMain)
}

// detectCPUSource asks the server which fields it has.
func (c *rawConn) detectCPUSource() (cpuSource, error) {
	info, err := c.Do("INFO", "cpu")
	if err != nil {
		return cpuSource{}, fmt.Errorf("INFO cpu: %w", err)
	}
	_, user := infoField(info, cpuUserMain)
	_, sys := infoField(info, cpuSysMain)
	if user && sys {
		return cpuSource{MainThread: true}, nil
	}
	if _, ok := infoField(info, cpuUser); !ok {
		return cpuSource{}, errors.New("INFO cpu has neither " + cpuUserMain + " nor " + cpuUser)
	}
	return cpuSource{}, nil
}

// redisCPU returns the server's CPU time so far, in µs, as s reads it.
func (c *rawConn) redisCPU(s cpuSource) (int64, error) {
	info, err := c.Do("INFO", "cpu")
	if err != nil {
		return 0, fmt.Errorf("INFO cpu: %w", err)
	}
	var total int64
	user, sys := s.fields()
	for _, name := range []string{user, sys} {
		v, ok := infoField(info, name)
		if !ok {
			return 0, fmt.Errorf("INFO cpu has no %s", name)
		}
		sec, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu %s: %w", name, err)
		}
		total += int64(math.Round(sec * 1e6))
	}
	return total, nil
}

// pairSamples is how many back-to-back reading pairs a calibration
// takes the median of.
const pairSamples = 15

// cpuPairCost returns the median Redis CPU, in µs, between two
// back-to-back readings of s on c: what a reading pair around a block
// adds to the block's figure.
func (c *rawConn) cpuPairCost(s cpuSource) (int64, error) {
	prev, err := c.redisCPU(s)
	if err != nil {
		return 0, err
	}
	deltas := make([]int64, 0, pairSamples)
	for i := 0; i < pairSamples; i++ {
		next, err := c.redisCPU(s)
		if err != nil {
			return 0, err
		}
		deltas = append(deltas, next-prev)
		prev = next
	}
	return medianInt(deltas), nil
}

// medianInt returns the (lower) median of values, 0 for none.
func medianInt(values []int64) int64 {
	if len(values) == 0 {
		return 0
	}
	v := append([]int64(nil), values...)
	sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
	return v[(len(v)-1)/2]
}

// serverReading is the server's counters at one point, or their change
// over a window.
type serverReading struct {
	commands int64 // total_commands_processed
	cpu      int64 // µs of CPU, as bench.cpu reads it
}

// openWindow reads the counters at the start of a timed pass: commands,
// then CPU, so that closeWindow's readings mirror them.
func (b *bench) openWindow() (serverReading, error) {
	var r serverReading
	var err error
	if r.commands, err = b.ctl.commandsProcessed(); err != nil {
		return r, fmt.Errorf("INFO stats: %w", err)
	}
	if r.cpu, err = b.ctl.redisCPU(b.cpu); err != nil {
		return r, err
	}
	return r, nil
}

// closeWindow reads the counters at the end of a timed pass and returns
// their change since before, less what the bench's own four INFO calls
// add (b.overhead).
func (b *bench) closeWindow(before serverReading) (serverReading, error) {
	var after serverReading
	var err error
	if after.cpu, err = b.ctl.redisCPU(b.cpu); err != nil {
		return after, err
	}
	if after.commands, err = b.ctl.commandsProcessed(); err != nil {
		return after, fmt.Errorf("INFO stats: %w", err)
	}
	return serverReading{
		commands: after.commands - before.commands - b.overhead.commands,
		cpu:      after.cpu - before.cpu - b.overhead.cpu,
	}, nil
}

// calibrate finds which CPU fields the server has, what an empty window
// (openWindow then closeWindow) counts, the median of pairSamples of
// them, and the idle server's CPU per second.
func (b *bench) calibrate() error {
	var err error
	if b.cpu, err = b.ctl.detectCPUSource(); err != nil {
		return err
	}
	var cmds, cpu []int64
	for i := 0; i < pairSamples; i++ {
		before, err := b.openWindow()
		if err != nil {
			return err
		}
		d, err := b.closeWindow(before) // b.overhead is still zero
		if err != nil {
			return err
		}
		cmds = append(cmds, d.commands)
		cpu = append(cpu, d.cpu)
	}
	b.overhead = serverReading{commands: medianInt(cmds), cpu: medianInt(cpu)}
	if b.pairCost, err = b.ctl.cpuPairCost(b.cpu); err != nil {
		return err
	}
	before, err := b.ctl.redisCPU(b.cpu)
	if err != nil {
		return err
	}
	t0 := time.Now()
	time.Sleep(idleSample)
	after, err := b.ctl.redisCPU(b.cpu)
	if err != nil {
		return err
	}
	b.idlePerSec = float64(after-before-b.pairCost) / time.Since(t0).Seconds()
	return nil
}

// idleSample is how long calibrate watches the idle server.
const idleSample = time.Second
