package redistest

import (
	"bytes"
	"strings"
	"testing"
)

// Without redis-server on PATH, Binary skips the test and Main's report
// says how many were skipped and how to run them, in one line.
func TestSkippedWithoutRedisServerIsReported(t *testing.T) {
	var buf bytes.Buffer
	reportSkipped(&buf)
	if skipped.Load() == 0 && buf.Len() != 0 {
		t.Fatalf("report with nothing skipped: %q", buf.String())
	}

	t.Setenv("PATH", t.TempDir()) // no redis-server here
	t.Setenv("CI", "")
	before := skipped.Load()
	t.Cleanup(func() { skipped.Add(before - skipped.Load()) })
	reached := false
	t.Run("real", func(t *testing.T) {
		Binary(t)
		reached = true
	})
	if reached {
		t.Fatal("Binary returned without redis-server on PATH")
	}
	if got := skipped.Load() - before; got != 1 {
		t.Fatalf("skipped counted %d tests, want 1", got)
	}

	buf.Reset()
	reportSkipped(&buf)
	out := buf.String()
	if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
		t.Errorf("report is not one line: %q", out)
	}
	for _, want := range []string{"skipped", "redis-server is not on PATH", "apt-get install redis-server", "CI=true"} {
		if !strings.Contains(out, want) {
			t.Errorf("report %q does not mention %q", out, want)
		}
	}
}
