package fencehttp_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/fencehttp"
)

// A fenced PUT answered with a 301 or 302 (a moved path, a proxy's
// redirect to https) is not followed as a GET without its body: Do must
// not report the answer to that read as the write's success.
func TestDoDoesNotTurnAWriteIntoARead(t *testing.T) {
	for _, code := range []int{http.StatusMovedPermanently, http.StatusFound} {
		t.Run(http.StatusText(code), func(t *testing.T) { redirectedWrite(t, code) })
	}
}

func redirectedWrite(t *testing.T, code int) {
	ctx := context.Background()
	store := fencedlock.NewMemoryStore()
	if err := store.Put(ctx, "q", 5, []byte("old")); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/old", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/new", code)
	})
	mux.HandleFunc("/new", func(w http.ResponseWriter, r *http.Request) {
		token, err := fencehttp.TokenFrom(r)
		if err != nil {
			fencehttp.WriteError(w, err)
			return
		}
		switch r.Method {
		case http.MethodPut:
			body, _ := io.ReadAll(r.Body)
			if err := store.Put(r.Context(), "q", token, body); err != nil {
				fencehttp.WriteError(w, err)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		case http.MethodGet: // a fenced read, as doc.go shows it
			if err := store.Fence(r.Context(), "q", token); err != nil {
				fencehttp.WriteError(w, err)
				return
			}
			value, written, err := store.Get(r.Context(), "q")
			if err != nil {
				fencehttp.WriteError(w, err)
				return
			}
			fencehttp.SetTokenHeader(w.Header(), written)
			_, _ = w.Write(value)
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	client := srv.Client()
	defer client.CloseIdleConnections()

	req, err := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL+"/old", bytes.NewReader([]byte("new value")))
	if err != nil {
		t.Fatal(err)
	}
	fencehttp.SetToken(req, 6)
	resp, err := fencehttp.Do(client, req)
	if err == nil {
		defer resp.Body.Close()
	}
	value, _, _ := store.Get(ctx, "q")
	var serr *fencehttp.StatusError
	if err != nil && (!errors.As(err, &serr) || serr.StatusCode != code) {
		t.Fatalf("Do: %v, want a *StatusError with status %d", err, code)
	}
	if err == nil && string(value) != "new value" {
		t.Fatalf("Do reported the PUT as a success (status %d, method of the request answered %s), but the store still holds %q: the write was turned into a read", resp.StatusCode, resp.Request.Method, value)
	}
}

// A read is redirected as net/http redirects it, whether its Method is
// GET or "" (which net/http takes for GET); a write answered with a 307,
// which keeps the method and the body, is followed too.
func TestDoFollowsRedirectsThatKeepTheMethod(t *testing.T) {
	var put []byte
	mux := http.NewServeMux()
	mux.HandleFunc("/old", func(w http.ResponseWriter, r *http.Request) {
		code := http.StatusFound
		if r.Method == http.MethodPut {
			code = http.StatusTemporaryRedirect
		}
		http.Redirect(w, r, "/new", code)
	})
	mux.HandleFunc("/new", func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			put, _ = io.ReadAll(r.Body)
		}
		_, _ = w.Write([]byte("ok"))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	client := srv.Client()
	defer client.CloseIdleConnections()
	for _, method := range []string{http.MethodGet, "", http.MethodPut} {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPut, srv.URL+"/old", bytes.NewReader([]byte("v")))
		if err != nil {
			t.Fatal(err)
		}
		req.Method = method
		fencehttp.SetToken(req, 6)
		resp, err := fencehttp.Do(client, req)
		if err != nil {
			t.Fatalf("method %q: %v", method, err)
		}
		resp.Body.Close()
	}
	if string(put) != "v" {
		t.Fatalf("the PUT redirected by a 307 arrived with %q", put)
	}
}
