// Command orderservice tells the story of examples/orderqueue over HTTP.
// An order service keeps the order queue in a fenced store and takes
// writes over HTTP. Two workers lock the queue on Redis and send their
// lock's token with every write, in the Fencing-Token header (package
// fencehttp).
//
// Worker A holds the lock, writes, and pauses (a GC pause, a
// stop-the-world) for longer than the lock's TTL. Worker B acquires the
// expired lock and writes. A wakes up, still believes it holds the lock,
// and sends its write: the service refuses it with 409 Conflict, which A's
// client turns back into a *fencedlock.StaleTokenError. A acquires again,
// reads the queue again and retries, so no order is lost.
//
// The service runs on a loopback port, the locks on an embedded
// miniredis; the pause moves miniredis's clock forward. The program exits
// with status 0 when every step goes as told, and with status 1 and a
// message naming the step when one does not, so that CI can run it as a
// check.
//
// Usage:
//
//	go run ./examples/orderservice
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/fencehttp"
)

const (
	resource = "order-queue" // the lock's name and the store's key
	ttl      = 30 * time.Second
)

func main() {
	goroutines := runtime.NumGoroutine()
	err := run()
	if err == nil {
		err = noGoroutinesLeft(goroutines)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "orderservice: FAILED:", err)
		os.Exit(1)
	}
}

// run starts the service and Redis, tells the story, and shuts both down.
func run() (err error) {
	// The order service, with the queue in its own fenced store. A
	// MemoryStore stands for the service's database: any fencedlock.Store
	// will do.
	srv, err := startServer(&service{store: fencedlock.NewMemoryStore()})
	if err != nil {
		return fmt.Errorf("starting the order service: %w", err)
	}
	defer func() {
		if cerr := srv.shutdown(); cerr != nil && err == nil {
			err = fmt.Errorf("shutting the order service down: %w", cerr)
		}
	}()

	// The workers' Redis, for the locks. miniredis never expires keys on
	// its own: FastForward moves its clock, and keys whose TTL runs out are
	// gone.
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		return fmt.Errorf("starting miniredis: %w", err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	api := &queueAPI{
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}},
		url:    srv.url + "/queue",
	}
	defer api.client.CloseIdleConnections()

	fmt.Printf("The order service at %s keeps %q in a fenced store.\n", api.url, resource)
	fmt.Printf("Workers lock it on an embedded miniredis (TTL %v) and send the lock's token in the %s header.\n\n", ttl, fencehttp.Header)
	s := story{ctx: context.Background(), locker: fencedlock.New(rdb), api: api, pause: mr.FastForward}
	return s.tell()
}

// story holds what the two workers share: one Locker and one client of the
// service. Both workers run in this goroutine, one step at a time, so the
// interleaving is the same on every run.
type story struct {
	ctx    context.Context
	locker *fencedlock.Locker
	api    *queueAPI
	pause  func(time.Duration) // stands for A's stop-the-world pause
}

func (s *story) tell() error {
	ctx := s.ctx

	// A acquires the lock and starts work on the queue.
	a, err := s.locker.TryAcquire(ctx, resource, ttl)
	if err != nil {
		return fmt.Errorf("worker A could not acquire the lock: %w", err)
	}
	say("A", "acquired the lock with token %v", a.Token())
	queue, _, err := s.read("A")
	if err != nil {
		return err
	}
	initial := slices.Clone(queue)
	queue = append(queue, 1001)
	if err := s.write("A", a.Token(), queue); err != nil {
		return fmt.Errorf("worker A's first write: %w", err)
	}
	queue = append(queue, 1002) // A's next write, prepared before the pause

	pause := ttl + time.Second
	say("A", "pauses (GC, stop-the-world) for %v, longer than the %v TTL; its lock expires in Redis", pause, ttl)
	s.pause(pause)

	// B finds the lock free and gets a higher token.
	b, err := s.locker.TryAcquire(ctx, resource, ttl)
	if err != nil {
		return fmt.Errorf("worker B could not acquire the lock after A's TTL ran out: %w", err)
	}
	if b.Token() <= a.Token() {
		return fmt.Errorf("worker B's token %v is not higher than A's %v", b.Token(), a.Token())
	}
	say("B", "acquired the lock with token %v, higher than A's %v", b.Token(), a.Token())
	bq, _, err := s.read("B")
	if err != nil {
		return err
	}
	if err := s.write("B", b.Token(), append(bq, 1003)); err != nil {
		return fmt.Errorf("worker B's write: %w", err)
	}

	// A wakes up, unaware of the pause, and sends what it prepared. The
	// service refuses it with 409, and CheckResponse turns the answer back
	// into the store's *StaleTokenError.
	say("A", "wakes up, still believes it holds the lock, and sends PUT /queue %s with %s: %v", show(queue), fencehttp.Header, a.Token())
	status, err := s.api.put(ctx, a.Token(), queue)
	var stale *fencedlock.StaleTokenError
	switch {
	case err == nil:
		return errors.New("the service accepted A's stale write: order 1003 is lost")
	case !errors.Is(err, fencedlock.ErrStaleToken) || !errors.As(err, &stale):
		return fmt.Errorf("worker A's stale write failed for another reason: %w", err)
	case status != http.StatusConflict:
		return fmt.Errorf("worker A's stale write got status %d, want 409", status)
	case stale.Resource != resource || stale.Token != a.Token() || stale.Current != b.Token():
		return fmt.Errorf("the rejection reports %q, tokens %v < %v; want %q, %v < %v", stale.Resource, stale.Token, stale.Current, resource, a.Token(), b.Token())
	}
	say("A", "%d %s; CheckResponse returns a %T: %v", status, http.StatusText(status), stale, err)
	say("A", "errors.Is(err, fencedlock.ErrStaleToken): the lock is lost; re-acquire, re-read, retry")

	if err := b.Release(ctx); err != nil {
		return fmt.Errorf("worker B's release: %w", err)
	}
	say("B", "released the lock")

	// A starts over: acquire, re-read, retry.
	a2, err := s.locker.TryAcquire(ctx, resource, ttl)
	if err != nil {
		return fmt.Errorf("worker A could not acquire the lock again: %w", err)
	}
	if a2.Token() <= b.Token() {
		return fmt.Errorf("worker A's new token %v is not higher than B's %v", a2.Token(), b.Token())
	}
	say("A", "acquired the lock again with token %v", a2.Token())
	queue, token, err := s.read("A")
	if err != nil {
		return err
	}
	if token != b.Token() {
		return fmt.Errorf("worker A re-read a queue written with token %v, want B's %v", token, b.Token())
	}
	if err := s.write("A", a2.Token(), append(queue, 1002)); err != nil {
		return fmt.Errorf("worker A's retried write: %w", err)
	}
	if err := a2.Release(ctx); err != nil {
		return fmt.Errorf("worker A's release: %w", err)
	}
	say("A", "released the lock")

	// A write without a token is refused too: 400, ErrInvalidToken.
	status, err = s.api.put(ctx, 0, []int{9999})
	if status != http.StatusBadRequest || !errors.Is(err, fencedlock.ErrInvalidToken) {
		return fmt.Errorf("a PUT without a %s header got status %d, %v; want 400 and ErrInvalidToken", fencehttp.Header, status, err)
	}
	say("C", "(holds no lock) sends PUT /queue without a %s header: %d %s, errors.Is(err, fencedlock.ErrInvalidToken)", fencehttp.Header, status, http.StatusText(status))

	final, _, err := s.api.get(ctx)
	if err != nil {
		return fmt.Errorf("reading the final queue: %w", err)
	}
	want := append(initial, 1001, 1003, 1002)
	if !slices.Equal(final, want) {
		return fmt.Errorf("the queue holds %s, want %s", show(final), show(want))
	}
	fmt.Printf("\nOK: the stale write was refused with 409 and no order was lost: the queue holds %s\n", show(final))
	return nil
}

// read GETs the queue and the token it was written with.
func (s *story) read(who string) ([]int, fencedlock.Token, error) {
	q, token, err := s.api.get(s.ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("worker %s's read: %w", who, err)
	}
	if token == 0 {
		say(who, "GET /queue: 404, empty")
	} else {
		say(who, "GET /queue: %s, written with token %v", show(q), token)
	}
	return q, token, nil
}

// write PUTs the queue with the lock's token.
func (s *story) write(who string, token fencedlock.Token, q []int) error {
	status, err := s.api.put(s.ctx, token, q)
	if err != nil {
		return err
	}
	say(who, "PUT /queue %s with %s: %v: %d %s", show(q), fencehttp.Header, token, status, http.StatusText(status))
	return nil
}

// service is the order service. GET /queue returns the queue with the
// token that wrote it in the Fencing-Token header, or 404 before the
// first write. PUT /queue stores the body, a JSON array of order numbers,
// if the request's Fencing-Token is at least the one that wrote the
// queue, and answers 409 Conflict otherwise.
type service struct {
	store fencedlock.Store
}

func (s *service) queue(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		value, token, err := s.store.Get(r.Context(), resource)
		if err != nil {
			fencehttp.WriteError(w, err) // ErrNotFound: 404
			return
		}
		fencehttp.SetTokenHeader(w.Header(), token)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(value)
	case http.MethodPut:
		token, err := fencehttp.TokenFrom(r) // missing or malformed: 400
		if err == nil {
			err = s.put(w, r, token)
		}
		if err != nil {
			fencehttp.WriteError(w, err) // stale: 409 with both tokens
			return
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		w.Header().Set("Allow", "GET, PUT")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

// put checks the body and stores it with token; the store refuses a token
// lower than the queue's.
func (s *service) put(w http.ResponseWriter, r *http.Request, token fencedlock.Token) error {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("%w: reading the body: %v", fencedlock.ErrInvalidArgument, err)
	}
	var orders []int
	if err := json.Unmarshal(body, &orders); err != nil {
		return fmt.Errorf("%w: the body is not a JSON array of order numbers: %v", fencedlock.ErrInvalidArgument, err)
	}
	return s.store.Put(r.Context(), resource, token, body)
}

// server runs the service on a loopback port.
type server struct {
	http   *http.Server
	url    string
	served chan error // receives Serve's error when it returns
}

func startServer(svc *service) (*server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/queue", svc.queue)
	s := &server{
		http:   &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second},
		url:    "http://" + ln.Addr().String(),
		served: make(chan error, 1),
	}
	go func() { s.served <- s.http.Serve(ln) }()
	return s, nil
}

// shutdown stops the server, waiting for requests in flight, and for
// Serve to return.
func (s *server) shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.http.Shutdown(ctx); err != nil {
		return err
	}
	if err := <-s.served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// queueAPI is a worker's client of the order service.
type queueAPI struct {
	client *http.Client
	url    string
}

// get returns the queue and the token that wrote it; an empty queue and
// the zero token before the first write.
func (c *queueAPI) get(ctx context.Context) ([]int, fencedlock.Token, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	err = fencehttp.CheckResponse(resp)
	if errors.Is(err, fencedlock.ErrNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	token, err := fencehttp.TokenFromHeader(resp.Header)
	if err != nil {
		return nil, 0, err
	}
	var q []int
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&q); err != nil {
		return nil, 0, fmt.Errorf("decoding the queue: %w", err)
	}
	return q, token, nil
}

// put stores q with token (the zero token sends no Fencing-Token header)
// and returns the response's status. A refusal is the error CheckResponse
// makes of it: a *fencedlock.StaleTokenError for 409.
func (c *queueAPI) put(ctx context.Context, token fencedlock.Token, q []int) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.url, bytes.NewReader(encode(q)))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	fencehttp.SetToken(req, token)
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if err := fencehttp.CheckResponse(resp); err != nil {
		return resp.StatusCode, err
	}
	_, err = io.Copy(io.Discard, resp.Body) // so that the connection is reused
	return resp.StatusCode, err
}

// noGoroutinesLeft waits up to two seconds for the goroutines started
// since the program began (server, connections, miniredis) to end.
func noGoroutinesLeft(before int) error {
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			return fmt.Errorf("shutdown left %d goroutines running:\n%s", runtime.NumGoroutine()-before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("The service and Redis are shut down; no goroutine is left running.")
	return nil
}

func encode(q []int) []byte {
	if q == nil {
		q = []int{}
	}
	b, err := json.Marshal(q)
	if err != nil {
		panic(err) // a slice of ints always encodes
	}
	return b
}

func show(q []int) string { return string(encode(q)) }

func say(who, format string, args ...any) {
	fmt.Printf("%-3s "+format+"\n", append([]any{who + ":"}, args...)...)
}
