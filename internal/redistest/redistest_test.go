package redistest

import (
	"bytes"
	"strings"
	"testing"

	"github.com/fencedlock/fencedlock/internal/servertest"
)

// Without redis-server on PATH, Binary skips the test and Main's report
// says how many were skipped and how to run them, in one line.
func TestSkippedWithoutRedisServerIsReported(t *testing.T) {
	var buf bytes.Buffer
	program.Report(&buf)
	if program.Skipped() == 0 && buf.Len() != 0 {
		t.Fatalf("report with nothing skipped: %q", buf.String())
	}

	t.Setenv("PATH", t.TempDir()) // no redis-server here
	t.Setenv("CI", "")
	// A Program of the test's own, so that Main reports no skip of it.
	old := program
	program = &servertest.Program{Name: old.Name, Tests: old.Tests, Install: old.Install}
	t.Cleanup(func() { program = old })
	before := program.Skipped()
	reached := false
	t.Run("real", func(t *testing.T) {
		Binary(t)
		reached = true
	})
	if reached {
		t.Fatal("Binary returned without redis-server on PATH")
	}
	if got := program.Skipped() - before; got != 1 {
		t.Fatalf("skipped counted %d tests, want 1", got)
	}

	buf.Reset()
	program.Report(&buf)
	out := buf.String()
	if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
		t.Errorf("report is not one line: %q", out)
	}
	for _, want := range []string{"skipped", "redis-server", "apt-get install redis-server", "CI=true"} {
		if !strings.Contains(out, want) {
			t.Errorf("report %q does not mention %q", out, want)
		}
	}
}
