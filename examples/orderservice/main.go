// Command orderservice tells the story of examples/orderqueue over HTTP.
// An order service keeps the order queue in a fenced store and takes
// writes over HTTP. Two workers lock the queue on Redis and send their
// lock's token with every write, in the Fencing-Token header (package
// fencehttp).
//
// Each change to the queue is one call of update, a small bounded loop to
// copy: acquire the lock, read the queue, change it, write it with the
// lock's token, release; when the write is refused as stale, start over
// with a new lock and a fresh read, at most three times.
//
// Worker A adds an order. Adding the next, it reads the queue and pauses
// (a GC pause, a stop-the-world) for longer than the lock's TTL. Worker B
// acquires the expired lock and adds its order. A wakes up, still
// believes it holds the lock, and sends its write: the service refuses it
// with 409 Conflict, which A's client turns back into a
// *fencedlock.StaleTokenError. A's update acquires again, reads the queue
// again and retries, so no order is lost. Last, worker C's bad requests
// (no token, a body that is not a JSON array, a body too large) are
// refused with 400 and 413, which update would not retry.
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
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
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
	// The Locker logs with slog: at Warn, what goes wrong where no caller
	// hears of it (a lock found lost, a failed heartbeat refresh); at
	// Debug, every grant, wait, release and hand-over. Here Warn and
	// above go to standard output, without the time.
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		Level: slog.LevelWarn,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.Attr{}
			}
			return a
		},
	}))
	s := story{locker: fencedlock.New(rdb, fencedlock.WithLogger(logger)), api: api, pause: mr.FastForward}
	return s.tell(context.Background())
}

// story holds what the workers share: one Locker and one client of the
// service. The workers run in this goroutine, one step at a time, so the
// interleaving is the same on every run.
type story struct {
	locker *fencedlock.Locker
	api    *queueAPI
	pause  func(time.Duration) // stands for A's stop-the-world pause

	// For the story's checks: the token of each worker's latest lock, and
	// the stale refusals update retried after.
	tokens  map[string]fencedlock.Token
	refused []refusal
}

// refusal is a write the service refused as stale: the status and
// CheckResponse's error.
type refusal struct {
	status int
	err    error
}

func (s *story) tell(ctx context.Context) error {
	s.tokens = map[string]fencedlock.Token{}

	// A adds order 1001.
	var initial []int
	err := s.update(ctx, "A", func(q []int) ([]int, error) {
		initial = slices.Clone(q)
		return append(q, 1001), nil
	})
	if err != nil {
		return fmt.Errorf("worker A's first update: %w", err)
	}

	// A adds order 1002. Between its read and its write, a pause outlasts
	// its lock's TTL: B acquires the expired lock and adds order 1003.
	// A's write is refused with 409, which CheckResponse turns back into
	// the store's *StaleTokenError; update starts over, with a new lock
	// and a fresh read, so no order is lost.
	var aToken, bToken fencedlock.Token
	err = s.update(ctx, "A", func(q []int) ([]int, error) {
		if aToken == 0 { // the first attempt only
			aToken = s.tokens["A"]
			b, err := s.meanwhile(ctx, aToken)
			if err != nil {
				return nil, err
			}
			bToken = b
		}
		return append(q, 1002), nil
	})
	if err != nil {
		return fmt.Errorf("worker A's second update: %w", err)
	}
	if len(s.refused) == 0 {
		return errors.New("the service accepted A's stale write: order 1003 is lost")
	}
	r := s.refused[0]
	var stale *fencedlock.StaleTokenError
	switch {
	case len(s.refused) > 1:
		return fmt.Errorf("worker A's writes were refused %d times, want once: %w", len(s.refused), s.refused[len(s.refused)-1].err)
	case !errors.As(r.err, &stale):
		return fmt.Errorf("worker A's stale write was refused without a *fencedlock.StaleTokenError: %w", r.err)
	case r.status != http.StatusConflict:
		return fmt.Errorf("worker A's stale write got status %d, want 409", r.status)
	case stale.Resource != resource || stale.Token != aToken || stale.Current != bToken:
		return fmt.Errorf("the rejection reports %q, tokens %v < %v; want %q, %v < %v", stale.Resource, stale.Token, stale.Current, resource, aToken, bToken)
	case s.tokens["A"] <= bToken:
		return fmt.Errorf("worker A's new token %v is not higher than B's %v", s.tokens["A"], bToken)
	}

	if err := s.badRequests(ctx); err != nil {
		return err
	}

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

// meanwhile is what happens while A, holding the lock with aToken, is
// paused: its lock expires, and B adds order 1003. It returns B's token.
func (s *story) meanwhile(ctx context.Context, aToken fencedlock.Token) (fencedlock.Token, error) {
	pause := ttl + time.Second
	say("A", "pauses (GC, stop-the-world) for %v, longer than the %v TTL; its lock expires in Redis", pause, ttl)
	s.pause(pause)

	// B finds the lock free and gets a higher token.
	err := s.update(ctx, "B", func(q []int) ([]int, error) { return append(q, 1003), nil })
	if err != nil {
		return 0, fmt.Errorf("worker B's update: %w", err)
	}
	bToken := s.tokens["B"]
	if bToken <= aToken {
		return 0, fmt.Errorf("worker B's token %v is not higher than A's %v", bToken, aToken)
	}
	say("A", "wakes up, still believes it holds the lock with token %v (B's is %v), and sends its write", aToken, bToken)
	return bToken, nil
}

// maxAttempts bounds update's attempts.
const maxAttempts = 3

// update is how a worker changes the queue: acquire the lock, GET the
// queue, apply change, PUT the result with the lock's token, release.
// When the service refuses the PUT as stale (errors.Is(err,
// fencedlock.ErrStaleToken): the lock expired, in a pause say, and
// another worker wrote since), the queue it read is out of date: update
// starts over with a new lock and a fresh read, at most maxAttempts times
// in all. Any other error ends it at once: a 400 or a 413, a
// *fencehttp.StatusError that matches no sentinel, means the request is
// wrong, and sending it again would not help.
func (s *story) update(ctx context.Context, who string, change func(q []int) ([]int, error)) error {
	var err error
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		if attempt > 1 {
			say(who, "errors.Is(err, fencedlock.ErrStaleToken): the lock is lost; re-acquire, re-read, retry (attempt %d of %d)", attempt, maxAttempts)
		}
		err = s.updateOnce(ctx, who, change)
		if !errors.Is(err, fencedlock.ErrStaleToken) {
			return err // nil, or not worth retrying
		}
	}
	return fmt.Errorf("gave up after %d attempts: %w", maxAttempts, err)
}

// updateOnce is one attempt of update.
func (s *story) updateOnce(ctx context.Context, who string, change func(q []int) ([]int, error)) (err error) {
	// A worker that may find the lock held would wait for it with
	// s.locker.Acquire and a deadline on ctx.
	lock, err := s.locker.TryAcquire(ctx, resource, ttl)
	if err != nil {
		return fmt.Errorf("acquiring the lock: %w", err)
	}
	s.tokens[who] = lock.Token()
	say(who, "acquired the lock with token %v", lock.Token())
	defer func() {
		// Released even when ctx is done, within a second.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		switch rerr := lock.Release(rctx); {
		case rerr == nil:
			say(who, "released the lock")
		case errors.Is(rerr, fencedlock.ErrLockLost):
			say(who, "released nothing: the lock was lost")
		case err == nil:
			err = fmt.Errorf("releasing the lock: %w", rerr)
		}
	}()

	q, _, err := s.read(ctx, who)
	if err != nil {
		return err
	}
	if q, err = change(q); err != nil {
		return err
	}
	status, err := s.api.put(ctx, lock.Token(), q)
	say(who, "PUT /queue %s with %s: %v: %d %s", show(q), fencehttp.Header, lock.Token(), status, http.StatusText(status))
	if err != nil {
		if errors.Is(err, fencedlock.ErrStaleToken) {
			s.refused = append(s.refused, refusal{status, err})
		}
		say(who, "CheckResponse returns a %T: %v", err, err)
		return fmt.Errorf("writing the queue: %w", err)
	}
	return nil
}

// badRequests sends requests the service refuses as bad: without a
// token, 400 with fencedlock.ErrInvalidToken; with a body that is not a
// JSON array, 400, and with one above the limit, 413, both answered by
// the service itself: a *fencehttp.StatusError that matches no sentinel,
// which update does not retry.
func (s *story) badRequests(ctx context.Context) error {
	status, err := s.api.put(ctx, 0, []int{9999})
	if status != http.StatusBadRequest || !errors.Is(err, fencedlock.ErrInvalidToken) {
		return fmt.Errorf("a PUT without a %s header got status %d, %v; want 400 and ErrInvalidToken", fencehttp.Header, status, err)
	}
	say("C", "(holds no lock) sends PUT /queue without a %s header: %d %s, errors.Is(err, fencedlock.ErrInvalidToken)", fencehttp.Header, status, http.StatusText(status))

	lock, err := s.locker.TryAcquire(ctx, resource, ttl)
	if err != nil {
		return fmt.Errorf("worker C could not acquire the lock: %w", err)
	}
	say("C", "acquired the lock with token %v", lock.Token())
	body := `{"order":9999}`
	status, err = s.api.send(ctx, lock.Token(), []byte(body))
	var statusErr *fencehttp.StatusError
	if status != http.StatusBadRequest || !errors.As(err, &statusErr) || matchesSentinel(err) {
		return fmt.Errorf("worker C's PUT of %s got status %d, %v; want 400 and a *fencehttp.StatusError matching no sentinel", body, status, err)
	}
	say("C", "PUT /queue %s: %d %s, a %T matching no sentinel", body, status, http.StatusText(status), statusErr)
	if err := lock.Release(ctx); err != nil {
		return fmt.Errorf("worker C's release: %w", err)
	}
	say("C", "released the lock")

	// Too many orders at once: more than 1 MiB of JSON.
	attempts := 0
	err = s.update(ctx, "C", func(q []int) ([]int, error) {
		attempts++
		for len(q) < maxBody/4 {
			q = append(q, 9999)
		}
		return q, nil
	})
	if !errors.As(err, &statusErr) || statusErr.StatusCode != http.StatusRequestEntityTooLarge || matchesSentinel(err) || attempts != 1 {
		return fmt.Errorf("worker C's update of more than 1 MiB got %v after %d attempts; want one attempt and a 413 *fencehttp.StatusError matching no sentinel", err, attempts)
	}
	say("C", "a bad request: update returns the %T at once, without a retry", statusErr)
	return nil
}

// matchesSentinel reports whether err matches one of the sentinel errors
// CheckResponse can map a response to.
func matchesSentinel(err error) bool {
	for _, s := range []error{fencedlock.ErrStaleToken, fencedlock.ErrInvalidToken, fencedlock.ErrNotFound, fencedlock.ErrInvalidArgument} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// read GETs the queue and the token it was written with.
func (s *story) read(ctx context.Context, who string) ([]int, fencedlock.Token, error) {
	q, token, err := s.api.get(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("reading the queue: %w", err)
	}
	if token == 0 {
		say(who, "GET /queue: 404, empty")
	} else {
		say(who, "GET /queue: %s, written with token %v", show(q), token)
	}
	return q, token, nil
}

// service is the order service. GET /queue returns the queue with the
// token that wrote it in the Fencing-Token header, or 404 before the
// first write. PUT /queue stores the body, a JSON array of order numbers,
// if the request's Fencing-Token is at least the one that wrote the
// queue, and answers 409 Conflict otherwise.
type service struct {
	store fencedlock.Store
}

// maxBody is the largest body PUT /queue takes: 1 MiB.
const maxBody = 1 << 20

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
		s.put(w, r)
	default:
		w.Header().Set("Allow", "GET, PUT")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

// put checks the request's token and body, and stores the body with the
// token; the store refuses a token lower than the queue's. Errors in the
// body are the client's, and answered here: WriteError answers the
// token's and the store's.
func (s *service) put(w http.ResponseWriter, r *http.Request) {
	token, err := fencehttp.TokenFrom(r) // missing or malformed: 400
	if err != nil {
		fencehttp.WriteError(w, err)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		http.Error(w, fmt.Sprintf("the body is larger than %d bytes", tooLarge.Limit), http.StatusRequestEntityTooLarge)
		return
	case err != nil:
		http.Error(w, "the body could not be read", http.StatusBadRequest)
		return
	}
	var orders []int
	if err := json.Unmarshal(body, &orders); err != nil {
		http.Error(w, "the body is not a JSON array of order numbers", http.StatusBadRequest)
		return
	}
	if err := s.store.Put(r.Context(), resource, token, body); err != nil {
		fencehttp.WriteError(w, err) // stale: 409 with both tokens
		return
	}
	w.WriteHeader(http.StatusNoContent)
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
	return c.send(ctx, token, encode(q))
}

// send PUTs body as it is, with token, and returns the response's status
// and CheckResponse's error.
func (c *queueAPI) send(ctx context.Context, token fencedlock.Token, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.url, bytes.NewReader(body))
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
	err = fencehttp.CheckResponse(resp)
	// Read to the end (CheckResponse left the body whole), so that the
	// connection is reused.
	if _, cerr := io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody)); err == nil {
		err = cerr
	}
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

// show returns q in JSON, abridged when it is long.
func show(q []int) string {
	if len(q) > 8 {
		return fmt.Sprintf("%s,...] (%d orders)", strings.TrimSuffix(string(encode(q[:3])), "]"), len(q))
	}
	return string(encode(q))
}

func say(who, format string, args ...any) {
	fmt.Printf("%-3s "+format+"\n", append([]any{who + ":"}, args...)...)
}
