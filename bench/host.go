package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// hostReading is the wall clock and the machine's CPU time counters at
// one moment: steal time, the CPU time a virtual machine's host took back
// for others, moves every figure of a run on shared cores, so the report
// says how much there was.
type hostReading struct {
	at           time.Time
	steal, total uint64 // /proc/stat's first line, in clock ticks; total 0: not known
}

// readHost reads the clock and, where there is a /proc/stat (Linux), the
// machine's CPU time counters.
func readHost() hostReading {
	r := hostReading{at: time.Now()}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		r.steal, r.total, _ = parseProcStat(string(b))
	}
	return r
}

// parseProcStat returns the steal time and the total CPU time of the
// first line of /proc/stat ("cpu  user nice system idle iowait irq
// softirq steal guest guest_nice"): the total is the first eight fields
// (guest time is counted in user time already).
func parseProcStat(s string) (steal, total uint64, err error) {
	line, _, _ := strings.Cut(s, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: first line %q is not the machine's cpu line", line)
	}
	var v [8]uint64
	for i := range v {
		if v[i], err = strconv.ParseUint(f[i+1], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: field %d of %q: %w", i+1, line, err)
		}
		total += v[i]
	}
	return v[7], total, nil
}

// describeHost tells when a run ran and how much steal time there was.
func describeHost(start, end hostReading) string {
	s := fmt.Sprintf("ran %s to %s UTC", start.at.UTC().Format("2006-01-02 15:04:05"), end.at.UTC().Format("15:04:05"))
	if start.total == 0 || end.total <= start.total || end.steal < start.steal {
		return s + "; steal time not known (no /proc/stat)"
	}
	pct := 100 * float64(end.steal-start.steal) / float64(end.total-start.total)
	return s + fmt.Sprintf("; steal time %.1f %% of the machine's CPU time over the run (/proc/stat: the host took it back for others; above a few %% it moves every figure)", pct)
}
