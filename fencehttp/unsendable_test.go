package fencehttp_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/fencehttp"
)

// A request that net/http refuses before it connects (the caller's bad
// input) is ErrInvalidArgument, not ErrUnavailable: a retry would fail
// alike, and nothing reached the server.
func TestDoRequestThatCannotBeSentIsInvalid(t *testing.T) {
	var reached int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached++
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	client := srv.Client()
	defer client.CloseIdleConnections()
	ctx := context.Background()

	newReq := func(method, url string) *http.Request {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Method = method // NewRequest refuses a bad method itself
		fencehttp.SetToken(req, 7)
		return req
	}
	newline := newReq(http.MethodPut, srv.URL+"/x")
	newline.Header.Set("X-Resource", "order\nqueue")
	badName := newReq(http.MethodPut, srv.URL+"/x")
	badName.Header["X Resource"] = []string{"x"}
	for name, req := range map[string]*http.Request{
		"unknown scheme":              newReq(http.MethodPut, "htp://example.invalid/x"),
		"no host":                     newReq(http.MethodPut, "http:///x"),
		"invalid method":              newReq("PU T", srv.URL+"/x"),
		"header value with a newline": newline,
		"header name with a space":    badName,
	} {
		_, err := fencehttp.Do(client, req)
		if !errors.Is(err, fencedlock.ErrInvalidArgument) || errors.Is(err, fencedlock.ErrUnavailable) {
			t.Errorf("%s: %v; want ErrInvalidArgument, not ErrUnavailable", name, err)
		}
	}
	if reached != 0 {
		t.Errorf("the server was reached %d times", reached)
	}
	// A server that cannot be reached is still ErrUnavailable.
	down := httptest.NewServer(http.NotFoundHandler())
	addr := down.URL
	down.Close()
	_, err := fencehttp.Do(client, newReq(http.MethodPut, addr+"/x"))
	if !errors.Is(err, fencedlock.ErrUnavailable) || errors.Is(err, fencedlock.ErrInvalidArgument) {
		t.Errorf("a closed server: %v; want ErrUnavailable", err)
	}
}
