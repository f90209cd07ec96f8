package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	steal, total, err := parseProcStat("cpu  100 5 50 800 10 1 2 32 7 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
	if err != nil {
		t.Fatal(err)
	}
	if steal != 32 || total != 1000 {
		t.Fatalf("steal %d total %d, want 32 and 1000 (guest time is in user time already)", steal, total)
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4 5 6 7 8\n", "cpu 1 2 3\n", "cpu 1 2 x 4 5 6 7 8\n"} {
		if _, _, err := parseProcStat(bad); err == nil {
			t.Errorf("parseProcStat(%q) took it", bad)
		}
	}
}

func TestDescribeHost(t *testing.T) {
	at := time.Date(2026, 12, 2, 4, 55, 17, 0, time.UTC)
	start := hostReading{at: at, steal: 100, total: 10000}
	end := hostReading{at: at.Add(10 * time.Minute), steal: 144, total: 11000}
	got := describeHost(start, end)
	if !strings.Contains(got, "ran 2026-12-02 04:55:17 to 05:05:17 UTC") || !strings.Contains(got, "steal time 4.4 %") {
		t.Errorf("describeHost = %q", got)
	}
	if got := describeHost(hostReading{at: at}, hostReading{at: at}); !strings.Contains(got, "not known") {
		t.Errorf("without counters: %q", got)
	}
}
