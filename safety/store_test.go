package safety

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/fencehttp"
)

// The store under test is served over HTTP by the test process (package
// fencehttp on both sides), and every client, in this process or a child,
// reaches it through a redistest.Proxy, so that the nemesis can hold a
// write in the network and deliver it after its client gave up.

// A ledgerEntry is one Put or Fence as the store applied it.
type ledgerEntry struct {
	Resource string
	Fence    bool // a Fence: it has no Value
	Token    fencedlock.Token
	Value    string
	Accepted bool
	Current  fencedlock.Token // refused as stale: the store's fence
	Err      string           // neither accepted nor refused as stale
	At       int64            // when the store applied it: wall clock, as op.Call
}

// String describes the entry for the checkers' messages: a Put by its
// value, a Fence by its token.
func (e ledgerEntry) String() string {
	if e.Fence {
		return fmt.Sprintf("fence %d", e.Token)
	}
	return fmt.Sprintf("%q (token %d)", e.Value, e.Token)
}

// A ledger is a Store that serializes the Puts, Fences and Gets of its
// inner store under one mutex and records every Put's and Fence's outcome
// in the order the inner store applied them. Its record is the ground
// truth that checker A reads: what the store accepted, in effect order,
// whatever the clients saw. It is safe for concurrent use.
type ledger struct {
	inner fencedlock.Store

	mu      sync.Mutex    // serializes the inner store's calls; guards entries
	entries []ledgerEntry // guarded by mu
}

func (l *ledger) Put(ctx context.Context, resource string, token fencedlock.Token, value []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.inner.Put(ctx, resource, token, value)
	e := ledgerEntry{Resource: resource, Token: token, Value: string(value), At: now()}
	var stale *fencedlock.StaleTokenError
	switch {
	case err == nil:
		e.Accepted = true
	case errors.As(err, &stale):
		e.Current = stale.Current
	default:
		// The inner store failed (a RedisStore's network error): the
		// write may have happened. Nothing else runs on the inner store
		// meanwhile (we hold mu), so reading it back tells.
		v, t, gerr := l.inner.Get(ctx, resource)
		if gerr == nil && t == token && string(v) == string(value) {
			e.Accepted = true
			err = nil
		} else {
			e.Err = err.Error()
		}
	}
	l.entries = append(l.entries, e)
	return err
}

func (l *ledger) Get(ctx context.Context, resource string) ([]byte, fencedlock.Token, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inner.Get(ctx, resource)
}

// Fence raises the inner store's fence and records the outcome. A Fence
// that failed (a RedisStore's network error) may have been applied, and
// the Store interface has no read of the fence to tell: it is recorded
// with its error, and checker A lets it have landed or not.
func (l *ledger) Fence(ctx context.Context, resource string, token fencedlock.Token) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.inner.Fence(ctx, resource, token)
	e := ledgerEntry{Resource: resource, Fence: true, Token: token, At: now()}
	var stale *fencedlock.StaleTokenError
	switch {
	case err == nil:
		e.Accepted = true
	case errors.As(err, &stale):
		e.Current = stale.Current
	default:
		e.Err = err.Error()
	}
	l.entries = append(l.entries, e)
	return err
}

func (l *ledger) snapshot() []ledgerEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]ledgerEntry(nil), l.entries...)
}

// unfencedStore is the negative control's store: it accepts every Put,
// whatever its token, and keeps the last; a Fence is accepted and changes
// nothing. It is what a store without the fence does, and the suite must
// catch it. It is safe for concurrent use.
type unfencedStore struct {
	mu   sync.Mutex
	data map[string]unfencedEntry // guarded by mu
}

type unfencedEntry struct {
	value []byte
	token fencedlock.Token
}

func (s *unfencedStore) Put(_ context.Context, resource string, token fencedlock.Token, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.data == nil {
		s.data = map[string]unfencedEntry{}
	}
	s.data[resource] = unfencedEntry{value: append([]byte(nil), value...), token: token}
	return nil
}

// Fence accepts every token and keeps nothing, as a store without a fence
// would: a later Put with a lower token is accepted all the same.
func (s *unfencedStore) Fence(context.Context, string, fencedlock.Token) error { return nil }

func (s *unfencedStore) Get(_ context.Context, resource string) ([]byte, fencedlock.Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.data[resource]
	if !ok {
		return nil, 0, fmt.Errorf("%w: %q", fencedlock.ErrNotFound, resource)
	}
	return append([]byte(nil), e.value...), e.token, nil
}

// storeHandler serves a Store over HTTP: PUT /v/<resource> with the
// Fencing-Token header and the value as the body, GET /v/<resource>
// answering the value with its token in the header, and POST
// /fence/<resource> with the Fencing-Token header, which raises the fence
// (Store.Fence) and answers 204. Errors are answered by
// fencehttp.WriteError: a stale token with 409 and the store's fence.
type storeHandler struct{ store fencedlock.Store }

// storeCallTimeout bounds the handler's call of the store.
const storeCallTimeout = 5 * time.Second

func (h storeHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	resource, ok := strings.CutPrefix(r.URL.Path, "/v/")
	fence := false
	if !ok {
		resource, fence = strings.CutPrefix(r.URL.Path, "/fence/")
	}
	if resource == "" || !ok && !fence {
		http.NotFound(w, r)
		return
	}
	// The store call does not end with the request's context. A request
	// that reached the server is applied even when its client has gone
	// (the server cancels r.Context() when the client closes the
	// connection), as a database applies a request that arrived: that is
	// how a write delayed in the network lands after its client gave up,
	// and the fence must refuse it then.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), storeCallTimeout)
	defer cancel()
	if fence {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		token, err := fencehttp.TokenFrom(r)
		if err == nil {
			err = h.store.Fence(ctx, resource, token)
		}
		if err != nil {
			fencehttp.WriteError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	switch r.Method {
	case http.MethodPut:
		token, err := fencehttp.TokenFrom(r)
		if err != nil {
			fencehttp.WriteError(w, err)
			return
		}
		value, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, "unreadable or too large body", http.StatusBadRequest)
			return
		}
		if err := h.store.Put(ctx, resource, token, value); err != nil {
			fencehttp.WriteError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case http.MethodGet:
		value, token, err := h.store.Get(ctx, resource)
		if err != nil {
			fencehttp.WriteError(w, err)
			return
		}
		fencehttp.SetTokenHeader(w.Header(), token)
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(value)
	default:
		w.Header().Set("Allow", "GET, PUT")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

// startStoreServer serves store over HTTP on a loopback port, closed when
// t ends (and earlier by the scenario, which waits for the requests in
// flight before it reads the ledger).
func startStoreServer(t *testing.T, store fencedlock.Store) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(storeHandler{store: store})
	t.Cleanup(srv.Close)
	return srv
}

// httpStore is the clients' side: a fencedlock.Store that reaches the
// store server over HTTP, with SetToken on every write and fence and
// CheckResponse turning a 409 back into a *fencedlock.StaleTokenError.
// fencedlock.Update on it takes three requests: Fence, Get and Put.
type httpStore struct {
	base   string // "http://<proxy address>"
	client *http.Client
}

// storeHTTPTimeout bounds each request of a client to the store. It is
// shorter than the nemesis's late-write hold: the held write's client
// gives up first, and the write lands later.
const storeHTTPTimeout = 400 * time.Millisecond

func newHTTPStore(addr string) *httpStore {
	dialer := &net.Dialer{Timeout: storeHTTPTimeout}
	return &httpStore{
		base: "http://" + addr,
		client: &http.Client{
			Timeout: storeHTTPTimeout,
			Transport: &http.Transport{
				DialContext:         dialer.DialContext,
				MaxIdleConnsPerHost: 4,
				IdleConnTimeout:     5 * time.Second,
			},
		},
	}
}

// close closes the idle connections; call it when the client is done.
func (s *httpStore) close() { s.client.CloseIdleConnections() }

func (s *httpStore) url(resource string) string {
	return s.base + "/v/" + url.PathEscape(resource)
}

func (s *httpStore) Put(ctx context.Context, resource string, token fencedlock.Token, value []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, s.url(resource), bytes.NewReader(value))
	if err != nil {
		return err
	}
	return s.send(req, token)
}

// Fence asks the server to raise resource's fence to token: POST
// /fence/<resource>.
func (s *httpStore) Fence(ctx context.Context, resource string, token fencedlock.Token) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/fence/"+url.PathEscape(resource), nil)
	if err != nil {
		return err
	}
	return s.send(req, token)
}

// send sends a request of a Put or a Fence with token, and returns nil
// for a 2xx answer, else the error of CheckResponse.
func (s *httpStore) send(req *http.Request, token fencedlock.Token) error {
	fencehttp.SetToken(req, token)
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := fencehttp.CheckResponse(resp); err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}

func (s *httpStore) Get(ctx context.Context, resource string) ([]byte, fencedlock.Token, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url(resource), nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	if err := fencehttp.CheckResponse(resp); err != nil {
		return nil, 0, err // a 404 problem matches fencedlock.ErrNotFound
	}
	value, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, 0, err
	}
	token, err := fencehttp.TokenFromHeader(resp.Header)
	if err != nil {
		return nil, 0, err
	}
	return value, token, nil
}
