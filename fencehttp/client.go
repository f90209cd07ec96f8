package fencehttp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/names"
)

// MaxErrorBody is the largest error response body CheckResponse parses:
// 64 KiB. It reads one byte more to tell a larger body, which it does not
// parse, and puts what it read back for the caller.
const MaxErrorBody = 64 << 10

// maxExcerpt is how much of an error response's body a StatusError keeps,
// and maxShown how much of it, or of the problem's detail, its Error text
// shows.
const (
	maxExcerpt = 512
	maxShown   = 128
)

// StatusError is the error CheckResponse returns for a response outside
// 2xx that is not a well-formed 409 stale-token problem: a status from a
// proxy or another handler, a problem of another type, a body that is too
// large or malformed. When the body is a problem of one of the types of
// this package with its status, Err is the sentinel error the server's
// error matched ([fencedlock.ErrInvalidToken] or [fencedlock.ErrNotFound])
// and errors.Is finds it through Unwrap; for a 502, 503 or 504 status, or
// a body that failed to read, Err wraps [fencedlock.ErrUnavailable] (but
// for a body whose read the request's context, ended with a cause, cut
// short: see CheckResponse); a 409 StaleTokenType problem
// whose tokens are unusable, or whose "token" is not the token the
// request sent, gives an Err that wraps [fencedlock.ErrStaleToken] and says
// why.
//
// A StatusError holds copies of what it reports and is safe to share
// between goroutines once returned.
type StatusError struct {
	// StatusCode is the response's status code, e.g. 409.
	StatusCode int

	// ContentType is the response's Content-Type header as sent (the
	// first one, if it had several), "" when it had none.
	ContentType string

	// Type, Title and Detail are the members of the response's problem
	// document (Type "about:blank" when the document has none); all three
	// are empty when the body is not a problem document. They come from
	// the server: treat them as untrusted text.
	Type, Title, Detail string

	// Body is the start of the response's body, at most 512 bytes.
	Body []byte

	// Err is the error behind the status, or nil: the sentinel of a
	// recognised problem, why the body could not be read or decoded, or
	// why a stale-token problem gave no [*fencedlock.StaleTokenError].
	Err error
}

// Error reports the status, Err, and the problem's detail or the start of
// the body, quoted.
func (e *StatusError) Error() string {
	msg := "fencehttp: response status " + strconv.Itoa(e.StatusCode)
	if text := http.StatusText(e.StatusCode); text != "" {
		msg += " " + text
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	switch {
	case e.Detail != "":
		msg += ": detail " + quote(e.Detail)
	case e.Type == "" && len(e.Body) > 0:
		msg += ": body " + quote(string(e.Body))
		if e.ContentType == "" {
			msg += " (no Content-Type)"
		} else {
			msg += " (Content-Type " + quote(e.ContentType) + ")"
		}
	}
	return msg
}

// Unwrap returns Err.
func (e *StatusError) Unwrap() error { return e.Err }

// quote returns s in Go syntax, cut at maxShown bytes, so that no control
// character of an untrusted text reaches a log.
func quote(s string) string {
	if len(s) > maxShown {
		return strconv.Quote(s[:maxShown]) + "..."
	}
	return strconv.Quote(s)
}

// CheckResponse returns nil for a response with a 2xx status, without
// reading its body. For any other status it reads at most MaxErrorBody+1
// bytes of the body and returns an error:
//
//   - 409 with a StaleTokenType problem whose "token" and "current" are
//     valid tokens, token below current: a [*fencedlock.StaleTokenError]
//     with the problem's resource and tokens, which matches
//     [fencedlock.ErrStaleToken] with errors.Is. With tokens missing, zero,
//     malformed or in the wrong order, or a resource longer than
//     [fencedlock.MaxResourceLen]: a *StatusError that matches
//     ErrStaleToken (the server said so) but holds no tokens.
//   - 409 with a StaleTokenType problem whose "token" is not the token
//     the request sent, when resp.Request is not nil and carries exactly
//     one valid Fencing-Token header (as SetToken sets it): a *StatusError
//     that matches ErrStaleToken, holds no tokens, and says why. The
//     token of a response without a Request, or whose Request has no
//     valid token, is not checked.
//   - 400 with an InvalidTokenType problem: a *StatusError matching
//     [fencedlock.ErrInvalidToken]; 404 with a NotFoundType problem, one
//     matching [fencedlock.ErrNotFound].
//   - 502 Bad Gateway, 503 Service Unavailable (WriteError's answer to
//     an error matching [fencedlock.ErrUnavailable]) and 504 Gateway
//     Timeout, whatever the body: a *StatusError matching
//     [fencedlock.ErrUnavailable]. So does any response whose body fails
//     to read (the answer was lost), unless resp.Request's context
//     ended with a cause ([context.Cause] is not just its Err): then,
//     whatever the status, Err wraps the cause, the context's Err and
//     the read's error, and matches no sentinel but those the cause
//     matches (the caller stopped the read, the server did not fail).
//   - Anything else, including a 409 whose body is not a problem of
//     StaleTokenType, a Content-Type other than application/problem+json
//     (parameters allowed), a body that is not a JSON object or is larger
//     than MaxErrorBody, the error responses a handler
//     writes itself (http.Error with 400 or 413 for a body it cannot
//     read), and 3xx statuses: a *StatusError that matches none of the
//     sentinel errors of package fencedlock.
//
// The Resource and Current of a *StaleTokenError come from the server, as
// it sent them; only Token is checked against the request. A client
// should check that Resource is the resource it wrote, and bound Current
// (not far above the tokens its Locker grants, say), before it passes
// Current to Locker.Advance: a faulty server could otherwise raise the
// counter to its limit.
//
// CheckResponse never closes the body: the caller closes it, as after
// every http.Client.Do. For a status outside 2xx it replaces resp.Body
// with a body that reads the bytes CheckResponse read, then the rest of
// the original body, and whose Close closes the original body: the caller
// can still read or decode the whole error body itself. A nil resp
// returns an error wrapping [fencedlock.ErrInvalidArgument]; a nil
// resp.Body reads as empty and is left nil.
func CheckResponse(resp *http.Response) error {
	stopped, err := checkResponse(resp)
	if e, ok := err.(*StatusError); ok && !stopped && unavailableStatus(e.StatusCode) && !errors.Is(e.Err, fencedlock.ErrUnavailable) {
		if e.Err == nil {
			e.Err = fencedlock.ErrUnavailable
		} else {
			e.Err = fmt.Errorf("%w: %w", fencedlock.ErrUnavailable, e.Err)
		}
	}
	return err
}

// unavailableStatus reports whether status says that the server, or a
// proxy's upstream, could not answer: 502, 503 or 504.
func unavailableStatus(status int) bool {
	return status == http.StatusBadGateway || status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout
}

// checkResponse is CheckResponse but for the statuses that say the
// backend is unavailable. stopped reports that reading the body failed
// when the request's context had ended with a cause: the error then
// does not match ErrUnavailable, whatever the status.
func checkResponse(resp *http.Response) (stopped bool, err error) {
	if resp == nil {
		return false, fmt.Errorf("fencehttp: %w: nil *http.Response", fencedlock.ErrInvalidArgument)
	}
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		return false, nil
	}
	e := &StatusError{StatusCode: resp.StatusCode}
	contentTypes := resp.Header.Values("Content-Type")
	if len(contentTypes) > 0 {
		e.ContentType = contentTypes[0]
	}
	var body []byte
	if resp.Body != nil {
		var err error
		orig := resp.Body
		body, err = io.ReadAll(io.LimitReader(orig, MaxErrorBody+1))
		resp.Body = &replayBody{r: io.MultiReader(bytes.NewReader(body), orig), orig: orig}
		e.Body = excerpt(body)
		if err != nil {
			if resp.Request != nil {
				if stopped := stoppedBy(resp.Request.Context(), err); stopped != nil {
					e.Err = fmt.Errorf("reading the body: %w", stopped)
					return true, e
				}
			}
			// The answer was lost on its way.
			e.Err = fmt.Errorf("%w: reading the body: %w", fencedlock.ErrUnavailable, err)
			return false, e
		}
	}
	if len(body) > MaxErrorBody {
		e.Err = fmt.Errorf("body larger than %d bytes, not read", MaxErrorBody)
		return false, e
	}
	if len(contentTypes) != 1 || !isProblem(contentTypes[0]) {
		return false, e
	}
	p, err := decodeProblem(body)
	if err != nil {
		e.Err = fmt.Errorf("malformed problem document: %w", err)
		return false, e
	}
	e.Type, e.Title, e.Detail = p.typ, p.title, p.detail
	switch {
	case p.typ == StaleTokenType && resp.StatusCode == http.StatusConflict:
		stale, err := staleFrom(p)
		if err != nil {
			e.Err = err
			return false, e
		}
		if resp.Request != nil {
			if sent, err := TokenFromHeader(resp.Request.Header); err == nil && sent != stale.Token {
				e.Err = fmt.Errorf("%w, but the problem's token %v is not the token %v the request sent", fencedlock.ErrStaleToken, stale.Token, sent)
				return false, e
			}
		}
		return false, stale
	case p.typ == InvalidTokenType && resp.StatusCode == http.StatusBadRequest:
		e.Err = fencedlock.ErrInvalidToken
	case p.typ == NotFoundType && resp.StatusCode == http.StatusNotFound:
		e.Err = fencedlock.ErrNotFound
	}
	return false, e
}

// replayBody is the body CheckResponse leaves on a response it read
// from: the bytes it read, then the rest of the original body.
type replayBody struct {
	r    io.Reader
	orig io.ReadCloser
}

func (b *replayBody) Read(p []byte) (int, error) { return b.r.Read(p) }

// Close closes the original body.
func (b *replayBody) Close() error { return b.orig.Close() }

// isProblem reports whether a Content-Type value is
// application/problem+json, with or without parameters.
func isProblem(contentType string) bool {
	mediaType, _, err := mime.ParseMediaType(contentType)
	return err == nil && mediaType == ProblemContentType
}

// staleFrom returns the *StaleTokenError a stale-token problem describes,
// or, when its tokens are unusable, an error wrapping ErrStaleToken that
// says why.
func staleFrom(p received) (*fencedlock.StaleTokenError, error) {
	token, err := problemToken("token", p.token, p.hasToken)
	if err != nil {
		return nil, err
	}
	current, err := problemToken("current", p.current, p.hasCurrent)
	if err != nil {
		return nil, err
	}
	if token >= current {
		return nil, fmt.Errorf("%w, but the problem's token %v is not below its current token %v", fencedlock.ErrStaleToken, token, current)
	}
	if len(p.resource) > fencedlock.MaxResourceLen {
		return nil, fmt.Errorf("%w, but the problem's resource %s is longer than %d bytes", fencedlock.ErrStaleToken, names.Quote(p.resource), fencedlock.MaxResourceLen)
	}
	return &fencedlock.StaleTokenError{Resource: p.resource, Token: token, Current: current}, nil
}

func problemToken(name, s string, present bool) (fencedlock.Token, error) {
	if !present {
		return 0, fmt.Errorf("%w, but the problem has no %q string member", fencedlock.ErrStaleToken, name)
	}
	t, err := fencedlock.ParseToken(s)
	if err != nil {
		// err wraps ErrInvalidToken: keep its text, not its identity, so
		// that the error is not mistaken for a refused token of ours.
		return 0, fmt.Errorf("%w, but the problem's %q member is unusable: %v", fencedlock.ErrStaleToken, name, err)
	}
	return t, nil
}

// excerpt returns a copy of the start of body, at most maxExcerpt bytes.
func excerpt(body []byte) []byte {
	if len(body) > maxExcerpt {
		body = body[:maxExcerpt]
	}
	if len(body) == 0 {
		return nil
	}
	return append([]byte(nil), body...)
}
