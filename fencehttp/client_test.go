package fencehttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/fencehttp"
)

// trackedBody is a response body that counts the bytes read from it and
// records whether it was closed.
type trackedBody struct {
	r      io.Reader
	read   int
	closed bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.read += n
	return n, err
}

func (b *trackedBody) Close() error { b.closed = true; return nil }

// response returns a response with status, Content-Type values and body.
func response(status int, contentTypes []string, body string) (*http.Response, *trackedBody) {
	tb := &trackedBody{r: strings.NewReader(body)}
	h := http.Header{}
	if contentTypes != nil {
		h["Content-Type"] = contentTypes
	}
	return &http.Response{StatusCode: status, Header: h, Body: tb}, tb
}

// staleBody returns a stale-token problem with raw JSON values for the
// tokens ("" leaves the member out).
func staleBody(token, current string) string {
	s := `{"type":"` + fencehttp.StaleTokenType + `","title":"Stale fencing token","status":409,"resource":"order-queue"`
	if token != "" {
		s += `,"token":` + token
	}
	if current != "" {
		s += `,"current":` + current
	}
	return s + "}"
}

func problemBody(typ string, status int) string {
	return fmt.Sprintf(`{"type":%q,"title":"t","status":%d,"detail":"d"}`, typ, status)
}

var (
	problemJSON = []string{fencehttp.ProblemContentType}
	validStale  = staleBody(`"41"`, `"42"`)
	// The sentinels of package fencedlock a response could be mapped to,
	// ErrStaleToken first; CheckResponse never maps one to
	// ErrInvalidArgument.
	sentinels = []error{fencedlock.ErrStaleToken, fencedlock.ErrInvalidToken, fencedlock.ErrNotFound, fencedlock.ErrInvalidArgument, fencedlock.ErrUnavailable}
)

func TestCheckResponse2xx(t *testing.T) {
	for _, status := range []int{200, 201, 202, 204, 206, 299} {
		for _, body := range []string{"", "plain", validStale} {
			resp, tb := response(status, problemJSON, body)
			assert.NoError(t, fencehttp.CheckResponse(resp), "status %d", status)
			assert.Zero(t, tb.read, "status %d: the body of a 2xx response is left unread", status)
			assert.False(t, tb.closed, "status %d: the body is not closed", status)
		}
	}
}

func TestCheckResponseStale(t *testing.T) {
	tests := []struct {
		name         string
		contentTypes []string
		body         string
		want         fencedlock.StaleTokenError
	}{
		{"plain", problemJSON, validStale, fencedlock.StaleTokenError{Resource: "order-queue", Token: 41, Current: 42}},
		{"charset parameter", []string{"application/problem+json; charset=utf-8"}, validStale, fencedlock.StaleTokenError{Resource: "order-queue", Token: 41, Current: 42}},
		{"quoted parameter", []string{`application/problem+json; charset="UTF-8"`}, validStale, fencedlock.StaleTokenError{Resource: "order-queue", Token: 41, Current: 42}},
		{"upper case media type", []string{"Application/Problem+JSON"}, validStale, fencedlock.StaleTokenError{Resource: "order-queue", Token: 41, Current: 42}},
		{"spaces in media type", []string{"application/problem+json ; charset=utf-8"}, validStale, fencedlock.StaleTokenError{Resource: "order-queue", Token: 41, Current: 42}},
		{"2^64-1", problemJSON, staleBody(`"18446744073709551614"`, `"18446744073709551615"`), fencedlock.StaleTokenError{Resource: "order-queue", Token: math.MaxUint64 - 1, Current: math.MaxUint64}},
		{"above 2^53", problemJSON, staleBody(`"9007199254740992"`, `"9007199254740993"`), fencedlock.StaleTokenError{Resource: "order-queue", Token: 1 << 53, Current: 1<<53 + 1}},
		{"leading zeros", problemJSON, staleBody(`"041"`, `"042"`), fencedlock.StaleTokenError{Resource: "order-queue", Token: 41, Current: 42}},
		{"unknown members", problemJSON, `{"type":"` + fencehttp.StaleTokenType + `","x":[1,{"y":null}],"token":"1","current":"2","resource":"r","instance":"/q"}`, fencedlock.StaleTokenError{Resource: "r", Token: 1, Current: 2}},
		{"no resource", problemJSON, `{"type":"` + fencehttp.StaleTokenType + `","token":"1","current":"2"}`, fencedlock.StaleTokenError{Token: 1, Current: 2}},
		{"resource not a string", problemJSON, `{"type":"` + fencehttp.StaleTokenType + `","resource":7,"token":"1","current":"2"}`, fencedlock.StaleTokenError{Token: 1, Current: 2}},
		{"non-ASCII resource", problemJSON, `{"type":"` + fencehttp.StaleTokenType + `","resource":"Bestellwarteschlange \u00e4 {x}","token":"1","current":"2"}`, fencedlock.StaleTokenError{Resource: "Bestellwarteschlange ä {x}", Token: 1, Current: 2}},
		{"status member ignored", problemJSON, `{"type":"` + fencehttp.StaleTokenType + `","status":"teapot","token":"1","current":"2"}`, fencedlock.StaleTokenError{Token: 1, Current: 2}},
		{"whitespace", problemJSON, "\n\t { \"type\" : \"" + fencehttp.StaleTokenType + "\" , \"token\" : \"1\" , \"current\" : \"2\" } \n", fencedlock.StaleTokenError{Token: 1, Current: 2}},
		{"exactly MaxErrorBody bytes", problemJSON, validStale + strings.Repeat(" ", fencehttp.MaxErrorBody-len(validStale)), fencedlock.StaleTokenError{Resource: "order-queue", Token: 41, Current: 42}},
	}
	for _, tt := range tests {
		tt := tt
		t.Run(tt.name, func(t *testing.T) {
			resp, tb := response(http.StatusConflict, tt.contentTypes, tt.body)
			err := fencehttp.CheckResponse(resp)
			var stale *fencedlock.StaleTokenError
			require.True(t, errors.As(err, &stale), "want a *StaleTokenError, got %T %v", err, err)
			assert.Equal(t, tt.want, *stale)
			assert.True(t, errors.Is(err, fencedlock.ErrStaleToken))
			assert.False(t, tb.closed, "CheckResponse does not close the body")
		})
	}
}

func TestCheckResponseErrors(t *testing.T) {
	tests := []struct {
		name         string
		status       int
		contentTypes []string
		body         string
		want         error  // the sentinel err matches; nil: none of them
		errPart      string // in err.Error()
	}{
		// The other problem types of the package, with their status.
		{"invalid token", 400, problemJSON, problemBody(fencehttp.InvalidTokenType, 400), fencedlock.ErrInvalidToken, `fencedlock: invalid token: detail "d"`},
		{"not found", 404, problemJSON, problemBody(fencehttp.NotFoundType, 404), fencedlock.ErrNotFound, "resource not found"},
		// ErrInvalidArgument is a bug of the server, never a 400 problem:
		// not even a problem of the type an unreleased version had.
		{"invalid-argument type", 400, problemJSON, problemBody("https://pkg.go.dev/github.com/fencedlock/fencedlock/fencehttp#InvalidArgumentType", 400), nil, `400 Bad Request: detail "d"`},
		// What a handler answers itself for a body it cannot read.
		{"400 http.Error", 400, []string{"text/plain; charset=utf-8"}, "the body is not a JSON array\n", nil, `400 Bad Request: body "the body is not a JSON array\n"`},
		{"413 http.Error", 413, []string{"text/plain; charset=utf-8"}, "request body too large\n", nil, "413 Request Entity Too Large"},
		{"invalid token, charset", 400, []string{"application/problem+json;charset=utf-8"}, problemBody(fencehttp.InvalidTokenType, 400), fencedlock.ErrInvalidToken, "400 Bad Request"},

		// A stale-token problem whose tokens cannot be used: the server
		// said "stale", but there is no *StaleTokenError to give.
		{"stale, no token", 409, problemJSON, staleBody("", `"42"`), fencedlock.ErrStaleToken, `no "token" string member`},
		{"stale, no current", 409, problemJSON, staleBody(`"41"`, ""), fencedlock.ErrStaleToken, `no "current" string member`},
		{"stale, no tokens", 409, problemJSON, staleBody("", ""), fencedlock.ErrStaleToken, `no "token" string member`},
		{"stale, token 0", 409, problemJSON, staleBody(`"0"`, `"42"`), fencedlock.ErrStaleToken, "zero is not a token"},
		{"stale, current 0", 409, problemJSON, staleBody(`"41"`, `"0"`), fencedlock.ErrStaleToken, "zero is not a token"},
		{"stale, token garbage", 409, problemJSON, staleBody(`"abc"`, `"42"`), fencedlock.ErrStaleToken, `"abc" is not a decimal number`},
		{"stale, token empty", 409, problemJSON, staleBody(`""`, `"42"`), fencedlock.ErrStaleToken, "empty string"},
		{"stale, token negative", 409, problemJSON, staleBody(`"-41"`, `"42"`), fencedlock.ErrStaleToken, "not a decimal number"},
		{"stale, token with spaces", 409, problemJSON, staleBody(`" 41"`, `"42"`), fencedlock.ErrStaleToken, "not a decimal number"},
		{"stale, token a number", 409, problemJSON, staleBody(`41`, `"42"`), fencedlock.ErrStaleToken, `no "token" string member`},
		{"stale, tokens numbers", 409, problemJSON, staleBody(`41`, `42`), fencedlock.ErrStaleToken, `no "token" string member`},
		{"stale, token null", 409, problemJSON, staleBody(`null`, `"42"`), fencedlock.ErrStaleToken, `no "token" string member`},
		{"stale, token object", 409, problemJSON, staleBody(`{"v":"41"}`, `"42"`), fencedlock.ErrStaleToken, `no "token" string member`},
		{"stale, current 2^64", 409, problemJSON, staleBody(`"41"`, `"18446744073709551616"`), fencedlock.ErrStaleToken, "overflows"},
		{"stale, huge token", 409, problemJSON, staleBody(`"`+strings.Repeat("9", 1000)+`"`, `"42"`), fencedlock.ErrStaleToken, "1000 characters"},
		{"stale, equal tokens", 409, problemJSON, staleBody(`"42"`, `"42"`), fencedlock.ErrStaleToken, "not below its current token"},
		{"stale, token above current", 409, problemJSON, staleBody(`"43"`, `"42"`), fencedlock.ErrStaleToken, "token 43 is not below its current token 42"},
		{"stale, resource too long", 409, problemJSON, strings.Replace(validStale, `"order-queue"`, `"`+strings.Repeat("r", fencedlock.MaxResourceLen+1)+`"`, 1), fencedlock.ErrStaleToken, "is longer than 1024 bytes"},

		// Not a stale-token problem of this package: no sentinel.
		{"409 application/json", 409, []string{"application/json"}, validStale, nil, "409 Conflict"},
		{"409 text/plain", 409, []string{"text/plain; charset=utf-8"}, "conflict\n", nil, `body "conflict\n" (Content-Type "text/plain; charset=utf-8")`},
		{"409 no Content-Type", 409, nil, validStale, nil, "(no Content-Type)"},
		{"409 empty Content-Type", 409, []string{""}, validStale, nil, "409 Conflict"},
		{"409 two Content-Types", 409, []string{fencehttp.ProblemContentType, fencehttp.ProblemContentType}, validStale, nil, "409 Conflict"},
		{"409 malformed Content-Type", 409, []string{"application/problem+json; charset"}, validStale, nil, "409 Conflict"},
		{"409 problem+jsonx", 409, []string{"application/problem+jsonx"}, validStale, nil, "409 Conflict"},
		{"409 problem+xml", 409, []string{"application/problem+xml"}, validStale, nil, "409 Conflict"},
		{"409 about:blank", 409, problemJSON, `{"title":"Conflict","status":409,"token":"41","current":"42"}`, nil, "409 Conflict"},
		{"409 another type", 409, problemJSON, problemBody("https://example.com/probs/out-of-credit", 409), nil, `detail "d"`},
		{"409 type with another case", 409, problemJSON, strings.Replace(validStale, "StaleTokenType", "staletokentype", 1), nil, "409 Conflict"},
		{"409 type with a suffix", 409, problemJSON, strings.Replace(validStale, "StaleTokenType", "StaleTokenType/", 1), nil, "409 Conflict"},
		{"409 type not a string", 409, problemJSON, `{"type":7,"token":"41","current":"42"}`, nil, "409 Conflict"},
		{"409 member Type, not type", 409, problemJSON, strings.Replace(validStale, `"type"`, `"Type"`, 1), nil, "409 Conflict"},
		{"409 invalid-token type", 409, problemJSON, problemBody(fencehttp.InvalidTokenType, 409), nil, "409 Conflict"},
		{"400 stale type", 400, problemJSON, validStale, nil, "400 Bad Request"},
		{"500 stale type", 500, problemJSON, validStale, nil, "500 Internal Server Error"},
		{"404 invalid-token type", 404, problemJSON, problemBody(fencehttp.InvalidTokenType, 404), nil, "404 Not Found"},
		{"400 not-found type", 400, problemJSON, problemBody(fencehttp.NotFoundType, 400), nil, "400 Bad Request"},
		{"404 text", 404, []string{"text/plain"}, "404 page not found\n", nil, "404 Not Found"},
		{"500 about:blank", 500, problemJSON, `{"type":"about:blank","title":"Internal Server Error","status":500}`, nil, "500 Internal Server Error"},
		// The backend, or the proxy's upstream, could not answer.
		{"502 html", 502, []string{"text/html"}, "<html>bad gateway</html>", fencedlock.ErrUnavailable, "502 Bad Gateway: fencedlock: backend unavailable"},
		{"503 WriteError", 503, problemJSON, `{"type":"about:blank","title":"Service Unavailable","status":503}`, fencedlock.ErrUnavailable, "503 Service Unavailable: fencedlock: backend unavailable"},
		{"503 no body", 503, nil, "", fencedlock.ErrUnavailable, "503 Service Unavailable"},
		{"503 malformed problem", 503, problemJSON, "{", fencedlock.ErrUnavailable, "backend unavailable: malformed problem document"},
		{"503 stale type", 503, problemJSON, validStale, fencedlock.ErrUnavailable, "503 Service Unavailable"},
		{"504 text", 504, []string{"text/plain"}, "upstream timed out\n", fencedlock.ErrUnavailable, "504 Gateway Timeout"},
		{"500 is not unavailable", 500, []string{"text/plain"}, "oops\n", nil, "500 Internal Server Error"},
		{"302", 302, nil, "", nil, "302 Found"},
		{"304", 304, nil, "", nil, "304 Not Modified"},
		{"unknown status", 599, nil, "", nil, "status 599"},

		// Malformed problem documents.
		{"truncated", 409, problemJSON, validStale[:len(validStale)/2], nil, "malformed problem document"},
		{"empty body", 409, problemJSON, "", nil, "malformed problem document"},
		{"null", 409, problemJSON, "null", nil, "malformed problem document: null"},
		{"array", 409, problemJSON, "[" + validStale + "]", nil, "malformed problem document"},
		{"string", 409, problemJSON, `"stale"`, nil, "malformed problem document"},
		{"two objects", 409, problemJSON, validStale + validStale, nil, "malformed problem document"},
		{"binary", 409, problemJSON, "\x00\xff\x1b[31m", nil, "malformed problem document"},
		{"deep nesting", 409, problemJSON, strings.Repeat("[", 20000), nil, "malformed problem document"},
		{"too large", 409, problemJSON, validStale + strings.Repeat(" ", fencehttp.MaxErrorBody), nil, "body larger than 65536 bytes"},
		{"too large, not JSON", 409, []string{"text/plain"}, strings.Repeat("x", 10*fencehttp.MaxErrorBody), nil, "body larger than 65536 bytes"},
	}
	for _, tt := range tests {
		tt := tt
		t.Run(tt.name, func(t *testing.T) {
			resp, tb := response(tt.status, tt.contentTypes, tt.body)
			var err error
			require.NotPanics(t, func() { err = fencehttp.CheckResponse(resp) })
			require.Error(t, err)

			var statusErr *fencehttp.StatusError
			require.True(t, errors.As(err, &statusErr), "want a *StatusError, got %T %v", err, err)
			assert.Equal(t, tt.status, statusErr.StatusCode)
			var stale *fencedlock.StaleTokenError
			assert.False(t, errors.As(err, &stale), "not a *StaleTokenError: %v", err)
			for _, s := range sentinels {
				assert.Equal(t, s == tt.want, errors.Is(err, s), "errors.Is(%v, %v)", err, s)
			}
			assert.Contains(t, err.Error(), tt.errPart)
			assert.NotContains(t, err.Error(), "\n", "untrusted text is quoted")

			assert.LessOrEqual(t, tb.read, fencehttp.MaxErrorBody+1, "reads a bounded amount")
			assert.LessOrEqual(t, len(statusErr.Body), 512, "keeps a short excerpt")
			assert.Equal(t, excerptOf(tt.body), string(statusErr.Body))
			assert.False(t, tb.closed, "CheckResponse does not close the body")

			// The caller can still read the whole body, and close it.
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			assert.Equal(t, tt.body, string(b), "the body, whole")
			require.NoError(t, resp.Body.Close())
			assert.True(t, tb.closed, "Close reaches the original body")
		})
	}
}

func excerptOf(body string) string {
	if len(body) > 512 {
		return body[:512]
	}
	return body
}

func TestCheckResponseProblemFields(t *testing.T) {
	resp, _ := response(400, []string{"application/problem+json"}, `{"type":"`+fencehttp.InvalidTokenType+`","title":"Invalid fencing token","status":400,"detail":"fencehttp: Fencing-Token header: fencedlock: invalid token: missing"}`)
	err := fencehttp.CheckResponse(resp)
	var statusErr *fencehttp.StatusError
	require.True(t, errors.As(err, &statusErr))
	assert.Equal(t, fencehttp.StatusError{
		StatusCode:  400,
		ContentType: "application/problem+json",
		Type:        fencehttp.InvalidTokenType,
		Title:       "Invalid fencing token",
		Detail:      "fencehttp: Fencing-Token header: fencedlock: invalid token: missing",
		Body:        statusErr.Body,
		Err:         fencedlock.ErrInvalidToken,
	}, *statusErr)
	assert.Equal(t, `fencehttp: response status 400 Bad Request: fencedlock: invalid token: detail "fencehttp: Fencing-Token header: fencedlock: invalid token: missing"`, err.Error())

	resp, _ = response(409, []string{"application/problem+json"}, `{"title":"Conflict"}`)
	require.True(t, errors.As(fencehttp.CheckResponse(resp), &statusErr))
	assert.Equal(t, "about:blank", statusErr.Type, "a problem without a type is about:blank")
}

func TestCheckResponseNil(t *testing.T) {
	err := fencehttp.CheckResponse(nil)
	assert.True(t, errors.Is(err, fencedlock.ErrInvalidArgument), "nil response: %v", err)

	var statusErr *fencehttp.StatusError
	err = fencehttp.CheckResponse(&http.Response{StatusCode: 409})
	require.True(t, errors.As(err, &statusErr), "nil body and header: %v", err)
	assert.Equal(t, 409, statusErr.StatusCode)
	assert.Nil(t, statusErr.Body)

	assert.NoError(t, fencehttp.CheckResponse(&http.Response{StatusCode: 200}))
}

// failingBody returns some bytes, then an error.
type failingBody struct {
	data   string
	err    error
	closed bool
}

func (b *failingBody) Read(p []byte) (int, error) {
	if b.data == "" {
		return 0, b.err
	}
	n := copy(p, b.data)
	b.data = b.data[n:]
	return n, nil
}

func (b *failingBody) Close() error { b.closed = true; return nil }

func TestCheckResponseReadError(t *testing.T) {
	readErr := errors.New("connection reset by peer")
	body := &failingBody{data: validStale[:20], err: readErr}
	resp := &http.Response{StatusCode: 409, Header: http.Header{"Content-Type": problemJSON}, Body: body}
	err := fencehttp.CheckResponse(resp)

	var statusErr *fencehttp.StatusError
	require.True(t, errors.As(err, &statusErr), "%T %v", err, err)
	assert.True(t, errors.Is(err, readErr))
	assert.False(t, errors.Is(err, fencedlock.ErrStaleToken))
	assert.True(t, errors.Is(err, fencedlock.ErrUnavailable), "the answer was lost: %v", err)
	assert.Contains(t, err.Error(), "reading the body: connection reset by peer")
	assert.Equal(t, validStale[:20], string(statusErr.Body))
	assert.False(t, body.closed)
}

// A body whose read fails once the request's context ended with a
// cause gives an error wrapping the cause and the context's error, and
// not ErrUnavailable, whatever the status; a plain cancel, or a context
// still live, gives ErrUnavailable as before.
func TestCheckResponseReadErrorAfterCause(t *testing.T) {
	for _, status := range []int{409, 503} {
		for _, c := range []struct {
			name  string
			cause error // nil: cancelled plainly
			live  bool
		}{
			{"cancelled with a cause", errCause, false},
			{"cancelled", nil, false},
			{"live", nil, true},
		} {
			ctx, cancel := context.WithCancelCause(context.Background())
			if !c.live {
				cancel(c.cause)
			}
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://example.com/", nil)
			require.NoError(t, err)
			readErr := errors.New("read interrupted")
			resp := &http.Response{StatusCode: status, Request: req, Body: &failingBody{data: "part", err: readErr}}
			err = fencehttp.CheckResponse(resp)
			cancel(nil)
			t.Logf("%d, %s: %v", status, c.name, err)
			var statusErr *fencehttp.StatusError
			require.True(t, errors.As(err, &statusErr), "%T %v", err, err)
			assert.Equal(t, status, statusErr.StatusCode)
			assert.True(t, errors.Is(err, readErr), "%v", err)
			if c.cause != nil {
				expectCause(t, err)
				continue
			}
			assert.True(t, errors.Is(err, fencedlock.ErrUnavailable), "%d, %s: %v", status, c.name, err)
		}
	}
}

// endless is a body that never ends.
type endless struct{ read int }

func (e *endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	e.read += len(p)
	return len(p), nil
}

func (e *endless) Close() error { return nil }

func TestCheckResponseEndlessBody(t *testing.T) {
	body := &endless{}
	resp := &http.Response{StatusCode: 409, Header: http.Header{"Content-Type": problemJSON}, Body: body}
	err := fencehttp.CheckResponse(resp)
	var statusErr *fencehttp.StatusError
	require.True(t, errors.As(err, &statusErr))
	assert.Contains(t, err.Error(), "body larger than 65536 bytes")
	assert.Equal(t, fencehttp.MaxErrorBody+1, body.read, "reads MaxErrorBody+1 bytes and stops")
}

func TestStatusErrorText(t *testing.T) {
	tests := []struct {
		name string
		err  *fencehttp.StatusError
		want string
	}{
		{"bare", &fencehttp.StatusError{StatusCode: 503}, "fencehttp: response status 503 Service Unavailable"},
		{"unknown status", &fencehttp.StatusError{StatusCode: 799}, "fencehttp: response status 799"},
		{"body", &fencehttp.StatusError{StatusCode: 409, ContentType: "text/plain", Body: []byte("taken")}, `fencehttp: response status 409 Conflict: body "taken" (Content-Type "text/plain")`},
		{"control characters", &fencehttp.StatusError{StatusCode: 409, Body: []byte("a\nb\x1b[31m")}, `fencehttp: response status 409 Conflict: body "a\nb\x1b[31m" (no Content-Type)`},
		{"detail", &fencehttp.StatusError{StatusCode: 409, Type: "about:blank", Detail: "x\ny", Body: []byte("{}")}, `fencehttp: response status 409 Conflict: detail "x\ny"`},
		{"problem without detail", &fencehttp.StatusError{StatusCode: 409, Type: "about:blank", Body: []byte("{}")}, `fencehttp: response status 409 Conflict`},
		{"err", &fencehttp.StatusError{StatusCode: 404, Type: fencehttp.NotFoundType, Err: fencedlock.ErrNotFound, Detail: "q"}, `fencehttp: response status 404 Not Found: fencedlock: resource not found: detail "q"`},
		{"long detail", &fencehttp.StatusError{StatusCode: 400, Type: "about:blank", Detail: strings.Repeat("d", 1000)}, `fencehttp: response status 400 Bad Request: detail "` + strings.Repeat("d", 128) + `"...`},
		{"long body", &fencehttp.StatusError{StatusCode: 400, ContentType: "text/plain", Body: []byte(strings.Repeat("b", 512))}, `fencehttp: response status 400 Bad Request: body "` + strings.Repeat("b", 128) + `"... (Content-Type "text/plain")`},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.err.Error(), tt.name)
	}
}

// A stale-token problem is trusted only for the token the request sent,
// when the response has the request and the request one valid token.
func TestCheckResponseSentToken(t *testing.T) {
	h := func(values ...string) http.Header { return http.Header{fencehttp.Header: values} }
	tests := []struct {
		name    string
		request bool        // whether the response has a Request
		header  http.Header // the Request's header
		stale   bool        // whether a *StaleTokenError comes back
		errPart string
	}{
		{"no request", false, nil, true, ""},
		{"the token sent", true, h("41"), true, ""},
		{"the token sent, leading zero", true, h("041"), true, ""},
		{"another token", true, h("40"), false, "the problem's token 41 is not the token 40 the request sent"},
		{"a higher token", true, h("42"), false, "the problem's token 41 is not the token 42 the request sent"},
		{"no token sent", true, http.Header{}, true, ""},
		{"nil header", true, nil, true, ""},
		{"two tokens sent", true, h("40", "40"), true, ""},
		{"malformed token sent", true, h("abc"), true, ""},
		{"zero sent", true, h("0"), true, ""},
	}
	for _, tt := range tests {
		tt := tt
		t.Run(tt.name, func(t *testing.T) {
			resp, _ := response(http.StatusConflict, problemJSON, validStale)
			if tt.request {
				resp.Request = &http.Request{Method: http.MethodPut, Header: tt.header}
			}
			err := fencehttp.CheckResponse(resp)
			require.Error(t, err)
			assert.True(t, errors.Is(err, fencedlock.ErrStaleToken), "errors.Is(%v, ErrStaleToken)", err)
			var stale *fencedlock.StaleTokenError
			if tt.stale {
				require.True(t, errors.As(err, &stale), "want a *StaleTokenError, got %T %v", err, err)
				assert.Equal(t, fencedlock.StaleTokenError{Resource: "order-queue", Token: 41, Current: 42}, *stale)
				return
			}
			assert.False(t, errors.As(err, &stale), "no *StaleTokenError: %v", err)
			var statusErr *fencehttp.StatusError
			require.True(t, errors.As(err, &statusErr), "want a *StatusError, got %T %v", err, err)
			assert.Equal(t, http.StatusConflict, statusErr.StatusCode)
			assert.Equal(t, fencehttp.StaleTokenType, statusErr.Type)
			assert.Contains(t, err.Error(), tt.errPart)
			for _, s := range sentinels[1:] { // all but ErrStaleToken
				assert.False(t, errors.Is(err, s), "errors.Is(%v, %v)", err, s)
			}
		})
	}
}

// CheckResponse puts back what it read: the caller reads the whole body
// after it, and closing the body closes the original.
func TestCheckResponseBodyReplay(t *testing.T) {
	for _, body := range []string{
		"",
		"short",
		validStale,
		strings.Repeat("0123456789", fencehttp.MaxErrorBody/10) + "tail", // beyond MaxErrorBody+1
		strings.Repeat("x", fencehttp.MaxErrorBody+1),
	} {
		for _, status := range []int{http.StatusConflict, http.StatusBadRequest, http.StatusBadGateway} {
			resp, tb := response(status, problemJSON, body)
			require.Error(t, fencehttp.CheckResponse(resp))
			assert.False(t, tb.closed, "CheckResponse does not close the body")
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			assert.Equal(t, len(body), len(b), "status %d", status)
			assert.True(t, string(b) == body, "status %d: the body, whole and in order", status)
			require.NoError(t, resp.Body.Close())
			assert.True(t, tb.closed, "status %d: Close reaches the original body", status)
		}
	}

	// A body that fails: the bytes read, then the error again.
	readErr := errors.New("connection reset by peer")
	fb := &failingBody{data: "partial", err: readErr}
	resp := &http.Response{StatusCode: 409, Header: http.Header{"Content-Type": problemJSON}, Body: fb}
	require.Error(t, fencehttp.CheckResponse(resp))
	b, err := io.ReadAll(resp.Body)
	assert.Equal(t, "partial", string(b))
	assert.True(t, errors.Is(err, readErr), "%v", err)
	require.NoError(t, resp.Body.Close())
	assert.True(t, fb.closed)

	// A 2xx body is left as it is; a nil body stays nil.
	resp, tb := response(http.StatusOK, nil, "ok")
	require.NoError(t, fencehttp.CheckResponse(resp))
	assert.Same(t, tb, resp.Body)
	resp = &http.Response{StatusCode: 500}
	require.Error(t, fencehttp.CheckResponse(resp))
	assert.Nil(t, resp.Body)
}
