package fencehttp

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"unicode/utf8"

	"github.com/fencedlock/fencedlock"
)

// Do sends req with client (http.DefaultClient when nil) and returns its
// response when the status is 2xx; the caller reads and closes its body.
// For any other status it returns a nil response and the error of
// CheckResponse, having closed the body.
//
// A request that gets no response (the server cannot be reached, the
// connection breaks, req's context ends or the client's Timeout passes)
// returns an error wrapping [fencedlock.ErrUnavailable] and the cause: the
// client's *url.Error, which wraps the net error or the context's error;
// when req's context has ended, the error wraps its Err too. A 502, 503
// or 504 status returns a *StatusError that matches ErrUnavailable too
// (see CheckResponse). So a caller handles "the backend is down" alike
// for a store over HTTP and one in process.
//
// Do returns by the deadline of req's context, as http.Client does, also
// while it reads an error response's body (an error whose body breaks
// off matches ErrUnavailable too). A nil req returns an error
// wrapping [fencedlock.ErrInvalidArgument], with nothing sent. Do does not
// check resource names: call CheckResource before building the request.
func Do(client *http.Client, req *http.Request) (*http.Response, error) {
	if req == nil {
		return nil, fmt.Errorf("fencehttp: %w: nil *http.Request", fencedlock.ErrInvalidArgument)
	}
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, unavailable(req, err)
	}
	if err := CheckResponse(resp); err != nil {
		// CheckResponse read at most MaxErrorBody+1 bytes; the rest of
		// the body is dropped with the connection.
		resp.Body.Close()
		return nil, err
	}
	return resp, nil
}

// unavailable wraps err, the failure of req's round trip, with
// [fencedlock.ErrUnavailable], and with req's context error when the
// context has ended and err does not wrap it. The URL of a *url.Error is
// cut short: it may hold a long resource name.
func unavailable(req *http.Request, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) && len(ue.URL) > maxURL {
		err = &url.Error{Op: ue.Op, URL: shortURL(ue.URL), Err: ue.Err}
	}
	if cerr := req.Context().Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("fencehttp: %w: %w (%w)", fencedlock.ErrUnavailable, err, cerr)
	}
	return fmt.Errorf("fencehttp: %w: %w", fencedlock.ErrUnavailable, err)
}

// maxURL is how much of a URL the errors of Do show.
const maxURL = 128

// shortURL returns the first maxURL bytes of u, cut at a character
// boundary, and how long it was.
func shortURL(u string) string {
	n := maxURL
	for n > 0 && !utf8.RuneStart(u[n]) {
		n--
	}
	return u[:n] + "... (" + strconv.Itoa(len(u)) + " bytes)"
}
