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
//	error                          status  problem type
//	fencedlock.ErrStaleToken       409     StaleTokenType
//	fencedlock.ErrInvalidToken     400     InvalidTokenType
//	fencedlock.ErrNotFound         404     NotFoundType
//	fencedlock.ErrInvalidArgument  400     InvalidArgumentType
//	any other error                500     about:blank
//
// For a *fencedlock.StaleTokenError in err's chain, the 409 problem holds
// its Resource, Token and Current, which CheckResponse turns back into an
// equal *StaleTokenError; an error matching ErrStaleToken without one gets
// a 409 problem without them. The "detail" of a 4xx problem is
// err.Error(), the text the client sees: do not wrap such errors with
// secrets. A 500 problem has no detail, so that no internal error text
// (a database address, a Redis error) reaches the client: log err
// yourself. Context errors, ErrLockLost, ErrCorrupt and the other errors
// of package fencedlock get 500 too.
//
// Call WriteError before anything is written to w: it sets Content-Type,
// removes Content-Length and writes the status and the body. Errors
// writing the body (the client went away) are ignored. A nil err writes
// nothing: there is no success status WriteError could choose for the
// handler, which answers the success itself. A nil w is ignored.
func WriteError(w http.ResponseWriter, err error) {
	if w == nil || err == nil {
		return
	}
	p := problemFor(err)
	body, mErr := json.Marshal(p)
	if mErr != nil {
		// Not reached: the members are strings, an int and Tokens.
		p = problem{Type: "about:blank", Title: http.StatusText(http.StatusInternalServerError), Status: http.StatusInternalServerError}
		body, _ = json.Marshal(p)
	}
	if h := w.Header(); h != nil {
		h.Del("Content-Length")
		h.Set("Content-Type", ProblemContentType)
		h.Set("X-Content-Type-Options", "nosniff")
	}
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}

// problemFor maps err to its problem document, in the order of the table
// of WriteError.
func problemFor(err error) problem {
	// fmt recovers from an Error method that panics (a typed nil error),
	// where err.Error() would not.
	detail := fmt.Sprint(err)
	var stale *fencedlock.StaleTokenError
	switch {
	case errors.As(err, &stale) && stale != nil:
		return problem{
			Type: StaleTokenType, Title: "Stale fencing token", Status: http.StatusConflict, Detail: detail,
			Resource: stale.Resource, Token: stale.Token, Current: stale.Current,
		}
	case errors.Is(err, fencedlock.ErrStaleToken):
		return problem{Type: StaleTokenType, Title: "Stale fencing token", Status: http.StatusConflict, Detail: detail}
	case errors.Is(err, fencedlock.ErrInvalidToken):
		return problem{Type: InvalidTokenType, Title: "Invalid fencing token", Status: http.StatusBadRequest, Detail: detail}
	case errors.Is(err, fencedlock.ErrNotFound):
		return problem{Type: NotFoundType, Title: "Resource not found", Status: http.StatusNotFound, Detail: detail}
	case errors.Is(err, fencedlock.ErrInvalidArgument):
		return problem{Type: InvalidArgumentType, Title: "Invalid argument", Status: http.StatusBadRequest, Detail: detail}
	}
	return problem{Type: "about:blank", Title: http.StatusText(http.StatusInternalServerError), Status: http.StatusInternalServerError}
}
