package fencehttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/fencehttp"
)

// service is a fenced resource behind HTTP, as a real service would keep
// it: PUT /?resource=R stores the body with the request's token, GET
// /?resource=R returns the value with its token in the Fencing-Token
// header. It records the last error its store returned.
type service struct {
	store fencedlock.Store
	fail  error // when set, every request fails with it

	mu      sync.Mutex
	lastErr error // guarded by mu
}

func (s *service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	err := s.serve(w, r)
	s.mu.Lock()
	s.lastErr = err
	s.mu.Unlock()
	fencehttp.WriteError(w, err)
}

func (s *service) serve(w http.ResponseWriter, r *http.Request) error {
	if s.fail != nil {
		return s.fail
	}
	resource := r.URL.Query().Get("resource")
	switch r.Method {
	case http.MethodGet:
		value, token, err := s.store.Get(r.Context(), resource)
		if err != nil {
			return err
		}
		fencehttp.SetTokenHeader(w.Header(), token)
		_, _ = w.Write(value)
		return nil
	case http.MethodPut:
		token, err := fencehttp.TokenFrom(r)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			// The client's input: answered here, not by WriteError.
			http.Error(w, "unreadable or too large body", http.StatusBadRequest)
			return nil
		}
		if err := s.store.Put(r.Context(), resource, token, body); err != nil {
			return err
		}
		w.Header().Set("Echo-Token", token.String()) // what the server read
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	return errors.New("method not allowed")
}

func (s *service) last() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr
}

// startService starts s on an httptest.Server, closed when t ends.
func startService(t *testing.T, s http.Handler) (base string, client *http.Client) {
	t.Helper()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return srv.URL, srv.Client()
}

// put sends value with token (the zero token: no header), and returns
// CheckResponse's error and the response's headers.
func put(t *testing.T, client *http.Client, base, resource string, token fencedlock.Token, value string) (http.Header, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPut, base+"/?resource="+url.QueryEscape(resource), strings.NewReader(value))
	require.NoError(t, err)
	fencehttp.SetToken(req, token)
	return do(t, client, req)
}

func get(t *testing.T, client *http.Client, base, resource string) (string, http.Header, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, base+"/?resource="+url.QueryEscape(resource), nil)
	require.NoError(t, err)
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	if err := fencehttp.CheckResponse(resp); err != nil {
		return "", resp.Header, err
	}
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b), resp.Header, nil
}

func do(t *testing.T, client *http.Client, req *http.Request) (http.Header, error) {
	t.Helper()
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	return resp.Header, fencehttp.CheckResponse(resp)
}

// The store's *StaleTokenError on the server arrives as an equal
// *StaleTokenError on the client, for tokens up to 2^64-1.
func TestRoundTripStale(t *testing.T) {
	tests := []struct {
		name           string
		resource       string
		current, older fencedlock.Token
	}{
		{"small", "order-queue", 2, 1},
		{"clock-seeded", "order-queue", 1732900000000001, 1732900000000000},
		{"around 2^53", "r", 1<<53 + 1, 1 << 53},
		{"2^63", "r", 1 << 63, 1<<63 - 1},
		{"2^64-1", "r", math.MaxUint64, math.MaxUint64 - 1},
		{"far apart", "r", math.MaxUint64, 1},
		{"resource with quotes and braces", `a "b" {c}:d\e`, 10, 9},
		{"non-ASCII resource", "Bestellwarteschlange-ä-注文", 10, 9},
		{"resource with control characters", "a\tb\x01c", 10, 9},
	}
	s := &service{store: fencedlock.NewMemoryStore()}
	base, client := startService(t, s)
	for _, tt := range tests {
		tt := tt
		t.Run(tt.name, func(t *testing.T) {
			_, err := put(t, client, base, tt.resource, tt.current, "newer")
			require.NoError(t, err)

			_, err = put(t, client, base, tt.resource, tt.older, "older")
			require.Error(t, err)
			assert.True(t, errors.Is(err, fencedlock.ErrStaleToken), "errors.Is(%v, ErrStaleToken)", err)
			var got *fencedlock.StaleTokenError
			require.True(t, errors.As(err, &got), "want a *StaleTokenError, got %T %v", err, err)

			var onServer *fencedlock.StaleTokenError
			require.True(t, errors.As(s.last(), &onServer), "the store's error: %v", s.last())
			assert.Equal(t, *onServer, *got, "equal fields on both sides")
			assert.Equal(t, fencedlock.StaleTokenError{Resource: tt.resource, Token: tt.older, Current: tt.current}, *got)
			assert.Equal(t, onServer.Error(), got.Error())

			value, h, err := get(t, client, base, tt.resource)
			require.NoError(t, err)
			assert.Equal(t, "newer", value, "the stale write changed nothing")
			token, err := fencehttp.TokenFromHeader(h)
			require.NoError(t, err)
			assert.Equal(t, tt.current, token)
		})
	}
}

// Tokens travel exactly in both directions: request (SetToken, TokenFrom)
// and response (SetTokenHeader, TokenFromHeader).
func TestRoundTripTokens(t *testing.T) {
	s := &service{store: fencedlock.NewMemoryStore()}
	base, client := startService(t, s)
	for _, token := range []fencedlock.Token{1, 9, 10, 1<<53 - 1, 1 << 53, 1<<53 + 1, 1<<63 - 1, 1 << 63, math.MaxUint64 - 1, math.MaxUint64} {
		h, err := put(t, client, base, "r", token, "v")
		require.NoError(t, err, "token %v", token)
		assert.Equal(t, token.String(), h.Get("Echo-Token"), "the server read the token exactly")

		_, h, err = get(t, client, base, "r")
		require.NoError(t, err)
		got, err := fencehttp.TokenFromHeader(h)
		require.NoError(t, err)
		assert.Equal(t, token, got, "the client read the token exactly")
	}
}

// Errors other than a stale token arrive as errors matching the same
// sentinel, or, for internal errors, matching none and without their text.
func TestRoundTripErrors(t *testing.T) {
	s := &service{store: fencedlock.NewMemoryStore()}
	base, client := startService(t, s)
	newReq := func(header http.Header) *http.Request {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPut, base+"/?resource=r", strings.NewReader("v"))
		require.NoError(t, err)
		for k, v := range header {
			req.Header[k] = v // as given: the client sends keys as they are
		}
		return req
	}

	tests := []struct {
		name    string
		req     *http.Request
		status  int
		want    error
		errPart string
	}{
		{"no header", newReq(nil), 400, fencedlock.ErrInvalidToken, "Fencing-Token header: fencedlock: invalid token: missing"},
		{"empty header", newReq(http.Header{"Fencing-Token": {""}}), 400, fencedlock.ErrInvalidToken, "empty string"},
		{"garbage header", newReq(http.Header{"Fencing-Token": {"abc"}}), 400, fencedlock.ErrInvalidToken, `\"abc\" is not a decimal number`},
		{"zero header", newReq(http.Header{"Fencing-Token": {"0"}}), 400, fencedlock.ErrInvalidToken, "zero is not a token"},
		{"two headers", newReq(http.Header{"Fencing-Token": {"1", "2"}}), 400, fencedlock.ErrInvalidToken, "2 values"},
		{"2^64", newReq(http.Header{"Fencing-Token": {"18446744073709551616"}}), 400, fencedlock.ErrInvalidToken, "overflows"},
		// The handler passed the store an empty name: its bug, a 500
		// without the store's text.
		{"empty resource", func() *http.Request {
			req := newReq(http.Header{"Fencing-Token": {"5"}})
			req.URL.RawQuery = "resource="
			return req
		}(), 500, nil, "500 Internal Server Error"},
	}
	for _, tt := range tests {
		tt := tt
		t.Run(tt.name, func(t *testing.T) {
			_, err := do(t, client, tt.req)
			var statusErr *fencehttp.StatusError
			require.True(t, errors.As(err, &statusErr), "want a *StatusError, got %T %v", err, err)
			assert.Equal(t, tt.status, statusErr.StatusCode)
			for _, s := range sentinels {
				assert.Equal(t, s == tt.want, errors.Is(err, s), "errors.Is(%v, %v)", err, s)
			}
			assert.Contains(t, err.Error(), tt.errPart)
		})
	}

	// The header name is matched case-insensitively on the wire.
	_, err := do(t, client, newReq(http.Header{"fencing-token": {"5"}}))
	assert.NoError(t, err)

	_, _, err = get(t, client, base, "never-written")
	assert.True(t, errors.Is(err, fencedlock.ErrNotFound), "GET of a missing resource: %v", err)

	for _, internal := range []error{errors.New("redis: 10.0.0.7:6379: s3cr3t"), context.Canceled, fencedlock.ErrLockLost, fmt.Errorf("%w: table name s3cr3t", fencedlock.ErrInvalidArgument)} {
		s := &service{fail: internal}
		base, client := startService(t, s)
		_, err := put(t, client, base, "r", 5, "v")
		var statusErr *fencehttp.StatusError
		require.True(t, errors.As(err, &statusErr), "want a *StatusError, got %T %v", err, err)
		assert.Equal(t, http.StatusInternalServerError, statusErr.StatusCode)
		for _, s := range sentinels {
			assert.False(t, errors.Is(err, s), "errors.Is(%v, %v)", err, s)
		}
		assert.NotContains(t, string(statusErr.Body), internal.Error(), "the internal error stays on the server")
		assert.NotContains(t, err.Error(), internal.Error())
		assert.Equal(t, "about:blank", statusErr.Type)
	}
}

// A 409 that is not the service's own, from a handler that knows nothing
// of fencing, is no *StaleTokenError even over the wire.
func TestRoundTripForeign409(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"token":"41","current":"42"}`, http.StatusConflict)
	}))
	defer srv.Close()
	_, err := put(t, srv.Client(), srv.URL, "r", 41, "v")
	var statusErr *fencehttp.StatusError
	require.True(t, errors.As(err, &statusErr), "want a *StatusError, got %T %v", err, err)
	assert.Equal(t, http.StatusConflict, statusErr.StatusCode)
	assert.False(t, errors.Is(err, fencedlock.ErrStaleToken))
}

// CheckResponse leaves a 2xx body for the caller to read, whole.
func TestRoundTrip2xxBodyUnread(t *testing.T) {
	big := strings.Repeat("0123456789", 20000) // larger than MaxErrorBody
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", fencehttp.ProblemContentType)
		_, _ = io.WriteString(w, big)
	}))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.NoError(t, fencehttp.CheckResponse(resp))
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, big, string(b))
}

// Every row of the mapping: what WriteError writes for an error,
// CheckResponse maps back to an error matching the same sentinel, or none
// for a 500.
func TestWriteErrorCheckResponse(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		status int
		want   error // nil: no sentinel
	}{
		{"stale", &fencedlock.StaleTokenError{Resource: "r", Token: 1, Current: 2}, 409, fencedlock.ErrStaleToken},
		{"stale without tokens", fmt.Errorf("legacy: %w", fencedlock.ErrStaleToken), 409, fencedlock.ErrStaleToken},
		{"invalid token", fmt.Errorf("%w: zero", fencedlock.ErrInvalidToken), 400, fencedlock.ErrInvalidToken},
		{"not found", fmt.Errorf("%w: r", fencedlock.ErrNotFound), 404, fencedlock.ErrNotFound},
		{"invalid argument", fmt.Errorf("%w: empty resource name", fencedlock.ErrInvalidArgument), 500, nil},
		{"stale, typed nil", fmt.Errorf("put: %w", (*fencedlock.StaleTokenError)(nil)), 500, nil},
		{"internal", errors.New("boom"), 500, nil},
		{"context canceled", context.Canceled, 500, nil},
		{"lock lost", fencedlock.ErrLockLost, 500, nil},
	}
	for _, tt := range tests {
		tt := tt
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			fencehttp.WriteError(rec, tt.err)
			resp := rec.Result()
			defer resp.Body.Close()
			assert.Equal(t, tt.status, resp.StatusCode)
			err := fencehttp.CheckResponse(resp)
			require.Error(t, err)
			for _, s := range sentinels {
				assert.Equal(t, s == tt.want, errors.Is(err, s), "errors.Is(%v, %v)", err, s)
			}
			var stale *fencedlock.StaleTokenError
			if errors.As(tt.err, &stale) && stale != nil {
				var got *fencedlock.StaleTokenError
				require.True(t, errors.As(err, &got), "%T %v", err, err)
				assert.Equal(t, *stale, *got)
			} else {
				var statusErr *fencehttp.StatusError
				require.True(t, errors.As(err, &statusErr), "%T %v", err, err)
				assert.Equal(t, tt.status, statusErr.StatusCode)
			}
		})
	}
}

// CheckResponse checks the problem's token against the token the request
// sent, over the wire: a server that reports another token than the one
// it got is not trusted with a *StaleTokenError.
func TestRoundTripStaleOtherToken(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A confused server: it reports token 7, whatever it got.
		fencehttp.WriteError(w, &fencedlock.StaleTokenError{Resource: "r", Token: 7, Current: 1 << 62})
	}))
	defer srv.Close()

	_, err := put(t, srv.Client(), srv.URL, "r", 7, "v")
	var stale *fencedlock.StaleTokenError
	require.True(t, errors.As(err, &stale), "the token sent: %T %v", err, err)
	assert.Equal(t, fencedlock.StaleTokenError{Resource: "r", Token: 7, Current: 1 << 62}, *stale)

	_, err = put(t, srv.Client(), srv.URL, "r", 8, "v")
	assert.False(t, errors.As(err, &stale), "another token: %T %v", err, err)
	assert.True(t, errors.Is(err, fencedlock.ErrStaleToken))
	var statusErr *fencehttp.StatusError
	require.True(t, errors.As(err, &statusErr), "%T %v", err, err)
	assert.Equal(t, http.StatusConflict, statusErr.StatusCode)
	assert.Contains(t, err.Error(), "the problem's token 7 is not the token 8 the request sent")
}

// After CheckResponse the caller decodes its own error body, whole, and
// the connection is closed or reused as usual.
func TestRoundTripErrorBodyReadable(t *testing.T) {
	type apiError struct {
		Code    string   `json:"code"`
		Missing []string `json:"missing"`
	}
	want := apiError{Code: "order-incomplete", Missing: []string{"customer", "items"}}
	var padding []string
	for i := 0; i < 10000; i++ { // a body larger than MaxErrorBody
		padding = append(padding, fmt.Sprint("field-", i))
	}
	big := apiError{Code: "order-incomplete", Missing: padding}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnprocessableEntity)
		if r.URL.Query().Get("big") != "" {
			_ = json.NewEncoder(w).Encode(big)
			return
		}
		_ = json.NewEncoder(w).Encode(want)
	}))
	defer srv.Close()

	for _, tt := range []struct {
		query string
		want  apiError
	}{{"", want}, {"?big=1", big}} {
		resp, err := srv.Client().Get(srv.URL + tt.query)
		require.NoError(t, err)
		err = fencehttp.CheckResponse(resp)
		var statusErr *fencehttp.StatusError
		require.True(t, errors.As(err, &statusErr), "%T %v", err, err)
		assert.Equal(t, http.StatusUnprocessableEntity, statusErr.StatusCode)
		var got apiError
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&got), "query %q", tt.query)
		assert.Equal(t, tt.want, got)
		require.NoError(t, resp.Body.Close())
	}
}
