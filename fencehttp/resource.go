package fencehttp

import (
	"fmt"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/names"
)

// CheckResource returns nil when resource is a name the stores of
// fencedlock can keep, and otherwise an error, whose text quotes at most
// a short prefix of the name: for an empty name, or one longer than
// [fencedlock.MaxResourceLen] bytes.
//
// A client calls it before it sends a request for resource, and gets an
// error wrapping [fencedlock.ErrInvalidArgument], with nothing sent. A
// server calls it on the name a request carries, and passes the error to
// WriteError, which answers it with 400 Bad Request: the name is the
// client's input. (Given to a store instead, the name is refused with
// [fencedlock.ErrInvalidArgument], which WriteError answers with 500.)
func CheckResource(resource string) error {
	switch {
	case resource == "":
		return &resourceError{msg: "fencehttp: empty resource name"}
	case len(resource) > fencedlock.MaxResourceLen:
		return &resourceError{msg: fmt.Sprintf("fencehttp: resource name %s is longer than %d bytes", names.Quote(resource), fencedlock.MaxResourceLen)}
	}
	return nil
}

// resourceError is the error of CheckResource: it matches
// [fencedlock.ErrInvalidArgument], and WriteError answers it with 400.
type resourceError struct{ msg string }

func (e *resourceError) Error() string { return e.msg + ": " + fencedlock.ErrInvalidArgument.Error() }

// Is reports whether target is [fencedlock.ErrInvalidArgument].
func (e *resourceError) Is(target error) bool { return target == fencedlock.ErrInvalidArgument }
