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
	secret := errors.New("dial tcp 10.0.0.7:6379: password s3cr3t refused")

	tests := []struct {
		name     string
		err      error
		status   int
		typ      string
		detail   bool   // whether the problem has err.Error() as detail
		members  string // the extension members, as JSON, "" for none
		noDetail string // text that must not appear in the body
	}{
		{"stale", stale, 409, fencehttp.StaleTokenType, true, `"resource":"order-queue","token":"41","current":"42"`, ""},
		{"stale, wrapped", fmt.Errorf("put order 17: %w", stale), 409, fencehttp.StaleTokenType, true, `"resource":"order-queue","token":"41","current":"42"`, ""},
		{"stale, 2^64-1", &fencedlock.StaleTokenError{Resource: "r", Token: math.MaxUint64 - 1, Current: math.MaxUint64}, 409, fencehttp.StaleTokenType, true,
			`"resource":"r","token":"18446744073709551614","current":"18446744073709551615"`, ""},
		{"stale, empty resource", &fencedlock.StaleTokenError{Token: 1, Current: 2}, 409, fencehttp.StaleTokenType, true, `"token":"1","current":"2"`, ""},
		{"stale, from CheckToken", fencedlock.CheckToken("q", 5, 9), 409, fencehttp.StaleTokenType, true, `"resource":"q","token":"5","current":"9"`, ""},
		{"stale sentinel without tokens", fmt.Errorf("legacy store: %w", fencedlock.ErrStaleToken), 409, fencehttp.StaleTokenType, true, "", ""},
		{"stale, typed nil", nilStale, 409, fencehttp.StaleTokenType, false, "", ""},
		{"stale before not found", errors.Join(fencedlock.ErrNotFound, stale), 409, fencehttp.StaleTokenType, true, `"resource":"order-queue","token":"41","current":"42"`, ""},

		{"invalid token from TokenFrom", headerErr, 400, fencehttp.InvalidTokenType, true, "", ""},
		{"invalid token from ParseToken", parseErr, 400, fencehttp.InvalidTokenType, true, "", ""},
		{"invalid token from CheckToken", fencedlock.CheckToken("q", 0, 9), 400, fencehttp.InvalidTokenType, true, "", ""},
		{"invalid token before not found", errors.Join(fencedlock.ErrNotFound, fencedlock.ErrInvalidToken), 400, fencehttp.InvalidTokenType, true, "", ""},

		{"not found", fmt.Errorf("%w: %q", fencedlock.ErrNotFound, "order-queue"), 404, fencehttp.NotFoundType, true, "", ""},
		{"not found before invalid argument", errors.Join(fencedlock.ErrInvalidArgument, fencedlock.ErrNotFound), 404, fencehttp.NotFoundType, true, "", ""},

		{"invalid argument", fmt.Errorf("%w: empty resource name", fencedlock.ErrInvalidArgument), 400, fencehttp.InvalidArgumentType, true, "", ""},

		{"internal", secret, 500, "about:blank", false, "", "s3cr3t"},
		{"internal, address", fmt.Errorf("reading: %w", secret), 500, "about:blank", false, "", "10.0.0.7"},
		{"context canceled", context.Canceled, 500, "about:blank", false, "", "canceled"},
		{"deadline exceeded", fmt.Errorf("put: %w", context.DeadlineExceeded), 500, "about:blank", false, "", "deadline"},
		{"lock lost", fencedlock.ErrLockLost, 500, "about:blank", false, "", "lock lost"},
		{"not acquired", fencedlock.ErrNotAcquired, 500, "about:blank", false, "", "not acquired"},
		{"corrupt", fmt.Errorf("%w: key k", fencedlock.ErrCorrupt), 500, "about:blank", false, "", "corrupt"},
	}
	for _, tt := range tests {
		tt := tt
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			rec.Header().Set("Content-Length", "12345") // set by the handler before it failed
			fencehttp.WriteError(rec, tt.err)

			assert.Equal(t, tt.status, rec.Code)
			assert.Equal(t, fencehttp.ProblemContentType, rec.Header().Get("Content-Type"))
			assert.Equal(t, "nosniff", rec.Header().Get("X-Content-Type-Options"))
			assert.Empty(t, rec.Header().Get("Content-Length"), "a stale Content-Length is removed")

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
			switch {
			case tt.detail:
				assert.Equal(t, tt.err.Error(), p.Detail)
			case tt.status == 500:
				_, has := members["detail"]
				assert.False(t, has, "a 500 problem has no detail: %s", rec.Body)
			}
			if tt.noDetail != "" {
				assert.NotContains(t, rec.Body.String(), tt.noDetail, "internal error text leaked")
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
