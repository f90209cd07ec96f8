package fencedlock

import (
	"fmt"

	"github.com/fencedlock/fencedlock/internal/names"
)

// CheckToken is the fencing rule, the one every Store applies to every
// write. token is the writer's and current is the token stored with the
// resource's value (zero when the resource has no value yet), in the order
// of the fields of StaleTokenError.
//
// It returns nil when token >= current: the write may proceed, and the
// store must record token next to the value in the same atomic step. Equal
// passes because one holder writes many times with one token. It returns a
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
