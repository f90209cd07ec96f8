// Package fencehttp carries fencing tokens over HTTP, for a service that
// keeps a fenced resource and the remote clients that write to it while
// holding a fencedlock lock.
//
// The client sends its lock's token in the Fencing-Token [Header] with
// every write, and with every read whose result it will write back; the
// service checks it with a [fencedlock.Store] (Put for a write, Fence
// before a read) and answers a stale token with 409 Conflict and a
// problem document (RFC 9457) holding the resource, the rejected token
// and the current one, which the client turns back into a
// [*fencedlock.StaleTokenError]. So errors.Is(err,
// fencedlock.ErrStaleToken) and errors.As(err, &staleErr) work across the
// wire as they do in one process.
//
// # Server side
//
// [TokenFrom] reads the token of a request; [WriteError] answers an error,
// its own or the store's. A write handler puts the body with the token,
// and answers the client's other input errors itself:
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
// A read is fenced too when the client will write back what it reads:
// otherwise an older holder's write can land between the client's read
// and its write, be accepted, and be overwritten by it. The handler
// raises the fence with the request's token before it reads, so a stale
// read answers 409 like a stale write, and sends the token that wrote
// the value in the same header, with [SetTokenHeader] on w.Header():
//
//	token, err := fencehttp.TokenFrom(r) // missing or malformed: 400
//	if err != nil {
//		fencehttp.WriteError(w, err)
//		return
//	}
//	if err := store.Fence(r.Context(), "order-queue", token); err != nil {
//		fencehttp.WriteError(w, err) // stale: 409 with the tokens
//		return
//	}
//	value, written, err := store.Get(r.Context(), "order-queue")
//	if err != nil {
//		fencehttp.WriteError(w, err) // nothing written yet: 404
//		return
//	}
//	fencehttp.SetTokenHeader(w.Header(), written)
//	_, _ = w.Write(value)
//
// A read only for display, never written back, needs neither the token
// nor the fence. [CheckResource] checks a resource name that a request
// carries; WriteError answers its error with 400.
//
// # Client side
//
// [SetToken] puts the lock's token on a request, the GET of a value the
// client will write back as well as the PUT; [Do] sends it and turns an
// error response back into an error ([CheckResponse] does that for a
// response from any other client):
//
//	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
//	if err != nil {
//		return err
//	}
//	fencehttp.SetToken(req, lock.Token()) // the service fences the read
//	resp, err := fencehttp.Do(httpClient, req)
//	if err != nil {
//		return err // see Errors; a stale read is ErrStaleToken too
//	}
//	defer resp.Body.Close()
//
// [TokenFromHeader] reads the token of a response that carries one.
//
// # Errors
//
// What a client gets back, and what to do:
//
//   - [fencedlock.ErrStaleToken], as a [*fencedlock.StaleTokenError] (or a
//     [*StatusError] when the server sent no usable tokens), on a write
//     or a fenced read: a newer holder has written or fenced its read,
//     so the lock was lost. Acquire again, read the resource again, redo
//     the write. Its Resource and Current are
//     the server's word: check the resource, and bound the current token,
//     before passing it to [fencedlock.Locker.Advance].
//   - [fencedlock.ErrUnavailable]: no answer (the server cannot be
//     reached, the connection broke, the context ended), or a 502, 503 or
//     504 status. The write may or may not have happened; retry later.
//   - The cause with which the request's context ended, when it ended
//     with one ([context.Cause] is not just its Err; Locker.Do cancels
//     its function's context with one matching [fencedlock.ErrLockLost]):
//     the error wraps it and the context's Err, and does not match
//     ErrUnavailable. The write may or may not have happened, as with
//     ErrUnavailable, but the caller stopped it: act on the cause.
//   - [fencedlock.ErrInvalidToken]: the request carried no valid token.
//   - [fencedlock.ErrNotFound]: the resource holds no value.
//   - [fencedlock.ErrInvalidArgument]: a nil request, or a resource name
//     that [CheckResource] refused; nothing was sent.
//   - Every other error response gives a [*StatusError] that matches none
//     of them.
//
// WriteError takes the first row that matches its error, and CheckResponse
// maps a problem document of the row's type and status back to the row's
// error:
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
// fencedlock.ErrInvalidArgument from the server's own code is "anything
// else": a bug of the server, not of the request. A 500 or 503 problem
// carries no detail, so internal error text stays on the server. The
// exact rules are those of WriteError and CheckResponse; see
// https://github.com/fencedlock/fencedlock/blob/main/docs/errors.md for
// the errors of the whole library.
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
// are permanent identifiers that will not change. Tokens are JSON strings
// (they go up to 2^64-1, and many JSON decoders keep numbers as doubles).
//
// # Concurrency
//
// The functions of this package keep no state and are safe for
// concurrent use, each on its own request, response or writer.
package fencehttp
