package fencehttp

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/fencedlock/fencedlock"
)

// WriteError answers a request with the problem document (RFC 9457,
// Content-Type application/problem+json) for err. The first rule that
// matches err, by errors.Is and errors.As, decides:
//
//	error                                 status  problem type      detail
//	a nil *fencedlock.StaleTokenError     500     about:blank       none
//	fencedlock.ErrStaleToken              409     StaleTokenType    see below
//	fencedlock.ErrInvalidToken            400     InvalidTokenType  err.Error()
//	fencedlock.ErrNotFound                404     NotFoundType      err.Error()
//	an error of CheckResource             400     about:blank       err.Error()
//	fencedlock.ErrUnavailable             503     about:blank       none
//	any other error                       500     about:blank       none
//
// For a [*fencedlock.StaleTokenError] in err's chain, the 409 problem holds
// its Resource, Token and Current, which CheckResponse turns back into an
// equal *StaleTokenError, and its own Error text as the detail, not the
// text of the errors that wrap it. An error matching ErrStaleToken
// without one gets a 409 problem without tokens, whose detail is the text
// of [fencedlock.ErrStaleToken] alone. A nil *StaleTokenError anywhere in
// err's chain is a bug in the handler, which has no tokens to report:
// WriteError answers it with 500.
//
// The detail of a 400 or 404 problem is err.Error(), which the client
// sees: do not wrap such errors with secrets (for the errors of TokenFrom
// it only echoes the client's own input). A 500 or 503 problem has no
// detail, so that no internal error text (a database address, a Redis
// error) reaches the client: log err yourself. 503 Service Unavailable is
// for an error matching [fencedlock.ErrUnavailable] (the store's database
// or Redis could not be reached or did not answer in time), which
// CheckResponse maps back to an error matching ErrUnavailable.
// [fencedlock.ErrInvalidArgument] means that the server's own code misused
// an API (a nil database, a bad table name, a TTL below 1 ms), not that
// the request was bad: it gets 500, like context errors, ErrLockLost,
// ErrCorrupt and the other errors of package fencedlock. A handler answers
// a client's bad input (a body it cannot decode, say) itself, with
// http.Error and a 4xx status.
//
// Call WriteError before anything is written to w: it sets Content-Type,
// removes Content-Length and any Fencing-Token header the handler set
// (an error response carries no value, so no value's token), and writes
// the status and the body. Errors writing the body (the client went away)
// are ignored. A nil err writes nothing: there is no success status
// WriteError could choose for the handler, which answers the success
// itself. A nil w is ignored.
func WriteError(w http.ResponseWriter, err error) {
	if w == nil || err == nil {
		return
	}
	p := problemFor(err)
	body, mErr := json.Marshal(p)
	if mErr != nil {
		// Not reached: the members are strings, an int and Tokens.
		p = internalProblem()
		body, _ = json.Marshal(p)
	}
	if h := w.Header(); h != nil {
		h.Del("Content-Length")
		h.Del(Header)
		h.Set("Content-Type", ProblemContentType)
		h.Set("X-Content-Type-Options", "nosniff")
	}
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}

// problemFor maps err to its problem document, in the order of the table
// of WriteError.
func problemFor(err error) problem {
	var stale *fencedlock.StaleTokenError
	switch {
	case hasNilStale(err):
		return internalProblem()
	case errors.As(err, &stale):
		if stale == nil {
			// Not reached after hasNilStale, unless an As method made it.
			return internalProblem()
		}
		return problem{
			Type: StaleTokenType, Title: "Stale fencing token", Status: http.StatusConflict, Detail: stale.Error(),
			Resource: stale.Resource, Token: stale.Token, Current: stale.Current,
		}
	case errors.Is(err, fencedlock.ErrStaleToken):
		return problem{Type: StaleTokenType, Title: "Stale fencing token", Status: http.StatusConflict, Detail: fencedlock.ErrStaleToken.Error()}
	case errors.Is(err, fencedlock.ErrInvalidToken):
		return problem{Type: InvalidTokenType, Title: "Invalid fencing token", Status: http.StatusBadRequest, Detail: detailOf(err)}
	case errors.Is(err, fencedlock.ErrNotFound):
		return problem{Type: NotFoundType, Title: "Resource not found", Status: http.StatusNotFound, Detail: detailOf(err)}
	case errors.As(err, new(*resourceError)):
		return problem{Type: "about:blank", Title: http.StatusText(http.StatusBadRequest), Status: http.StatusBadRequest, Detail: detailOf(err)}
	case errors.Is(err, fencedlock.ErrUnavailable):
		return problem{Type: "about:blank", Title: http.StatusText(http.StatusServiceUnavailable), Status: http.StatusServiceUnavailable}
	}
	return internalProblem()
}

func internalProblem() problem {
	return problem{Type: "about:blank", Title: http.StatusText(http.StatusInternalServerError), Status: http.StatusInternalServerError}
}

// detailOf returns err's text. fmt recovers from an Error method that
// panics (a typed nil error), where err.Error() would not.
func detailOf(err error) string { return fmt.Sprint(err) }

// hasNilStale reports whether err's chain, followed through Unwrap() error
// and Unwrap() []error as errors.As follows it, holds a nil
// [*fencedlock.StaleTokenError].
func hasNilStale(err error) bool {
	for err != nil {
		if s, ok := err.(*fencedlock.StaleTokenError); ok && s == nil {
			return true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if hasNilStale(e) {
					return true
				}
			}
			return false
		default:
			return false
		}
	}
	return false
}
