// Command orderservice tells the story of examples/orderqueue over HTTP.
// An order service keeps the order queue in a fenced store and serves it
// over HTTP. Workers lock the queue on Redis and send their lock's token,
// in the Fencing-Token header (package fencehttp), with every write and
// with every read whose result they write back: the service raises the
// store's fence with the token before it reads (Store.Fence, then Get),
// and answers a stale token with 409 Conflict, on a read as on a write.
//
// Each change to the queue is one call of update, a small bounded loop to
// copy: acquire the lock, GET the queue, change it, PUT it with the lock's
// token, release; when the GET or the PUT is refused as stale, start over
// with a new lock and a fresh read, at most three times.
//
// Worker A adds an order. Adding the next, it reads the queue and pauses
// (a GC pause, a stop-the-world) for longer than the lock's TTL. Worker B
// acquires the expired lock and reads the queue, which raises the fence
// to B's token. A wakes up, still believes it holds the lock, and sends
// its write between B's read and B's write: the service refuses it with
// 409 Conflict, which A's client turns back into a
// *fencedlock.StaleTokenError. Had B's read not been fenced, A's write
// would have been accepted, and then overwritten by B's. B writes, and
// A's update acquires again, reads the queue again and adds its order.
// Then A pauses between taking the lock and reading: B adds an order, and
// A's read, sent with its old token, is refused with 409 too. Last,
// worker C's bad requests (no token, a body that is not a JSON array, a
// body too large) are refused with 400 and 413, which update would not
// retry.
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
	svc := &service{store: fencedlock.NewMemoryStore()}
	srv, err := startServer(svc)
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
	fmt.Printf("Workers lock it on an embedded miniredis (TTL %v) and send the lock's token in the %s header,\n", ttl, fencehttp.Header)
	fmt.Printf("on every PUT and on every GET of a queue they will write back: the service fences before it reads.\n\n")
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
	s := story{locker: fencedlock.New(rdb, fencedlock.WithLogger(logger)), api: api, pause: mr.FastForward, store: svc.store}
	return s.tell(context.Background())
}

// story holds what the workers share: one Locker and one client of the
// service. The workers run in this goroutine, one step at a time, so the
// interleaving is the same on every run.
type story struct {
	locker *fencedlock.Locker
	api    *queueAPI
	pause  func(time.Duration) // stands for A's stop-the-world pauses
	store  fencedlock.Store    // the service's store, for the final check only

	lastToken fencedlock.Token // the token of the latest lock begin took, for the story's checks
}

func (s *story) tell(ctx context.Context) error {
	fmt.Println("A adds order 1001.")
	var initial []int
	_, err := s.update(ctx, "A", func(q []int) ([]int, error) {
		initial = slices.Clone(q)
		return append(q, 1001), nil
	})
	if err != nil {
		return fmt.Errorf("worker A's first update: %w", err)
	}

	if err := s.staleWrite(ctx); err != nil {
		return err
	}
	if err := s.staleRead(ctx); err != nil {
		return err
	}
	if err := s.badRequests(ctx); err != nil {
		return err
	}

	final, _, err := s.store.Get(ctx, resource)
	if err != nil {
		return fmt.Errorf("reading the final queue from the service's store: %w", err)
	}
	want := encode(append(initial, 1001, 1003, 1002, 1005, 1004))
	if string(final) != string(want) {
		return fmt.Errorf("the queue holds %s, want %s", final, want)
	}
	fmt.Printf("\nOK: the stale write and the stale read were refused with 409, and no order was lost: the queue holds %s\n", final)
	return nil
}

// staleWrite tells the first pause. A adds order 1002: it reads the
// queue and pauses before its PUT. B reads the queue, raising the fence
// to its token, and A's PUT lands between B's read and B's write: 409.
// B writes order 1003, and A's update starts over and adds 1002.
func (s *story) staleWrite(ctx context.Context) error {
	fmt.Println("\nA adds order 1002, and pauses between its read and its write.")
	a, err := s.begin(ctx, "A", func(q []int) ([]int, error) { return append(q, 1002), nil })
	if err != nil {
		return fmt.Errorf("worker A's read: %w", err)
	}
	s.pauseA()
	b, err := s.begin(ctx, "B", func(q []int) ([]int, error) { return append(q, 1003), nil })
	if err != nil {
		return fmt.Errorf("worker B's read: %w", err)
	}
	if b.lock.Token() <= a.lock.Token() {
		return fmt.Errorf("worker B's token %v is not higher than A's %v", b.lock.Token(), a.lock.Token())
	}
	say("A", "wakes up, still believes it holds the lock with token %v (B's is %v), and sends its write between B's GET and B's PUT", a.lock.Token(), b.lock.Token())
	say("--", "without the fence B's GET raised, the service would accept it, and B's PUT would then overwrite order 1002")
	status, err := s.commit(ctx, a)
	if err := checkStale("A's write", status, err, a.lock.Token(), b.lock.Token()); err != nil {
		return err
	}
	if _, err := s.commit(ctx, b); err != nil {
		return fmt.Errorf("worker B's write: %w", err)
	}

	say("A", "errors.Is(err, fencedlock.ErrStaleToken): the lock is lost; update re-acquires, re-reads and retries")
	attempts, err := s.update(ctx, "A", func(q []int) ([]int, error) { return append(q, 1002), nil })
	if err != nil || attempts != 1 {
		return fmt.Errorf("worker A's retry: %v after %d attempts, want success at the first", err, attempts)
	}
	return nil
}

// staleRead tells the second pause. A adds order 1004: it takes the lock
// and pauses before its GET. B adds order 1005, and A's GET, sent with
// its old token, is refused with 409, so A never writes from it: its
// update starts over.
func (s *story) staleRead(ctx context.Context) error {
	fmt.Println("\nA adds order 1004, and pauses between taking the lock and reading.")
	a, err := s.locker.TryAcquire(ctx, resource, ttl)
	if err != nil {
		return fmt.Errorf("worker A could not acquire the lock: %w", err)
	}
	say("A", "acquired the lock with token %v", a.Token())
	s.pauseA()
	var bToken fencedlock.Token
	_, err = s.update(ctx, "B", func(q []int) ([]int, error) { return append(q, 1005), nil })
	if err != nil {
		return fmt.Errorf("worker B's update: %w", err)
	}
	bToken = s.lastToken
	say("A", "wakes up, still believes it holds the lock with token %v (B's was %v), and reads", a.Token(), bToken)
	_, _, status, err := s.read(ctx, "A", a.Token())
	if err := checkStale("A's read", status, err, a.Token(), bToken); err != nil {
		return err
	}
	s.release(ctx, "A", a)
	say("A", "errors.Is(err, fencedlock.ErrStaleToken): the lock is lost; update re-acquires, re-reads and retries")
	attempts, err := s.update(ctx, "A", func(q []int) ([]int, error) { return append(q, 1004), nil })
	if err != nil || attempts != 1 {
		return fmt.Errorf("worker A's retry: %v after %d attempts, want success at the first", err, attempts)
	}
	return nil
}

// checkStale returns nil when the request named what got 409 and a
// *fencedlock.StaleTokenError for resource with token and current, and
// an error saying what it got otherwise.
func checkStale(what string, status int, err error, token, current fencedlock.Token) error {
	var stale *fencedlock.StaleTokenError
	switch {
	case err == nil:
		return fmt.Errorf("the service accepted %s with a stale token", what)
	case !errors.As(err, &stale):
		return fmt.Errorf("%s was refused without a *fencedlock.StaleTokenError: %w", what, err)
	case status != http.StatusConflict:
		return fmt.Errorf("%s got status %d, want 409", what, status)
	case stale.Resource != resource || stale.Token != token || stale.Current != current:
		return fmt.Errorf("the rejection of %s reports %q, tokens %v < %v; want %q, %v < %v", what, stale.Resource, stale.Token, stale.Current, resource, token, current)
	}
	return nil
}

// pauseA is A's stop-the-world pause, past its lock's TTL.
func (s *story) pauseA() {
	pause := ttl + time.Second
	say("A", "pauses (GC, stop-the-world) for %v, longer than the %v TTL; its lock expires in Redis", pause, ttl)
	s.pause(pause)
}

// maxAttempts bounds update's attempts.
const maxAttempts = 3

// update is how a worker changes the queue: acquire the lock, GET the
// queue with the lock's token, apply change, PUT the result with the
// lock's token, release. When the service refuses the GET or the PUT as
// stale (errors.Is(err, fencedlock.ErrStaleToken): the lock expired, in a
// pause say, and another worker has read or written since), the queue it
// read is out of date, or about to be: update starts over with a new lock
// and a fresh read, at most maxAttempts times in all. Any other error
// ends it at once: a 400 or a 413, a *fencehttp.StatusError that matches
// no sentinel, means the request is wrong, and sending it again would not
// help. It returns the number of attempts it made.
func (s *story) update(ctx context.Context, who string, change func(q []int) ([]int, error)) (int, error) {
	var err error
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		if attempt > 1 {
			say(who, "errors.Is(err, fencedlock.ErrStaleToken): the lock is lost; re-acquire, re-read, retry (attempt %d of %d)", attempt, maxAttempts)
		}
		var p *pending
		p, err = s.begin(ctx, who, change)
		if err == nil {
			_, err = s.commit(ctx, p)
		}
		if !errors.Is(err, fencedlock.ErrStaleToken) {
			return attempt, err // nil, or not worth retrying
		}
	}
	return maxAttempts, fmt.Errorf("gave up after %d attempts: %w", maxAttempts, err)
}

// pending is a worker's change between its read and its write: the lock
// it holds, and the queue it will PUT.
type pending struct {
	who  string
	lock *fencedlock.Lock
	q    []int
}

// begin acquires the lock, GETs the queue with the lock's token, and
// applies change. On success the caller commits the pending change; on
// failure the lock is released.
func (s *story) begin(ctx context.Context, who string, change func(q []int) ([]int, error)) (*pending, error) {
	// A worker that may find the lock held would wait for it with
	// s.locker.Acquire and a deadline on ctx.
	lock, err := s.locker.TryAcquire(ctx, resource, ttl)
	if err != nil {
		return nil, fmt.Errorf("acquiring the lock: %w", err)
	}
	s.lastToken = lock.Token()
	say(who, "acquired the lock with token %v", lock.Token())
	q, _, _, err := s.read(ctx, who, lock.Token())
	if err == nil {
		q, err = change(q)
	}
	if err != nil {
		s.release(ctx, who, lock)
		return nil, err
	}
	return &pending{who: who, lock: lock, q: q}, nil
}

// commit PUTs p's queue with its lock's token, releases the lock, and
// returns the PUT's status and error.
func (s *story) commit(ctx context.Context, p *pending) (int, error) {
	status, err := s.api.put(ctx, p.lock.Token(), p.q)
	say(p.who, "PUT /queue %s with %s: %v: %d %s", show(p.q), fencehttp.Header, p.lock.Token(), status, http.StatusText(status))
	if err != nil {
		say(p.who, "CheckResponse returns a %T: %v", err, err)
		err = fmt.Errorf("writing the queue: %w", err)
	}
	if rerr := s.release(ctx, p.who, p.lock); err == nil {
		err = rerr
	}
	return status, err
}

// release releases lock, even when ctx is done, within a second. A lock
// found lost is no error: a refused read or write said so already.
func (s *story) release(ctx context.Context, who string, lock *fencedlock.Lock) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	switch err := lock.Release(rctx); {
	case err == nil:
		say(who, "released the lock")
	case errors.Is(err, fencedlock.ErrLockLost):
		say(who, "released nothing: the lock was lost")
	default:
		return fmt.Errorf("releasing the lock: %w", err)
	}
	return nil
}

// badRequests sends requests the service refuses as bad: without a
// token, 400 with fencedlock.ErrInvalidToken; with a body that is not a
// JSON array, 400, and with one above the limit, 413, both answered by
// the service itself: a *fencehttp.StatusError that matches no sentinel,
// which update does not retry.
func (s *story) badRequests(ctx context.Context) error {
	fmt.Println("\nC sends bad requests.")
	status, err := s.api.put(ctx, 0, []int{9999})
	if status != http.StatusBadRequest || !errors.Is(err, fencedlock.ErrInvalidToken) {
		return fmt.Errorf("a PUT without a %s header got status %d, %v; want 400 and ErrInvalidToken", fencehttp.Header, status, err)
	}
	say("C", "(holds no lock) sends PUT /queue without a %s header: %d %s, errors.Is(err, fencedlock.ErrInvalidToken)", fencehttp.Header, status, http.StatusText(status))
	_, _, status, err = s.read(ctx, "C", 0)
	if status != http.StatusBadRequest || !errors.Is(err, fencedlock.ErrInvalidToken) {
		return fmt.Errorf("a GET without a %s header got status %d, %v; want 400 and ErrInvalidToken", fencehttp.Header, status, err)
	}

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
	attempts, err := s.update(ctx, "C", func(q []int) ([]int, error) {
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

// read GETs the queue with token, and returns it with the token that
// wrote it, the response's status, and CheckResponse's error; an empty
// queue and the zero token before the first write.
func (s *story) read(ctx context.Context, who string, token fencedlock.Token) ([]int, fencedlock.Token, int, error) {
	q, written, status, err := s.api.get(ctx, token)
	sent := fmt.Sprintf("GET /queue with %s: %v", fencehttp.Header, token)
	if token == 0 {
		sent = fmt.Sprintf("GET /queue without a %s header", fencehttp.Header)
	}
	switch {
	case err != nil:
		say(who, "%s: %d %s", sent, status, http.StatusText(status))
		say(who, "CheckResponse returns a %T: %v", err, err)
		return nil, 0, status, fmt.Errorf("reading the queue: %w", err)
	case written == 0:
		say(who, "%s: 404, empty", sent)
	default:
		say(who, "%s: %s, written with token %v", sent, show(q), written)
	}
	return q, written, status, nil
}

// service is the order service. GET /queue raises the store's fence to
// the request's Fencing-Token, then returns the queue with the token
// that wrote it in the Fencing-Token header, or 404 before the first
// write. PUT /queue stores the body, a JSON array of order numbers. Both
// answer 409 Conflict when the request's token is below the fence: the
// highest token that has read or written the queue.
type service struct {
	store fencedlock.Store
}

// maxBody is the largest body PUT /queue takes: 1 MiB.
const maxBody = 1 << 20

func (s *service) queue(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		s.get(w, r)
	case http.MethodPut:
		s.put(w, r)
	default:
		w.Header().Set("Allow", "GET, PUT")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	}
}

// get fences the queue with the request's token, then reads it: the
// client will write back what it reads, so no lower token may write in
// between. A stale token answers 409, as for a write.
func (s *service) get(w http.ResponseWriter, r *http.Request) {
	token, err := fencehttp.TokenFrom(r) // missing or malformed: 400
	if err != nil {
		fencehttp.WriteError(w, err)
		return
	}
	if err := s.store.Fence(r.Context(), resource, token); err != nil {
		fencehttp.WriteError(w, err) // stale: 409 with both tokens
		return
	}
	value, written, err := s.store.Get(r.Context(), resource)
	if err != nil {
		fencehttp.WriteError(w, err) // nothing written yet: 404
		return
	}
	fencehttp.SetTokenHeader(w.Header(), written)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(value)
}

// put checks the request's token and body, and stores the body with the
// token; the store refuses a token below the fence. Errors in the
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

// get GETs the queue with token (the zero token sends no Fencing-Token
// header), and returns it with the token that wrote it, the response's
// status, and the error CheckResponse makes of a refusal: a
// *fencedlock.StaleTokenError for 409. Before the first write it returns
// an empty queue and the zero token.
func (c *queueAPI) get(ctx context.Context, token fencedlock.Token) ([]int, fencedlock.Token, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return nil, 0, 0, err
	}
	fencehttp.SetToken(req, token) // the service fences the read with it
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, 0, 0, err
	}
	defer resp.Body.Close()
	err = fencehttp.CheckResponse(resp)
	if errors.Is(err, fencedlock.ErrNotFound) {
		return nil, 0, resp.StatusCode, nil
	}
	if err != nil {
		return nil, 0, resp.StatusCode, err
	}
	written, err := fencehttp.TokenFromHeader(resp.Header)
	if err != nil {
		return nil, 0, resp.StatusCode, err
	}
	var q []int
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxBody)).Decode(&q); err != nil {
		return nil, 0, resp.StatusCode, fmt.Errorf("decoding the queue: %w", err)
	}
	return q, written, resp.StatusCode, nil
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
