package fencedlock

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock/internal/call"
	"github.com/fencedlock/fencedlock/internal/wait"
)

// TestDocsFiguresFollowTheCode checks that the figures the docs and the
// godoc give for the library's settings are the code's: each phrase is
// written out from the constants and functions the code runs with, and
// its file must hold it (whitespace and comment markers aside). A
// constant changed without its docs fails here.
func TestDocsFiguresFollowTheCode(t *testing.T) {
	defaults := wait.Delays{Min: defaultMinRetryDelay, Max: defaultMaxRetryDelay}
	// The least life of a place: no delays, no TTL.
	leastPlace, _ := wait.Delays{}.Place(0)
	// A waiter of a long TTL renews at the maximum delay, and its place
	// lasts three renewals.
	longestPlace, longestRenew := defaults.Place(time.Hour)
	if longestPlace != 3*defaultMaxRetryDelay || longestRenew != defaultMaxRetryDelay {
		t.Fatalf("with the default delays a place of a long TTL lasts %v, renewed every %v; the docs say three renewals of the maximum delay, %v", longestPlace, longestRenew, 3*defaultMaxRetryDelay)
	}
	// With delays small enough for the TTL to decide, the place lasts the
	// TTL.
	if life, _ := (wait.Delays{Min: leastRetryDelay, Max: time.Hour}).Place(time.Minute); life != time.Minute {
		t.Fatalf("a place of a 1m TTL with small delays lasts %v; the docs say the TTL", life)
	}

	// The span of a refused attempt's look for dead places, a constant of
	// the scripts'.
	lua, err := os.ReadFile("lua/src/lib/prune.lua")
	require.NoError(t, err)
	span := regexp.MustCompile(`(?m)^local prune_span = (\d+)$`).FindStringSubmatch(string(lua))
	require.NotNil(t, span, "lua/src/lib/prune.lua sets no prune_span")

	for _, c := range []struct{ file, phrase string }{
		{"docs/waiting.md", fmt.Sprintf("The defaults are %s and %s.", docMS(defaultMinRetryDelay), docMS(defaultMaxRetryDelay))},
		{"docs/waiting.md", fmt.Sprintf("A `minDelay` below %s is raised to %[1]s", docMS(leastRetryDelay))},
		{"docs/waiting.md", fmt.Sprintf("(at least a third of %s)", docMS(leastPlace))},
		{"docs/waiting.md", fmt.Sprintf("a third of the lock's TTL or of %s, whichever is longer, kept between the retry delay's bounds", docMS(leastPlace))},
		{"docs/waiting.md", fmt.Sprintf("such periods (at least %s)", docMS(leastPlace))},
		{"docs/waiting.md", fmt.Sprintf("three renewal periods, %s with the default delays", docWords(longestPlace))},
		{"docs/waiting.md", fmt.Sprintf("bounded to %s (leaving the queue: %[1]s more than the waiter's place lasts), at most %d at a time per `Locker`",
			docWords(call.Timeout), call.MaxRunning)},
		{"docs/waiting.md", fmt.Sprintf("each refused attempt of a waiter still alive removes the dead among the first %s places", span[1])},
		{"docs/waiting.md", fmt.Sprintf("The marker lasts the attempt's TTL plus %s", docWords(abandonMarkerTTL))},
		{"docs/redis.md", fmt.Sprintf("kept between three times the retry delay's bounds (%s and %s by default), and at least %s",
			docMS(3*defaultMinRetryDelay), docMS(longestPlace), docMS(leastPlace))},
		{"docs/redis.md", fmt.Sprintf("| the attempt's TTL plus %s |", docWords(abandonMarkerTTL))},
		{"acquire.go", fmt.Sprintf("The defaults are %v and %v. A minDelay below %v is raised to %[3]v",
			defaultMinRetryDelay, defaultMaxRetryDelay, leastRetryDelay)},
	} {
		text := readFlat(t, c.file)
		if !strings.Contains(text, flat(c.phrase)) {
			t.Errorf("%s does not say %q, which is what the code does", c.file, c.phrase)
		}
	}
}

// docMS writes d as the docs do: in ms below a second, else in whole
// seconds.
func docMS(d time.Duration) string {
	if d < time.Second || d%time.Second != 0 {
		return fmt.Sprintf("%d ms", d.Milliseconds())
	}
	return fmt.Sprintf("%d s", d/time.Second)
}

// docWords writes a whole number of seconds or minutes in words, as prose
// does: numbers below ten spelled out.
func docWords(d time.Duration) string {
	unit, n := "second", int64(d/time.Second)
	if d >= time.Minute && d%time.Minute == 0 {
		unit, n = "minute", int64(d/time.Minute)
	}
	number := fmt.Sprint(n)
	if n < 10 {
		number = []string{"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"}[n]
	}
	if n != 1 {
		unit += "s"
	}
	return number + " " + unit
}

var (
	commentMarks = regexp.MustCompile(`\n\s*//\s?`)
	blanks       = regexp.MustCompile(`\s+`)
)

// flat is s with comment markers dropped at line starts and every run of
// white space one blank.
func flat(s string) string {
	return blanks.ReplaceAllString(commentMarks.ReplaceAllString(s, " "), " ")
}

func readFlat(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return flat(string(b))
}

func TestDocWordsAndMS(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Second: "one second", 3 * time.Second: "three seconds", 16 * time.Minute: "16 minutes", 10 * time.Second: "10 seconds",
	} {
		if got := docWords(d); got != want {
			t.Errorf("docWords(%v) = %q, want %q", d, got, want)
		}
	}
	for d, want := range map[time.Duration]string{
		2 * time.Millisecond: "2 ms", time.Second: "1 s", 3 * time.Second: "3 s", 1500 * time.Millisecond: "1500 ms",
	} {
		if got := docMS(d); got != want {
			t.Errorf("docMS(%v) = %q, want %q", d, got, want)
		}
	}
}
