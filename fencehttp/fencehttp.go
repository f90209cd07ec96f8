package fencehttp

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/fencedlock/fencedlock"
)

// Header is the HTTP header that carries a fencing token, in decimal: on a
// request, the token the client writes with; on a response, the token the
// returned value was written with. Go's http.Header canonicalizes it, so
// the header name is matched case-insensitively.
const Header = "Fencing-Token"

// SetToken sets the Fencing-Token header of r to t, in decimal, replacing
// any value it had. The zero Token means "no token": SetToken removes the
// header instead, so that a request never carries the zero token, which
// TokenFrom and every store refuse. The server's TokenFrom then reports
// the header "missing", and WriteError answers 400 Bad Request with an
// InvalidTokenType problem. A nil r is ignored; a nil r.Header is
// allocated when t is not zero.
func SetToken(r *http.Request, t fencedlock.Token) {
	if r == nil {
		return
	}
	if r.Header == nil {
		if t == 0 {
			return
		}
		r.Header = make(http.Header)
	}
	SetTokenHeader(r.Header, t)
}

// SetTokenHeader sets the Fencing-Token field of h to t, as SetToken does
// for a request; a server uses it on w.Header() to tell a client the token
// that wrote the value it returns. The zero Token removes the field. A nil
// h is left alone.
func SetTokenHeader(h http.Header, t fencedlock.Token) {
	if h == nil {
		return
	}
	if t == 0 {
		h.Del(Header)
		return
	}
	h.Set(Header, t.String())
}

// TokenFrom returns the token in r's Fencing-Token header. It returns an
// error wrapping [fencedlock.ErrInvalidToken], whose text names the header,
// when the header is missing, appears more than once, or holds anything
// [fencedlock.ParseToken] refuses: an empty value, a value that is not a
// decimal number, one above 2^64-1, or zero. Spaces and tabs around the
// value are ignored, as HTTP ignores them. WriteError answers such an
// error with 400 Bad Request.
//
// A nil r returns an error wrapping [fencedlock.ErrInvalidArgument], a bug
// in the server's code, which WriteError answers with 500.
func TokenFrom(r *http.Request) (fencedlock.Token, error) {
	if r == nil {
		return 0, fmt.Errorf("fencehttp: %w: nil *http.Request", fencedlock.ErrInvalidArgument)
	}
	return TokenFromHeader(r.Header)
}

// TokenFromHeader returns the token in h's Fencing-Token field, with the
// rules and errors of TokenFrom. A client uses it on a response's header;
// a nil h has no token.
func TokenFromHeader(h http.Header) (fencedlock.Token, error) {
	values := h.Values(Header)
	switch len(values) {
	case 0:
		return 0, fmt.Errorf("fencehttp: %s header: %w: missing", Header, fencedlock.ErrInvalidToken)
	case 1:
	default:
		return 0, fmt.Errorf("fencehttp: %s header: %w: %d values, want one", Header, fencedlock.ErrInvalidToken, len(values))
	}
	t, err := fencedlock.ParseToken(strings.Trim(values[0], " \t"))
	if err != nil {
		return 0, fmt.Errorf("fencehttp: %s header: %w", Header, err)
	}
	return t, nil
}
