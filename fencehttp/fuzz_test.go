package fencehttp_test

import (
	"bytes"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/fencehttp"
)

// CheckResponse never panics, and returns a *StaleTokenError only for a
// 409 problem+json response whose tokens are valid and in order.
// go test -fuzz FuzzCheckResponse ./fencehttp/ explores further.
func FuzzCheckResponse(f *testing.F) {
	f.Add(409, fencehttp.ProblemContentType, []byte(validStale))
	f.Add(409, "application/problem+json; charset=utf-8", []byte(staleBody(`"0"`, `"1"`)))
	f.Add(409, fencehttp.ProblemContentType, []byte(staleBody(`"18446744073709551614"`, `"18446744073709551615"`)))
	f.Add(409, fencehttp.ProblemContentType, []byte(validStale[:30]))
	f.Add(400, fencehttp.ProblemContentType, []byte(problemBody(fencehttp.InvalidTokenType, 400)))
	f.Add(404, "text/plain", []byte("404 page not found"))
	f.Add(200, "", []byte(nil))
	f.Fuzz(func(t *testing.T, status int, contentType string, body []byte) {
		resp := &http.Response{
			StatusCode: status,
			Header:     http.Header{"Content-Type": {contentType}},
			Body:       io.NopCloser(bytes.NewReader(body)),
		}
		err := fencehttp.CheckResponse(resp)
		if status >= 200 && status <= 299 {
			if err != nil {
				t.Fatalf("status %d: %v", status, err)
			}
			return
		}
		if err == nil {
			t.Fatalf("status %d: no error", status)
		}
		_ = err.Error()
		var stale *fencedlock.StaleTokenError
		if errors.As(err, &stale) {
			mediaType, _, mErr := mime.ParseMediaType(contentType)
			if status != 409 || mErr != nil || mediaType != fencehttp.ProblemContentType {
				t.Fatalf("a *StaleTokenError from status %d, Content-Type %q", status, contentType)
			}
			if stale.Token == 0 || stale.Token >= stale.Current {
				t.Fatalf("a *StaleTokenError with tokens %v, %v", stale.Token, stale.Current)
			}
			if !bytes.Contains(body, []byte(fencehttp.StaleTokenType)) {
				t.Fatalf("a *StaleTokenError from a body without the type: %q", body)
			}
			return
		}
		var statusErr *fencehttp.StatusError
		if !errors.As(err, &statusErr) || statusErr.StatusCode != status {
			t.Fatalf("want a *StatusError with status %d, got %T %v", status, err, err)
		}
	})
}

// TokenFrom accepts exactly the decimal numbers from 1 to 2^64-1, and
// SetToken writes back their canonical form.
func FuzzTokenFrom(f *testing.F) {
	for _, s := range []string{"1", "007", "0", "", "-1", "18446744073709551615", "18446744073709551616", " 5\t", "1e3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, value string) {
		r := httptest.NewRequest(http.MethodPut, "/", nil)
		r.Header[fencehttp.Header] = []string{value}
		token, err := fencehttp.TokenFrom(r)
		if err != nil {
			if !errors.Is(err, fencedlock.ErrInvalidToken) || !strings.Contains(err.Error(), fencehttp.Header) {
				t.Fatalf("%q: %v", value, err)
			}
			return
		}
		want, pErr := fencedlock.ParseToken(strings.Trim(value, " \t"))
		if pErr != nil || token != want || token == 0 {
			t.Fatalf("%q: got %v, ParseToken gives %v, %v", value, token, want, pErr)
		}
		fencehttp.SetToken(r, token)
		if again, err := fencehttp.TokenFrom(r); err != nil || again != token {
			t.Fatalf("%q: SetToken then TokenFrom: %v, %v", value, again, err)
		}
	})
}

// Every *StaleTokenError that WriteError writes comes back equal from
// CheckResponse (resources that are valid UTF-8: JSON strings are).
func FuzzStaleRoundTrip(f *testing.F) {
	f.Add("order-queue", uint64(41), uint64(42))
	f.Add("", uint64(1), uint64(18446744073709551615))
	f.Add("\"{x}\"\n\u2028<>&", uint64(9007199254740992), uint64(9007199254740993))
	f.Fuzz(func(t *testing.T, resource string, token, current uint64) {
		if token == 0 || token >= current || !utf8.ValidString(resource) || len(resource) > 4<<10 {
			t.Skip()
		}
		sent := &fencedlock.StaleTokenError{Resource: resource, Token: fencedlock.Token(token), Current: fencedlock.Token(current)}
		rec := httptest.NewRecorder()
		fencehttp.WriteError(rec, sent)
		resp := rec.Result()
		defer resp.Body.Close()
		var got *fencedlock.StaleTokenError
		if err := fencehttp.CheckResponse(resp); !errors.As(err, &got) || *got != *sent {
			t.Fatalf("sent %#v, got %T %v", sent, err, err)
		}
	})
}
