// Package fencehttp carries fencing tokens over HTTP, for a service that
// keeps a fenced resource and the remote clients that write to it while
// holding a fencedlock lock. The client sends its lock's token with every
// write in the Fencing-Token header; the service checks it with a
// [fencedlock.Store] and answers a stale token with 409 Conflict and a
// problem document (RFC 9457) holding the resource, the rejected token and
// the current one, which the client turns back into a
// [*fencedlock.StaleTokenError]. So errors.Is(err, fencedlock.ErrStaleToken)
// and errors.As(err, &staleErr) work across the wire as they do in one
// process.
//
// # Server side
//
// [TokenFrom] reads the token of a request; [WriteError] answers an error,
// its own or the store's. The handler answers the client's other input
// errors itself:
//
//	token, err := fencehttp.TokenFrom(r) // missing or malformed: 400
//	if err != nil {
//		fencehttp.WriteError(w, err)
//		return
//	}
//	value, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
//	if err != nil {
//		http.Error(w, "unreadable or too large body", http.StatusBadRequest)
//		return
//	}
//	if err := store.Put(r.Context(), "order-queue", token, value); err != nil {
//		fencehttp.WriteError(w, err) // stale: 409 with the tokens
//		return
//	}
//	w.WriteHeader(http.StatusNoContent)
//
// A handler that returns a value can send the token it was written with
// in the same header, with [SetTokenHeader] on w.Header().
//
// # Client side
//
// [SetToken] puts the lock's token on a request; [CheckResponse] turns an
// error response back into an error:
//
//	fencehttp.SetToken(req, lock.Token())
//	resp, err := httpClient.Do(req)
//	if err != nil {
//		return err
//	}
//	defer resp.Body.Close()
//	if err := fencehttp.CheckResponse(resp); err != nil {
//		// errors.Is(err, fencedlock.ErrStaleToken): the lock was lost.
//		// Acquire again, read the resource again, redo the write.
//		return err
//	}
//
// [Do] sends a request and calls CheckResponse for it; a request that
// gets no answer (the server cannot be reached, the connection breaks,
// the request's context ends) returns an error wrapping
// [fencedlock.ErrUnavailable] with the cause, by the context's deadline.
// [CheckResource] refuses a resource name that no store keeps (empty, or
// longer than [fencedlock.MaxResourceLen]) before anything is sent; a
// server calls it on the name a request carries, and WriteError answers
// its error with 400. Error texts quote at most a short prefix of a name.
//
// The zero Token sends no header, which the server refuses as missing.
// After an error, CheckResponse leaves the whole body on resp for the
// caller to read: it puts back what it read. [TokenFromHeader] reads the
// token of a response that carries one.
//
// # Status mapping
//
// WriteError takes the first row that matches its error, and CheckResponse
// maps a problem document of the row's type and status back to an error
// matching the row's sentinel (errors.Is):
//
//	error                              status  problem type      CheckResponse
//	a nil *fencedlock.StaleTokenError  500     about:blank       *StatusError, no sentinel
//	fencedlock.ErrStaleToken           409     StaleTokenType    *fencedlock.StaleTokenError
//	fencedlock.ErrInvalidToken         400     InvalidTokenType  *StatusError, Err ErrInvalidToken
//	fencedlock.ErrNotFound             404     NotFoundType      *StatusError, Err ErrNotFound
//	an error of CheckResource          400     about:blank       *StatusError, no sentinel
//	fencedlock.ErrUnavailable          503     about:blank       *StatusError, Err ErrUnavailable
//	anything else                      500     about:blank       *StatusError, no sentinel
//	nil                                nothing is written
//
// CheckResponse maps every 502, 503 and 504, from WriteError or from a
// proxy, and every error response whose body breaks off, to an error
// matching fencedlock.ErrUnavailable: the backend did not answer. The 503
// problem carries no detail, like a 500.
//
// fencedlock.ErrInvalidArgument is "anything else": it means the server's
// own code misused an API (a nil database, a bad table name, a TTL below
// 1 ms), a bug of the server, not of the request. A nil
// *StaleTokenError in the error's chain is a bug of the handler too.
//
// A 409 stale-token problem without usable tokens (the server's error
// matched ErrStaleToken without a *StaleTokenError in it, or the body was
// damaged), or whose "token" is not the one the request sent, gives a
// *StatusError whose Err wraps ErrStaleToken. The resource and current
// token of a *StaleTokenError are the server's word: check the resource,
// and bound the current token, before passing it to
// [fencedlock.Locker.Advance].
//
// Every other error response, a 409 or a 404 from a proxy or another
// handler among them, and the 400 or 413 a handler writes itself for a
// body it cannot read, is a [*StatusError] that matches no sentinel: only
// a problem document (Content-Type application/problem+json) of one of
// the package's types, with the row's status, is recognised. A 500
// problem carries no detail, so internal error text stays on the server.
// The detail of a 409 problem is the *StaleTokenError's own text, not
// that of the errors wrapping it; the detail of a 400 or 404 problem is
// the error's text, so do not wrap those errors with secrets.
//
// # The stale-token problem
//
//	HTTP/1.1 409 Conflict
//	Content-Type: application/problem+json
//
//	{"type":"https://pkg.go.dev/github.com/fencedlock/fencedlock/fencehttp#StaleTokenType",
//	 "title":"Stale fencing token","status":409,
//	 "detail":"fencedlock: stale fencing token 41 for resource \"order-queue\": store holds 42",
//	 "resource":"order-queue","token":"41","current":"42"}
//
// The type URIs ([StaleTokenType], [InvalidTokenType], [NotFoundType])
// are permanent identifiers that will not change. Tokens are JSON strings:
// they go up to 2^64-1, and many JSON decoders keep numbers as doubles,
// exact only up to 2^53. The resource is a JSON string, so bytes of a
// resource name that are not valid UTF-8 arrive as U+FFFD.
//
// # Concurrency
//
// The functions of this package keep no state and are safe for
// concurrent use, each on its own request, response or writer.
package fencehttp
