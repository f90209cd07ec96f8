package fencedlock

import (
	"fmt"

	"github.com/fencedlock/fencedlock/internal/names"
)

// CheckToken is the fencing rule, the one every Store applies to every
// Put and Fence. token is the caller's and current is the resource's
// fence, the highest token the store has seen for it (zero when it has
// seen none), in the order of the fields of StaleTokenError.
//
// It returns nil when token >= current: the write or fence may proceed,
// and the store must raise the fence to token (and, for a Put, record
// token next to the value) in the same atomic step. Equal passes because
// one holder writes many times with one token. It returns a
// *StaleTokenError when token < current, and an error wrapping
// ErrInvalidToken when token is zero.
//
// A Store written outside this package calls CheckToken inside its own
// transaction, with current read under the same lock or snapshot as the
// write; package fencetest checks that it does.
func CheckToken(resource string, token, current Token) error {
	if token == 0 {
		return fmt.Errorf("%w: zero token for resource %s", ErrInvalidToken, names.Quote(resource))
	}
	if token < current {
		return &StaleTokenError{Resource: resource, Token: token, Current: current}
	}
	return nil
}
