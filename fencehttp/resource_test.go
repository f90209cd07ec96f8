package fencehttp_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/fencehttp"
)

func TestCheckResource(t *testing.T) {
	assert.NoError(t, fencehttp.CheckResource("order-queue"))
	assert.NoError(t, fencehttp.CheckResource(strings.Repeat("n", fencedlock.MaxResourceLen)), "a name of MaxResourceLen")
	for _, name := range []string{"", strings.Repeat("n", fencedlock.MaxResourceLen+1), strings.Repeat("n", 1<<20)} {
		err := fencehttp.CheckResource(name)
		require.Error(t, err, "%d-byte name", len(name))
		assert.True(t, errors.Is(err, fencedlock.ErrInvalidArgument), "%d-byte name: %v", len(name), err)
		for _, s := range []error{fencedlock.ErrInvalidToken, fencedlock.ErrNotFound, fencedlock.ErrStaleToken, fencedlock.ErrUnavailable} {
			assert.False(t, errors.Is(err, s), "%d-byte name: errors.Is(%v, %v)", len(name), err, s)
		}
		assert.Less(t, len(err.Error()), 300, "%d-byte name: a short message", len(name))
	}
}

// A handler that checks the name with CheckResource answers a name
// longer than MaxResourceLen with 400 and a short detail; a name of
// MaxResourceLen goes through.
func TestRoundTripLongResource(t *testing.T) {
	store := fencedlock.NewMemoryStore()
	checked := &service{store: store}
	base, client := startService(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := fencehttp.CheckResource(r.URL.Query().Get("resource")); err != nil {
			fencehttp.WriteError(w, err)
			return
		}
		checked.ServeHTTP(w, r)
	}))

	longest := strings.Repeat("n", fencedlock.MaxResourceLen)
	_, err := put(t, client, base, longest, 5, "v")
	require.NoError(t, err, "PUT of a %d-byte name", len(longest))
	value, _, err := get(t, client, base, longest)
	require.NoError(t, err, "GET of a %d-byte name", len(longest))
	assert.Equal(t, "v", value)

	// A client that did not check sends a longer name (not 1 MiB: the
	// server refuses a request line that long with 431 before any
	// handler runs).
	tooLong := strings.Repeat("n", 4*fencedlock.MaxResourceLen)
	_, err = put(t, client, base, tooLong, 5, "v")
	var statusErr *fencehttp.StatusError
	require.True(t, errors.As(err, &statusErr), "want a *StatusError, got %T %v", err, err)
	assert.Equal(t, http.StatusBadRequest, statusErr.StatusCode)
	assert.Contains(t, statusErr.Detail, "longer than 1024 bytes")
	assert.Less(t, len(statusErr.Detail), 300)
	assert.Less(t, len(err.Error()), 400)
	for _, s := range sentinels {
		assert.False(t, errors.Is(err, s), "errors.Is(%v, %v): a 400 about:blank problem matches no sentinel", err, s)
	}

	// The client that checks refuses before it sends.
	huge := strings.Repeat("n", 1<<20)
	err = fencehttp.CheckResource(huge)
	assert.True(t, errors.Is(err, fencedlock.ErrInvalidArgument))
	assert.Less(t, len(err.Error()), 300)
}
