package fencedlock

import (
	"context"
	"errors"
)

// Update reads resource's value and writes back what fn makes of it,
// fenced by token from the read on: it raises the fence to token (see
// Store.Fence), reads the value, calls fn with it (found is false when
// nothing was written), and puts fn's result with the same token. So no
// holder with a lower token can write between the read and the write: a
// stale holder's write there is refused, instead of being accepted and
// then overwritten by fn's result.
//
// A token below the fence returns the *StaleTokenError of the fence
// without calling fn. When fn returns an error, Update returns it as it
// is and writes nothing; the fence stays raised. Errors of the store are
// returned as the store gives them: a later writer with a higher token
// makes the final Put fail with a *StaleTokenError, and an unreachable
// backend gives ErrUnavailable. A nil s or fn returns an error wrapping
// ErrInvalidArgument.
//
// MemoryStore and RedisStore fence and read in one step (RedisStore in
// one round trip, so Update costs two); other stores take a Fence, a Get
// and a Put.
func Update(ctx context.Context, s Store, resource string, token Token, fn func(value []byte, found bool) ([]byte, error)) error {
	if isNil(s) {
		return invalidArg("Update with a nil Store")
	}
	if fn == nil {
		return invalidArg("Update with a nil fn")
	}
	value, found, err := fencedRead(ctx, s, resource, token)
	if err != nil {
		return err
	}
	value, err = fn(value, found)
	if err != nil {
		return err
	}
	return s.Put(ctx, resource, token, value)
}

// fencer is a Store of this package that fences and reads in one step.
type fencer interface {
	// fence is Store.Fence; with read it also returns the value, and
	// whether one was written, as the fence left them.
	fence(ctx context.Context, resource string, token Token, read bool) ([]byte, bool, error)
}

// fencedRead raises resource's fence in s to token and reads its value:
// found is false when nothing was written.
func fencedRead(ctx context.Context, s Store, resource string, token Token) (value []byte, found bool, err error) {
	if f, ok := s.(fencer); ok {
		return f.fence(ctx, resource, token, true)
	}
	if err := s.Fence(ctx, resource, token); err != nil {
		return nil, false, err
	}
	value, _, err = s.Get(ctx, resource)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	}
	return value, true, nil
}
