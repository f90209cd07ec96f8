package names

import (
	"strings"
	"testing"
)

func TestQuote(t *testing.T) {
	cases := []struct{ in, want string }{
		{"", `""`},
		{"order-1", `"order-1"`},
		{strings.Repeat("a", 64), `"` + strings.Repeat("a", 64) + `"`},
		{strings.Repeat("a", 65), `"` + strings.Repeat("a", 64) + `"... (65 bytes)`},
		// a 3-byte rune across the cut is left out whole
		{strings.Repeat("a", 63) + "€" + "b", `"` + strings.Repeat("a", 63) + `"... (67 bytes)`},
		{strings.Repeat("x", 1<<20), `"` + strings.Repeat("x", 64) + `"... (1048576 bytes)`},
	}
	for _, c := range cases {
		if got := Quote(c.in); got != c.want {
			t.Errorf("Quote(%d bytes) = %s, want %s", len(c.in), got, c.want)
		}
	}
}
