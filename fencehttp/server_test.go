package fencehttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/fencehttp"
)

func TestWriteError(t *testing.T) {
	stale := &fencedlock.StaleTokenError{Resource: "order-queue", Token: 41, Current: 42}
	var nilStale *fencedlock.StaleTokenError
	_, headerErr := fencehttp.TokenFrom(httptest.NewRequest(http.MethodPut, "/", nil))
	_, parseErr := fencedlock.ParseToken("abc")
	checkStale := fencedlock.CheckToken("q", 5, 9)
	checkZero := fencedlock.CheckToken("q", 0, 9)
	secret := errors.New("dial tcp 10.0.0.7:6379: password s3cr3t refused")
	notFound := fmt.Errorf("%w: %q", fencedlock.ErrNotFound, "order-queue")
	invalidArg := fmt.Errorf("%w: empty resource name", fencedlock.ErrInvalidArgument)
	down := fmt.Errorf("sqlstore: put \"q\": %w: dial tcp 10.0.0.7:5432: connect: connection refused", fencedlock.ErrUnavailable)
	longName := fencehttp.CheckResource(strings.Repeat("n", 1<<20))

	tests := []struct {
		name     string
		err      error
		status   int
		typ      string
		detail   string // the problem's detail; "": no detail member
		members  string // the extension members, as JSON, "" for none
		noDetail string // text that must not appear in the body
	}{
		{"stale", stale, 409, fencehttp.StaleTokenType, stale.Error(), `"resource":"order-queue","token":"41","current":"42"`, ""},
		{"stale, wrapped", fmt.Errorf("put order 17 for db 10.0.0.7: %w", stale), 409, fencehttp.StaleTokenType, stale.Error(), `"resource":"order-queue","token":"41","current":"42"`, "10.0.0.7"},
		{"stale, 2^64-1", &fencedlock.StaleTokenError{Resource: "r", Token: math.MaxUint64 - 1, Current: math.MaxUint64}, 409, fencehttp.StaleTokenType,
			`fencedlock: stale fencing token 18446744073709551614 for resource "r": store holds 18446744073709551615`,
			`"resource":"r","token":"18446744073709551614","current":"18446744073709551615"`, ""},
		{"stale, empty resource", &fencedlock.StaleTokenError{Token: 1, Current: 2}, 409, fencehttp.StaleTokenType, `fencedlock: stale fencing token 1 for resource "": store holds 2`, `"token":"1","current":"2"`, ""},
		{"stale, from CheckToken", checkStale, 409, fencehttp.StaleTokenType, checkStale.Error(), `"resource":"q","token":"5","current":"9"`, ""},
		{"stale sentinel without tokens", fmt.Errorf("legacy store s3cr3t: %w", fencedlock.ErrStaleToken), 409, fencehttp.StaleTokenType, fencedlock.ErrStaleToken.Error(), "", "s3cr3t"},
		{"stale before not found", errors.Join(notFound, stale), 409, fencehttp.StaleTokenType, stale.Error(), `"resource":"order-queue","token":"41","current":"42"`, "not found"},

		// A nil *StaleTokenError is a bug of the handler: 500.
		{"stale, typed nil", nilStale, 500, "about:blank", "", "", "stale"},
		{"stale, typed nil wrapped", fmt.Errorf("put: %w", nilStale), 500, "about:blank", "", "", "stale"},
		{"stale, typed nil after a real one", errors.Join(stale, nilStale), 500, "about:blank", "", "", "stale"},
		{"stale, typed nil with not found", errors.Join(notFound, fmt.Errorf("x: %w", nilStale)), 500, "about:blank", "", "", "found"},

		{"invalid token from TokenFrom", headerErr, 400, fencehttp.InvalidTokenType, headerErr.Error(), "", ""},
		{"invalid token from ParseToken", parseErr, 400, fencehttp.InvalidTokenType, parseErr.Error(), "", ""},
		{"invalid token from CheckToken", checkZero, 400, fencehttp.InvalidTokenType, checkZero.Error(), "", ""},
		{"invalid token before not found", errors.Join(fencedlock.ErrNotFound, fencedlock.ErrInvalidToken), 400, fencehttp.InvalidTokenType, errors.Join(fencedlock.ErrNotFound, fencedlock.ErrInvalidToken).Error(), "", ""},
		{"invalid token before invalid argument", errors.Join(fencedlock.ErrInvalidArgument, headerErr), 400, fencehttp.InvalidTokenType, errors.Join(fencedlock.ErrInvalidArgument, headerErr).Error(), "", ""},

		{"not found", notFound, 404, fencehttp.NotFoundType, notFound.Error(), "", ""},
		{"not found before invalid argument", errors.Join(fencedlock.ErrInvalidArgument, notFound), 404, fencehttp.NotFoundType, errors.Join(fencedlock.ErrInvalidArgument, notFound).Error(), "", ""},

		// ErrInvalidArgument is the server's own misuse of an API: 500.
		{"invalid argument", invalidArg, 500, "about:blank", "", "", "empty resource name"},
		{"invalid argument, wrapped", fmt.Errorf("opening the store: %w", fencedlock.ErrInvalidArgument), 500, "about:blank", "", "", "invalid argument"},
		{"invalid argument from TokenFrom(nil)", func() error { _, err := fencehttp.TokenFrom(nil); return err }(), 500, "about:blank", "", "", "nil"},

		// The store's backend is down: 503, without its text.
		{"unavailable", down, 503, "about:blank", "", "", "10.0.0.7"},
		{"unavailable with the deadline", fmt.Errorf("%w: %w", fencedlock.ErrUnavailable, context.DeadlineExceeded), 503, "about:blank", "", "", "deadline"},
		{"stale before unavailable", errors.Join(down, stale), 409, fencehttp.StaleTokenType, stale.Error(), `"resource":"order-queue","token":"41","current":"42"`, "10.0.0.7"},
		{"not found before unavailable", errors.Join(down, notFound), 404, fencehttp.NotFoundType, errors.Join(down, notFound).Error(), "", ""},

		// The client's resource name, refused by CheckResource: 400,
		// with a short detail.
		{"resource name too long", longName, 400, "about:blank", longName.Error(), "", strings.Repeat("n", 200)},
		{"resource name empty", fencehttp.CheckResource(""), 400, "about:blank", fencehttp.CheckResource("").Error(), "", ""},

		{"internal", secret, 500, "about:blank", "", "", "s3cr3t"},
		{"internal, address", fmt.Errorf("reading: %w", secret), 500, "about:blank", "", "", "10.0.0.7"},
		{"context canceled", context.Canceled, 500, "about:blank", "", "", "canceled"},
		{"deadline exceeded", fmt.Errorf("put: %w", context.DeadlineExceeded), 500, "about:blank", "", "", "deadline"},
		{"lock lost", fencedlock.ErrLockLost, 500, "about:blank", "", "", "lock lost"},
		{"not acquired", fencedlock.ErrNotAcquired, 500, "about:blank", "", "", "not acquired"},
		{"corrupt", fmt.Errorf("%w: key k", fencedlock.ErrCorrupt), 500, "about:blank", "", "", "corrupt"},
	}
	for _, tt := range tests {
		tt := tt
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			// Set by the handler before it failed.
			rec.Header().Set("Content-Length", "12345")
			fencehttp.SetTokenHeader(rec.Header(), 77)
			fencehttp.WriteError(rec, tt.err)

			assert.Equal(t, tt.status, rec.Code)
			assert.Equal(t, fencehttp.ProblemContentType, rec.Header().Get("Content-Type"))
			assert.Equal(t, "nosniff", rec.Header().Get("X-Content-Type-Options"))
			assert.Empty(t, rec.Header().Values("Content-Length"), "a stale Content-Length is removed")
			assert.Empty(t, rec.Header().Values(fencehttp.Header), "an error response carries no token")

			var members map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &members), "body %s", rec.Body)
			var p struct {
				Type, Title, Detail string
				Status              int
			}
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
			assert.Equal(t, tt.typ, p.Type)
			assert.NotEmpty(t, p.Title)
			assert.Equal(t, tt.status, p.Status)
			_, hasDetail := members["detail"]
			assert.Equal(t, tt.detail != "", hasDetail, "detail member in %s", rec.Body)
			assert.Equal(t, tt.detail, p.Detail)
			if tt.noDetail != "" {
				assert.NotContains(t, rec.Body.String(), tt.noDetail, "error text leaked")
			}

			// The extension members, with the tokens as JSON strings.
			var ext []string
			for _, name := range []string{"resource", "token", "current"} {
				if raw, ok := members[name]; ok {
					ext = append(ext, fmt.Sprintf("%q:%s", name, raw))
				}
			}
			assert.Equal(t, tt.members, strings.Join(ext, ","))
		})
	}
}

// recordingWriter is a ResponseWriter that counts the calls made on it.
type recordingWriter struct {
	header             http.Header
	headers, writes    int
	status             int
	headerCalls, bytes int
}

func (w *recordingWriter) Header() http.Header {
	w.headerCalls++
	if w.header == nil {
		w.header = http.Header{}
	}
	return w.header
}

func (w *recordingWriter) WriteHeader(status int) { w.headers++; w.status = status }

func (w *recordingWriter) Write(b []byte) (int, error) {
	w.writes++
	w.bytes += len(b)
	return len(b), nil
}

func TestWriteErrorNil(t *testing.T) {
	w := &recordingWriter{}
	fencehttp.WriteError(w, nil)
	assert.Zero(t, w.headerCalls+w.headers+w.writes, "a nil error writes nothing")

	assert.NotPanics(t, func() { fencehttp.WriteError(nil, errors.New("x")) })
	assert.NotPanics(t, func() { fencehttp.WriteError(nil, nil) })
}

func TestWriteErrorWritesOnce(t *testing.T) {
	w := &recordingWriter{}
	fencehttp.WriteError(w, &fencedlock.StaleTokenError{Resource: "r", Token: 1, Current: 2})
	assert.Equal(t, 1, w.headers)
	assert.Equal(t, http.StatusConflict, w.status)
	assert.Equal(t, 1, w.writes)
}

// A ResponseWriter whose Header returns nil gets the status and body.
type nilHeaderWriter struct{ recordingWriter }

func (w *nilHeaderWriter) Header() http.Header { return nil }

func TestWriteErrorNilHeader(t *testing.T) {
	w := &nilHeaderWriter{}
	assert.NotPanics(t, func() { fencehttp.WriteError(w, fencedlock.ErrNotFound) })
	assert.Equal(t, http.StatusNotFound, w.status)
	assert.Positive(t, w.bytes)
}
