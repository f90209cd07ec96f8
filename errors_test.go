package fencedlock_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
)

func TestStaleTokenErrorMessage(t *testing.T) {
	err := &fencedlock.StaleTokenError{Resource: "order-queue", Token: 1795969516343361, Current: 1795969516343362}
	msg := err.Error()
	assert.Contains(t, msg, `"order-queue"`)
	assert.Contains(t, msg, "1795969516343361")
	assert.Contains(t, msg, "1795969516343362")
	assert.Contains(t, msg, "fencedlock:")
}

func TestStaleTokenErrorWrapping(t *testing.T) {
	orig := fencedlock.CheckToken("r", 3, 7)
	require.Error(t, orig)

	wrapped := fmt.Errorf("saving order: %w", fmt.Errorf("put: %w", orig))
	assert.ErrorIs(t, wrapped, fencedlock.ErrStaleToken)
	assert.NotErrorIs(t, wrapped, fencedlock.ErrLockLost)
	assert.NotErrorIs(t, wrapped, fencedlock.ErrNotAcquired)

	var se *fencedlock.StaleTokenError
	require.True(t, errors.As(wrapped, &se))
	assert.Equal(t, "r", se.Resource)
	assert.Equal(t, fencedlock.Token(3), se.Token)
	assert.Equal(t, fencedlock.Token(7), se.Current)
	assert.Contains(t, wrapped.Error(), se.Error())

	joined := errors.Join(errors.New("other"), orig)
	assert.ErrorIs(t, joined, fencedlock.ErrStaleToken)
	require.True(t, errors.As(joined, &se))

	// A StaleTokenError matches only ErrStaleToken, not other sentinels,
	// and other errors do not match it.
	for _, sentinel := range []error{fencedlock.ErrLockLost, fencedlock.ErrNotFound, fencedlock.ErrInvalidToken, fencedlock.ErrCorrupt, fencedlock.ErrInvalidArgument} {
		assert.NotErrorIs(t, orig, sentinel)
		assert.False(t, errors.As(sentinel, &se))
	}
	// A formatted copy of the message is not the error.
	assert.NotErrorIs(t, errors.New(orig.Error()), fencedlock.ErrStaleToken)
}
