package fencehttp_test

import (
	"errors"
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

func TestHeaderName(t *testing.T) {
	assert.Equal(t, "Fencing-Token", fencehttp.Header)
	assert.Equal(t, fencehttp.Header, http.CanonicalHeaderKey(fencehttp.Header), "the name is in canonical form")
}

func TestSetToken(t *testing.T) {
	tests := []struct {
		name   string
		before http.Header
		token  fencedlock.Token
		want   []string // the header's values afterwards
	}{
		{"sets", http.Header{}, 42, []string{"42"}},
		{"one", http.Header{}, 1, []string{"1"}},
		{"2^53+1", http.Header{}, 1<<53 + 1, []string{"9007199254740993"}},
		{"2^64-1", http.Header{}, math.MaxUint64, []string{"18446744073709551615"}},
		{"replaces one", http.Header{"Fencing-Token": {"1"}}, 7, []string{"7"}},
		{"replaces several", http.Header{"Fencing-Token": {"1", "2"}}, 7, []string{"7"}},
		{"zero removes", http.Header{"Fencing-Token": {"1"}}, 0, nil},
		{"zero removes several", http.Header{"Fencing-Token": {"1", "2"}}, 0, nil},
		{"zero without a header", http.Header{}, 0, nil},
		{"nil header", nil, 5, []string{"5"}},
		{"nil header, zero", nil, 0, nil},
	}
	for _, tt := range tests {
		tt := tt
		t.Run(tt.name, func(t *testing.T) {
			r := &http.Request{Header: tt.before}
			if r.Header != nil {
				r.Header.Set("Other", "kept")
			}
			fencehttp.SetToken(r, tt.token)
			assert.Equal(t, tt.want, r.Header.Values(fencehttp.Header))
			if tt.before != nil {
				assert.Equal(t, "kept", r.Header.Get("Other"), "other headers are left alone")
			}
		})
	}
}

func TestSetTokenNil(t *testing.T) {
	assert.NotPanics(t, func() { fencehttp.SetToken(nil, 5) })
	assert.NotPanics(t, func() { fencehttp.SetToken(nil, 0) })
	assert.NotPanics(t, func() { fencehttp.SetTokenHeader(nil, 5) })
	assert.NotPanics(t, func() { fencehttp.SetTokenHeader(nil, 0) })
}

func TestSetTokenHeader(t *testing.T) {
	h := http.Header{}
	fencehttp.SetTokenHeader(h, 12)
	assert.Equal(t, []string{"12"}, h.Values(fencehttp.Header))
	fencehttp.SetTokenHeader(h, 0)
	assert.Empty(t, h.Values(fencehttp.Header))
}

func TestTokenFrom(t *testing.T) {
	tests := []struct {
		name    string
		values  []string // the header's values; nil: no header
		want    fencedlock.Token
		errPart string // "" for success
	}{
		{"one", []string{"1"}, 1, ""},
		{"42", []string{"42"}, 42, ""},
		{"leading zeros", []string{"007"}, 7, ""},
		{"2^53+1", []string{"9007199254740993"}, 1<<53 + 1, ""},
		{"2^64-1", []string{"18446744073709551615"}, math.MaxUint64, ""},
		{"spaces and tabs around", []string{" \t42 \t"}, 42, ""},

		{"missing", nil, 0, "missing"},
		{"several", []string{"1", "2"}, 0, "2 values, want one"},
		{"several equal", []string{"5", "5"}, 0, "2 values, want one"},
		{"empty", []string{""}, 0, "empty"},
		{"blank", []string{"  "}, 0, "empty"},
		{"zero", []string{"0"}, 0, "zero"},
		{"zeros", []string{"000"}, 0, "zero"},
		{"negative", []string{"-1"}, 0, "not a decimal number"},
		{"plus sign", []string{"+1"}, 0, "not a decimal number"},
		{"hex", []string{"0x10"}, 0, "not a decimal number"},
		{"exponent", []string{"1e3"}, 0, "not a decimal number"},
		{"fraction", []string{"1.0"}, 0, "not a decimal number"},
		{"list in one value", []string{"1, 2"}, 0, "not a decimal number"},
		{"inner space", []string{"4 2"}, 0, "not a decimal number"},
		{"newline", []string{"42\n"}, 0, "not a decimal number"},
		{"fullwidth digits", []string{"４２"}, 0, "not a decimal number"},
		{"quoted", []string{`"42"`}, 0, "not a decimal number"},
		{"2^64", []string{"18446744073709551616"}, 0, "overflows"},
		{"65 characters", []string{strings.Repeat("1", 65)}, 0, "65 characters"},
	}
	for _, tt := range tests {
		tt := tt
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPut, "/", nil)
			if tt.values != nil {
				r.Header[fencehttp.Header] = tt.values
			}
			got, err := fencehttp.TokenFrom(r)
			if tt.errPart == "" {
				require.NoError(t, err)
				assert.Equal(t, tt.want, got)
				return
			}
			require.Error(t, err)
			assert.Zero(t, got)
			assert.True(t, errors.Is(err, fencedlock.ErrInvalidToken), "errors.Is(%v, ErrInvalidToken)", err)
			assert.Contains(t, err.Error(), fencehttp.Header, "the error names the header")
			assert.Contains(t, err.Error(), tt.errPart)

			// TokenFromHeader is the same rule on a header.
			got2, err2 := fencehttp.TokenFromHeader(r.Header)
			assert.Zero(t, got2)
			assert.Equal(t, err.Error(), err2.Error())
		})
	}
}

func TestTokenFromNil(t *testing.T) {
	_, err := fencehttp.TokenFrom(nil)
	assert.True(t, errors.Is(err, fencedlock.ErrInvalidArgument), "nil request: %v", err)

	_, err = fencehttp.TokenFrom(&http.Request{}) // nil Header
	assert.True(t, errors.Is(err, fencedlock.ErrInvalidToken), "nil header: %v", err)
	assert.Contains(t, err.Error(), "missing")

	_, err = fencehttp.TokenFromHeader(nil)
	assert.True(t, errors.Is(err, fencedlock.ErrInvalidToken), "nil header: %v", err)
}

// SetToken and TokenFrom agree on every token, in both directions.
func TestSetTokenTokenFrom(t *testing.T) {
	for _, token := range []fencedlock.Token{1, 9, 10, 1<<53 - 1, 1 << 53, 1<<53 + 1, 1<<63 - 1, 1 << 63, math.MaxUint64 - 1, math.MaxUint64} {
		r := httptest.NewRequest(http.MethodPut, "/", nil)
		fencehttp.SetToken(r, token)
		got, err := fencehttp.TokenFrom(r)
		require.NoError(t, err, "token %v", token)
		assert.Equal(t, token, got)
	}
}
