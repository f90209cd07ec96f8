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
// one round trip, so Update costs two), and so do they wrapped by
// ObserveStore (reported as one fence); other stores take a Fence, a Get
// and a Put, and so does a Store of yours that embeds a *MemoryStore or
// *RedisStore: Update calls its own methods.
//
// fn runs on the caller's goroutine, and Update returns once it has: ctx
// bounds the store's calls, not fn. A Put after a ctx that ended while fn
// ran is not sent; a slow fn should watch ctx itself.
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

// fencedRead raises resource's fence in s to token and reads its value:
// found is false when nothing was written.
//
// A MemoryStore or RedisStore itself fences and reads in one step. The
// test is of s's own type, not of a method set: a Store of the caller's
// that embeds one of them and has Fence, Get or Put of its own (to keep
// resources under other names, or values encrypted) is used through its
// Store methods, as every other Store is.
func fencedRead(ctx context.Context, s Store, resource string, token Token) (value []byte, found bool, err error) {
	switch s := s.(type) {
	case *MemoryStore:
		return s.fence(ctx, resource, token, true)
	case *RedisStore:
		return s.fence(ctx, resource, token, true)
	case *observedStore:
		// One fence reported, and the store it wraps fences and reads
		// as it would unobserved.
		return s.fence(ctx, resource, token, true)
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
