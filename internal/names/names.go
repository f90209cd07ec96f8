// Package names holds the one limit on resource names and the one way
// errors quote them, shared by the Locker, every store and fencehttp.
package names

import (
	"strconv"
	"unicode/utf8"
)

// Max is the longest resource name accepted, in bytes.
const Max = 1024

// quoted is how many bytes of a name an error message quotes at most.
const quoted = 128

// Quote returns name quoted as %q does, cut after its first 128 bytes (at a
// character boundary) with the full length noted, so that an error never
// repeats a long name whole.
func Quote(name string) string {
	if len(name) <= quoted {
		return strconv.Quote(name)
	}
	n := quoted
	for n > 0 && !utf8.RuneStart(name[n]) {
		n--
	}
	return strconv.Quote(name[:n]) + "... (" + strconv.Itoa(len(name)) + " bytes)"
}
