package fencehttp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/fencehttp"
)

// A service fences the writes of remote clients, and the reads they
// write back; a client whose lock expired gets 409 Conflict, on a write
// as on a read, and, from CheckResponse, the same *StaleTokenError the
// store returned on the server.
func Example() {
	// The server: GET /queue raises the fence with the request's token,
	// then reads; PUT /queue stores the body with the request's token.
	store := fencedlock.NewMemoryStore()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, err := fencehttp.TokenFrom(r) // missing or malformed: 400
		if err != nil {
			fencehttp.WriteError(w, err)
			return
		}
		switch r.Method {
		case http.MethodGet:
			if err := store.Fence(r.Context(), "order-queue", token); err != nil {
				fencehttp.WriteError(w, err) // stale: 409 with both tokens
				return
			}
			value, written, err := store.Get(r.Context(), "order-queue")
			if err != nil {
				fencehttp.WriteError(w, err) // nothing written yet: 404
				return
			}
			fencehttp.SetTokenHeader(w.Header(), written)
			_, _ = w.Write(value)
		case http.MethodPut:
			// The client's other input errors are the handler's to answer.
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
			if err != nil {
				http.Error(w, "unreadable or too large body", http.StatusBadRequest)
				return
			}
			if err := store.Put(r.Context(), "order-queue", token, body); err != nil {
				fencehttp.WriteError(w, err) // stale: 409 with both tokens
				return
			}
			w.WriteHeader(http.StatusNoContent)
		default:
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		}
	}))
	defer srv.Close()

	// The client: every read it writes back, and every write, carries
	// the lock's token.
	call := func(method string, token fencedlock.Token, value string) (string, error) {
		req, err := http.NewRequestWithContext(context.Background(), method, srv.URL+"/queue", strings.NewReader(value))
		if err != nil {
			return "", err
		}
		fencehttp.SetToken(req, token)
		resp, err := srv.Client().Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		if err := fencehttp.CheckResponse(resp); err != nil {
			return "", err
		}
		body, err := io.ReadAll(resp.Body)
		return string(body), err
	}

	// A writes with token 41, and pauses; its lock expires, and B, with
	// token 42, reads.
	_, err := call(http.MethodPut, 41, "[1001]")
	fmt.Println("A writes [1001] with token 41:", err)
	value, err := call(http.MethodGet, 42, "")
	fmt.Println("B reads with token 42:", value, err)

	// A wakes, and writes between B's read and B's write: B's read raised
	// the fence to 42, so A's write is refused.
	_, err = call(http.MethodPut, 41, "[1001,1002]")
	fmt.Println("A writes with token 41:", err)
	fmt.Println("stale:", errors.Is(err, fencedlock.ErrStaleToken))
	var stale *fencedlock.StaleTokenError
	if errors.As(err, &stale) {
		fmt.Printf("resource %q, rejected %v, current %v\n", stale.Resource, stale.Token, stale.Current)
	}
	// A read with A's token is refused the same way.
	_, err = call(http.MethodGet, 41, "")
	fmt.Println("A reads with token 41, stale:", errors.Is(err, fencedlock.ErrStaleToken))

	_, err = call(http.MethodPut, 42, "[1001,1003]")
	fmt.Println("B writes [1001,1003] with token 42:", err)
	stored, token, err := store.Get(context.Background(), "order-queue")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("the store holds %s, written with token %v\n", stored, token)
	// Output:
	// A writes [1001] with token 41: <nil>
	// B reads with token 42: [1001] <nil>
	// A writes with token 41: fencedlock: stale fencing token 41 for resource "order-queue": store holds 42
	// stale: true
	// resource "order-queue", rejected 41, current 42
	// A reads with token 41, stale: true
	// B writes [1001,1003] with token 42: <nil>
	// the store holds [1001,1003], written with token 42
}

// A request without a Fencing-Token header is refused with 400 Bad
// Request; the client sees an error matching fencedlock.ErrInvalidToken.
func ExampleTokenFrom() {
	req := httptest.NewRequest(http.MethodPut, "/queue", nil)
	_, err := fencehttp.TokenFrom(req)
	fmt.Println(err)

	rec := httptest.NewRecorder()
	fencehttp.WriteError(rec, err)
	resp := rec.Result()
	defer resp.Body.Close()
	fmt.Println(resp.StatusCode, resp.Header.Get("Content-Type"))

	err = fencehttp.CheckResponse(resp)
	fmt.Println("invalid token:", errors.Is(err, fencedlock.ErrInvalidToken))
	// Output:
	// fencehttp: Fencing-Token header: fencedlock: invalid token: missing
	// 400 application/problem+json
	// invalid token: true
}

// SetToken writes the token in decimal; the zero Token removes the header.
func ExampleSetToken() {
	req := httptest.NewRequest(http.MethodPut, "/queue", nil)
	fencehttp.SetToken(req, 18446744073709551615) // 2^64-1
	fmt.Printf("%s: %s\n", fencehttp.Header, req.Header.Get(fencehttp.Header))

	token, err := fencehttp.TokenFrom(req)
	fmt.Println(token, err)

	fencehttp.SetToken(req, 0)
	fmt.Println(len(req.Header.Values(fencehttp.Header)), "values")
	// Output:
	// Fencing-Token: 18446744073709551615
	// 18446744073709551615 <nil>
	// 0 values
}

// What is not a stale-token problem of this package is no
// *StaleTokenError: here a 409 from another handler, in plain text.
func ExampleCheckResponse() {
	resp := &http.Response{
		StatusCode: http.StatusConflict,
		Header:     http.Header{"Content-Type": {"text/plain; charset=utf-8"}},
		Body:       io.NopCloser(bytes.NewReader([]byte("username already taken\n"))),
	}
	err := fencehttp.CheckResponse(resp)
	fmt.Println(err)
	fmt.Println("stale:", errors.Is(err, fencedlock.ErrStaleToken))
	var statusErr *fencehttp.StatusError
	if errors.As(err, &statusErr) {
		fmt.Println("status:", statusErr.StatusCode)
	}

	// CheckResponse put back what it read: the body is whole.
	body, err := io.ReadAll(resp.Body)
	fmt.Printf("body: %q, %v\n", body, err)
	// Output:
	// fencehttp: response status 409 Conflict: body "username already taken\n" (Content-Type "text/plain; charset=utf-8")
	// stale: false
	// status: 409
	// body: "username already taken\n", <nil>
}

// Do sends a write and returns the error that the response, or its
// absence, means: a stale token, or a server that cannot be reached.
func ExampleDo() {
	store := fencedlock.NewMemoryStore()
	if err := store.Put(context.Background(), "order-queue", 42, []byte("[1001,1003]")); err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, err := fencehttp.TokenFrom(r)
		if err != nil {
			fencehttp.WriteError(w, err)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, "unreadable or too large body", http.StatusBadRequest)
			return
		}
		if err := store.Put(r.Context(), "order-queue", token, body); err != nil {
			fencehttp.WriteError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	url := srv.URL + "/queue"

	put := func(token fencedlock.Token, value string) error {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPut, url, strings.NewReader(value))
		if err != nil {
			return err
		}
		fencehttp.SetToken(req, token)
		resp, err := fencehttp.Do(srv.Client(), req)
		if err != nil {
			return err // resp is nil and its body closed
		}
		return resp.Body.Close()
	}

	fmt.Println("token 43:", put(43, "[1001,1004]"))
	err := put(41, "[1001,1002]")
	fmt.Println("token 41 stale:", errors.Is(err, fencedlock.ErrStaleToken))

	srv.Close() // the service goes away
	err = put(44, "[1001,1005]")
	fmt.Println("server gone, unavailable:", errors.Is(err, fencedlock.ErrUnavailable))
	// Output:
	// token 43: <nil>
	// token 41 stale: true
	// server gone, unavailable: true
}
