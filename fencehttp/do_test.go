package fencehttp_test

import (
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

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/fencehttp"
)

// stallBudget is how long past its deadline a call may take.
const stallBudget = 50 * time.Millisecond

// expectUnavailable checks that err wraps ErrUnavailable and no other
// sentinel of package fencedlock.
func expectUnavailable(t *testing.T, err error) {
	t.Helper()
	for _, s := range sentinels {
		assert.Equal(t, s == fencedlock.ErrUnavailable, errors.Is(err, s), "errors.Is(%v, %v)", err, s)
	}
}

// newRequest returns a PUT of value with token 5 to url.
func newRequest(t *testing.T, ctx context.Context, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, strings.NewReader("v"))
	require.NoError(t, err)
	fencehttp.SetToken(req, 5)
	return req
}

func TestDo(t *testing.T) {
	base, client := startService(t, &service{store: fencedlock.NewMemoryStore()})
	resp, err := fencehttp.Do(client, newRequest(t, context.Background(), base+"/?resource=r"))
	require.NoError(t, err)
	assert.Equal(t, http.StatusNoContent, resp.StatusCode)
	resp.Body.Close()

	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, base+"/?resource=r", nil)
	require.NoError(t, err)
	resp, err = fencehttp.Do(client, req)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, "v", string(b), "the body is the caller's to read")

	req, err = http.NewRequestWithContext(context.Background(), http.MethodGet, base+"/?resource=missing", nil)
	require.NoError(t, err)
	resp, err = fencehttp.Do(client, req)
	assert.Nil(t, resp)
	assert.True(t, errors.Is(err, fencedlock.ErrNotFound), "%v", err)
	assert.False(t, errors.Is(err, fencedlock.ErrUnavailable), "%v", err)

	resp, err = fencehttp.Do(client, nil)
	assert.Nil(t, resp)
	assert.True(t, errors.Is(err, fencedlock.ErrInvalidArgument), "%v", err)
}

// A server whose store is unavailable answers 503, and the client's error
// matches ErrUnavailable, with no text of the server's.
func TestDoStoreUnavailable(t *testing.T) {
	down := errors.Join(fencedlock.ErrUnavailable, errors.New("dial tcp 10.0.0.7:5432: connect: connection refused"))
	base, client := startService(t, &service{fail: down})
	resp, err := fencehttp.Do(client, newRequest(t, context.Background(), base+"/?resource=r"))
	assert.Nil(t, resp)
	var statusErr *fencehttp.StatusError
	require.True(t, errors.As(err, &statusErr), "%T %v", err, err)
	assert.Equal(t, http.StatusServiceUnavailable, statusErr.StatusCode)
	assert.Equal(t, fencehttp.ProblemContentType, statusErr.ContentType)
	expectUnavailable(t, err)
	assert.NotContains(t, err.Error(), "10.0.0.7")
	assert.NotContains(t, string(statusErr.Body), "10.0.0.7")
}

// A closed port: an error wrapping ErrUnavailable and the net error.
func TestDoUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	resp, err := fencehttp.Do(&http.Client{Transport: transport}, newRequest(t, context.Background(), "http://"+addr+"/?resource=r"))
	assert.Nil(t, resp)
	t.Logf("Do to a closed port: %v", err)
	expectUnavailable(t, err)
	var opErr *net.OpError
	assert.True(t, errors.As(err, &opErr), "the cause is kept: %v", err)

	// The URL in the message is cut short: it may hold a long name.
	long := strings.Repeat("n", fencedlock.MaxResourceLen)
	_, err = fencehttp.Do(&http.Client{Transport: transport}, newRequest(t, context.Background(), "http://"+addr+"/?resource="+long))
	expectUnavailable(t, err)
	assert.True(t, errors.As(err, &opErr), "the cause is kept: %v", err)
	var urlErr *url.Error
	assert.True(t, errors.As(err, &urlErr), "the *url.Error is kept: %v", err)
	assert.Less(t, len(err.Error()), 300, "a short message: %v", err)
}

// stalled starts a listener that accepts connections, reads, and never
// answers, and a server that answers 503 (or 200 with ?status=200),
// sends part of the body, then stalls until the test ends (or, with
// ?stall=headers, stalls before the headers). It returns the cases of
// a stalled request, by name, their URLs, and a client for them;
// everything is closed when the test ends.
func stalled(t *testing.T) (cases []struct{ name, url string }, srvURL string, client *http.Client) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() { defer wg.Done(); _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})

	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status := http.StatusServiceUnavailable
		if r.URL.Query().Get("status") == "200" {
			status = http.StatusOK
		}
		if r.URL.Query().Get("stall") == "headers" {
			<-release
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(status)
		_, _ = w.Write([]byte("partial"))
		w.(http.Flusher).Flush()
		<-release
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // before srv.Close, which waits for the handlers

	transport := &http.Transport{}
	t.Cleanup(transport.CloseIdleConnections)
	cases = []struct{ name, url string }{
		{"server never answers", "http://" + ln.Addr().String() + "/?resource=r"},
		{"handler stalls before the headers", srv.URL + "/?resource=r&stall=headers"},
		{"503 whose body stalls", srv.URL + "/?resource=r"},
	}
	return cases, srv.URL, &http.Client{Transport: transport}
}

// A server that stalls, before it answers or in the middle of an error
// body: Do returns by its deadline, with ErrUnavailable and
// context.DeadlineExceeded.
func TestDoStalled(t *testing.T) {
	const timeout = 300 * time.Millisecond
	cases, srvURL, client := stalled(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			start := time.Now()
			resp, err := fencehttp.Do(client, newRequest(t, ctx, c.url))
			took := time.Since(start)
			t.Logf("Do: %v after %v", err, took.Round(time.Millisecond))
			assert.Nil(t, resp)
			assert.LessOrEqual(t, took, timeout+stallBudget, "returns by the deadline")
			expectUnavailable(t, err)
			assert.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
		})
	}

	// A 200 whose body stalls is the caller's to read: the read ends
	// with the deadline.
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	resp, err := fencehttp.Do(client, newRequest(t, ctx, srvURL+"/?resource=r&status=200"))
	require.NoError(t, err)
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.LessOrEqual(t, time.Since(start), timeout+stallBudget)
	assert.Error(t, err)
}

// errCause is the cause with which the tests cancel contexts: the
// Locker's own, when a lock is lost under Locker.Do.
var errCause = fmt.Errorf("the term ended: %w", fencedlock.ErrLockLost)

// expectCause checks that err wraps errCause and context.Canceled, and
// none of the sentinels of package fencedlock but ErrLockLost,
// errCause's own.
func expectCause(t *testing.T, err error) {
	t.Helper()
	assert.True(t, errors.Is(err, errCause), "the cause is kept: %v", err)
	assert.True(t, errors.Is(err, context.Canceled), "ctx's error is kept: %v", err)
	for _, s := range sentinels {
		assert.False(t, errors.Is(err, s), "errors.Is(%v, %v)", err, s)
	}
}

// A request whose context is cancelled with a cause, before Do or while
// the server stalls (in the middle of an error body too), fails with an
// error wrapping the cause and context.Canceled, not ErrUnavailable: the
// caller stopped it, the server did not fail. A plain cancel gives
// ErrUnavailable and context.Canceled, as a deadline does.
func TestDoStoppedWithCause(t *testing.T) {
	const after = 200 * time.Millisecond
	cases, _, client := stalled(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, cause := range []error{errCause, nil} {
				ctx, cancel := context.WithCancelCause(context.Background())
				timer := time.AfterFunc(after, func() { cancel(cause) })
				start := time.Now()
				resp, err := fencehttp.Do(client, newRequest(t, ctx, c.url))
				took := time.Since(start)
				timer.Stop()
				cancel(nil)
				t.Logf("Do cancelled with cause %v: %v after %v", cause, err, took.Round(time.Millisecond))
				assert.Nil(t, resp)
				assert.LessOrEqual(t, took, after+stallBudget, "returns when ctx ends")
				if cause == nil {
					expectUnavailable(t, err)
					assert.True(t, errors.Is(err, context.Canceled), "%v", err)
					continue
				}
				expectCause(t, err)
				var statusErr *fencehttp.StatusError
				if c.name == "503 whose body stalls" && assert.True(t, errors.As(err, &statusErr), "%T %v", err, err) {
					assert.Equal(t, http.StatusServiceUnavailable, statusErr.StatusCode)
				}
			}
		})
	}
	t.Run("cancelled before", func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(errCause)
		resp, err := fencehttp.Do(client, newRequest(t, ctx, cases[0].url))
		t.Logf("Do with a ctx cancelled before: %v", err)
		assert.Nil(t, resp)
		expectCause(t, err)
	})
}
