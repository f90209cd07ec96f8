package names

import (
	"strings"
	"testing"
)

func TestQuote(t *testing.T) {
	cases := []struct{ in, want string }{
		{"", `""`},
		{"order-1", `"order-1"`},
		{strings.Repeat("a", 128), `"` + strings.Repeat("a", 128) + `"`},
		{strings.Repeat("a", 129), `"` + strings.Repeat("a", 128) + `"... (129 bytes)`},
		// a 3-byte rune across the cut is left out whole
		{strings.Repeat("a", 127) + "€" + "b", `"` + strings.Repeat("a", 127) + `"... (131 bytes)`},
		{strings.Repeat("x", 1<<20), `"` + strings.Repeat("x", 128) + `"... (1048576 bytes)`},
	}
	for _, c := range cases {
		if got := Quote(c.in); got != c.want {
			t.Errorf("Quote(%d bytes) = %s, want %s", len(c.in), got, c.want)
		}
	}
}
