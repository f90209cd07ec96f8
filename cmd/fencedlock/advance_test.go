//go:build unix

package main

import (
	"strings"
	"testing"

	"github.com/fencedlock/fencedlock"
)

// advance raises the counter, as after a restore from backup: the next
// run's token is above the floor.
func TestAdvance(t *testing.T) {
	e := newEnv(t)
	const floor = fencedlock.Token(1) << 60
	code, out, stderr := e.runStatus([]string{"advance", "restored", floor.String()})
	if code != 0 || stderr != "" {
		t.Fatalf("status %d, stderr %q", code, stderr)
	}
	oneLine(t, out, `"restored"`, floor.String())
	if c := e.inspect("restored").Counter; c < floor {
		t.Errorf("counter %d, want at least %d", c, floor)
	}
	code, out, stderr = e.runStatus([]string{"run", "restored", "--", "sh", "-c", `echo "$FENCEDLOCK_TOKEN"`})
	token, err := fencedlock.ParseToken(strings.TrimSpace(out))
	if code != 0 || err != nil || token <= floor {
		t.Errorf("run after advance: status %d, token %q (%v), stderr %q; want a token above %d", code, out, err, stderr, floor)
	}
	e.noLockLeft("restored")
}
