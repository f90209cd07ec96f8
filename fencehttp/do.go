package fencehttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
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
// When req's context ended with a cause ([context.Cause] is not just its
// Err: a CancelCauseFunc's argument, as when Locker.Do cancels its
// function's context on losing the lock, or WithDeadlineCause's cause),
// the error of a request it stopped wraps that cause, the context's Err
// and the client's error, and does not match ErrUnavailable: the caller
// stopped the request, the server did not fail.
//
// Do returns by the deadline of req's context, as http.Client does, also
// while it reads an error response's body (an error whose body breaks
// off matches ErrUnavailable too). A nil req, or one that net/http
// refuses before it connects (a URL of a scheme it has no transport for or
// without a host, an invalid method, a header value with a newline),
// returns an error wrapping [fencedlock.ErrInvalidArgument], with nothing
// sent: a retry would fail alike. Do does not
// check resource names: call CheckResource before building the request.
//
// A request other than GET or HEAD does not follow a redirect that would
// change its method (a 301, 302 or 303 answering a PUT): net/http would
// send it again as a GET without its body, and the server's answer to
// that would pass for the write's. Do returns the redirect's error from
// CheckResponse instead. A 307 or 308 is followed as client follows it.
func Do(client *http.Client, req *http.Request) (*http.Response, error) {
	if req == nil {
		return nil, fmt.Errorf("fencehttp: %w: nil *http.Request", fencedlock.ErrInvalidArgument)
	}
	if client == nil {
		client = http.DefaultClient
	}
	if m := req.Method; m != "" && m != http.MethodGet && m != http.MethodHead { // "" is GET
		client = keepingMethod(client)
	}
	resp, err := client.Do(req)
	if err != nil {
		if unsendable(err) {
			return nil, fmt.Errorf("fencehttp: %w: the request cannot be sent: %w", fencedlock.ErrInvalidArgument, err)
		}
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

// unsendable reports whether err, client.Do's, is net/http's refusal of a
// request it could never send, found before it connects: a URL without a
// host or of a scheme it has no transport for, an invalid method, header
// name or value. net/http gives these as plain errors, known by their
// text alone.
func unsendable(err error) bool {
	var ue *url.Error
	if !errors.As(err, &ue) || ue.Err == nil {
		return false
	}
	msg := ue.Err.Error()
	for _, refusal := range unsendableErrors {
		if strings.HasPrefix(msg, refusal) {
			return true
		}
	}
	return false
}

// unsendableErrors begin the texts of net/http's errors for requests it
// cannot send (see unsendable).
var unsendableErrors = []string{
	"unsupported protocol scheme",
	"http: no Host in request URL",
	"http: nil Request.URL",
	"net/http: invalid method",
	"net/http: invalid header field name",
	"net/http: invalid header field value",
	"net/http: invalid trailer field name",
	"net/http: invalid trailer field value",
}

// keepingMethod returns a copy of client that does not follow a redirect
// that would change the request's method: net/http sends a PUT or POST
// answered with 301, 302 or 303 again as a GET without its body, and the
// fenced read the server then answers would pass for the write's success.
// Do then gets the redirect itself, and CheckResponse's error. A 307 or
// 308, which keep the method and the body, is followed as client would
// (under its CheckRedirect, if it has one).
func keepingMethod(client *http.Client) *http.Client {
	c := *client
	check := client.CheckRedirect
	c.CheckRedirect = func(r *http.Request, via []*http.Request) error {
		if r.Method != via[0].Method {
			return http.ErrUseLastResponse
		}
		if check != nil {
			return check(r, via)
		}
		if len(via) >= 10 { // net/http's own limit
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	return &c
}

// unavailable wraps err, the failure of req's round trip, with
// [fencedlock.ErrUnavailable], and with req's context error when the
// context has ended and err does not wrap it; or, when the context ended
// with a cause, returns the error of stoppedBy. The URL of a *url.Error
// is cut short: it may hold a long resource name.
func unavailable(req *http.Request, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) && len(ue.URL) > maxURL {
		err = &url.Error{Op: ue.Op, URL: shortURL(ue.URL), Err: ue.Err}
	}
	if stopped := stoppedBy(req.Context(), err); stopped != nil {
		return fmt.Errorf("fencehttp: %w", stopped)
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

// cause returns the cause with which ctx ended, when it ended with one
// that is not just its own error, and nil when ctx has not ended or
// ended plainly.
func cause(ctx context.Context) error {
	cerr := ctx.Err()
	if cerr == nil {
		return nil
	}
	if c := context.Cause(ctx); c != nil && c != cerr {
		return c
	}
	return nil
}

// stoppedBy returns the error of a call that failed with err when ctx
// had ended with a cause: it wraps the cause, ctx.Err() and err, and
// not fencedlock.ErrUnavailable. It returns nil when ctx has not ended,
// or ended plainly. (net/http's errors wrap the cause from Go 1.22 on,
// ctx.Err() before: it adds what err lacks.)
func stoppedBy(ctx context.Context, err error) error {
	c := cause(ctx)
	if c == nil {
		return nil
	}
	cerr := ctx.Err()
	format, args := "the request's context ended", []any{}
	if !errors.Is(err, c) {
		format, args = format+": %w", append(args, c)
	}
	if !errors.Is(err, cerr) && !errors.Is(c, cerr) {
		format, args = format+" (%w)", append(args, cerr)
	}
	return fmt.Errorf(format+": %w", append(args, err)...)
}
