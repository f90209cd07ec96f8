// Command metrics serves the fencedlock metrics of a small workload at
// /metrics, in the Prometheus text format, through the OpenTelemetry
// Prometheus exporter.
//
// Four workers take turns on one lock, on an embedded miniredis, and each
// writes to a fenced store under it; one TryAcquire while the lock is
// held is refused, and one Acquire gives up at its deadline. Then a
// holder pauses past its TTL: a newer holder writes, the paused one's
// write is refused as stale, and its Release finds the lock lost. Last, a
// candidate is elected leader of an election and resigns. The program
// then scrapes its own /metrics once and prints the fencedlock_ lines
// (histogram buckets left out).
//
// It exits with status 0 when the scraped figures match what it did, and
// with status 1 and a message naming the figure when they do not, so that
// CI can run it as a check. With -linger, it keeps serving /metrics that
// long before it exits, for a look with curl or a browser.
//
// Usage (from the fencedotel directory):
//
//	go run ./examples/metrics
//	go run ./examples/metrics -addr 127.0.0.1:9464 -linger 1m
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/election"
	"github.com/fencedlock/fencedlock/fencedotel"
)

const (
	resource = "nightly-report"
	office   = "report-scheduler" // the election's name
	workers  = 4
	rounds   = 5
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "`host:port` to serve /metrics on (port 0: a free one)")
	linger := flag.Duration("linger", 0, "how long to keep serving /metrics after the run")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "metrics: unexpected arguments %q\n", flag.Args())
		flag.Usage()
		os.Exit(2)
	}
	err := run(*addr, func(ctx context.Context, url string, lines []string) error {
		var shown []string
		for _, line := range lines {
			if !strings.Contains(line, "_bucket{") {
				fmt.Println(line)
				shown = append(shown, line)
			}
		}
		if err := check(shown); err != nil {
			return err
		}
		if *linger > 0 {
			fmt.Printf("serving %s for %v more\n", url, *linger)
			select {
			case <-time.After(*linger):
			case <-ctx.Done():
			}
		}
		return nil
	}, *linger)
	if err != nil {
		fmt.Fprintln(os.Stderr, "metrics: FAILED:", err)
		os.Exit(1)
	}
}

// run serves /metrics on addr, runs the workload, scrapes /metrics once
// and calls scraped with the URL and the fencedlock_ lines, while it
// still serves; linger is how long scraped may take beyond the workload.
func run(addr string, scraped func(ctx context.Context, url string, lines []string) error, linger time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second+linger)
	defer cancel()

	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		return fmt.Errorf("starting miniredis: %w", err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()

	// The exporter is a metric reader that a Prometheus registry scrapes.
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry), otelprom.WithoutScopeInfo(), otelprom.WithoutTargetInfo())
	if err != nil {
		return fmt.Errorf("creating the Prometheus exporter: %w", err)
	}
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer meters.Shutdown(context.Background())

	obs, err := fencedotel.NewObserver(fencedotel.WithMeterProvider(meters))
	if err != nil {
		return err
	}
	locker := fencedlock.New(client, fencedlock.WithObserver(obs))
	store := fencedlock.ObserveStore(fencedlock.NewRedisStore(client), obs)

	url, stop, err := serve(addr, registry)
	if err != nil {
		return err
	}
	defer stop()
	fmt.Println("serving", url)

	if err := contend(ctx, locker, store); err != nil {
		return err
	}
	if err := pauseAndLose(ctx, mr, locker, store); err != nil {
		return err
	}
	if err := lead(ctx, locker); err != nil {
		return err
	}

	lines, err := scrape(ctx, url)
	if err != nil {
		return err
	}
	return scraped(ctx, url, lines)
}

// serve serves registry at /metrics on addr, and returns the URL and a
// function that stops the server.
func serve(addr string, registry *prometheus.Registry) (string, func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("listening on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(os.Stderr, "metrics: serving:", err)
		}
	}()
	stop := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-done
	}
	return "http://" + ln.Addr().String() + "/metrics", stop, nil
}

// contend runs the workers: each takes the lock rounds times with Do and
// writes under it. While the first worker holds it the first time, it
// tries the lock once more itself, and is refused: the lock is held.
func contend(ctx context.Context, locker *fencedlock.Locker, store fencedlock.Store) error {
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				err := locker.Do(ctx, resource, 5*time.Second, func(ctx context.Context, lock *fencedlock.Lock) error {
					if w == 0 && i == 0 {
						if err := tryHeld(ctx, locker); err != nil {
							return err
						}
					}
					time.Sleep(5 * time.Millisecond) // the work
					return store.Put(ctx, resource, lock.Token(), []byte(fmt.Sprintf("report by worker %d", w)))
				})
				if err != nil {
					errs <- fmt.Errorf("worker %d: %w", w, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// tryHeld tries the lock, which the caller holds: Redis must refuse it.
// Then it waits for it for 20ms, and gives up at that deadline.
func tryHeld(ctx context.Context, locker *fencedlock.Locker) error {
	lock, err := locker.TryAcquire(ctx, resource, 5*time.Second)
	switch {
	case errors.Is(err, fencedlock.ErrNotAcquired):
	case err != nil:
		return fmt.Errorf("trying the held lock: %w", err)
	default:
		_ = lock.Release(ctx)
		return errors.New("a TryAcquire got the lock that a worker held")
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	lock, err = locker.Acquire(wctx, resource, 5*time.Second)
	if err == nil {
		_ = lock.Release(ctx)
		return errors.New("an Acquire got the lock that a worker held")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("waiting for the held lock: %w", err)
	}
	return nil
}

// lead campaigns in an election, is elected at once, and resigns.
func lead(ctx context.Context, locker *fencedlock.Locker) error {
	term, err := election.New(locker, office).Campaign(ctx, "this process")
	if err != nil {
		return err
	}
	return term.Resign(ctx)
}

// pauseAndLose has a holder pause past its TTL (miniredis's clock moves
// on), a newer holder write, and the paused one write too late: the store
// refuses its stale token, and its Release finds the lock lost.
func pauseAndLose(ctx context.Context, mr *miniredis.Miniredis, locker *fencedlock.Locker, store fencedlock.Store) error {
	paused, err := locker.TryAcquire(ctx, resource, 10*time.Second)
	if err != nil {
		return fmt.Errorf("the paused holder's acquire: %w", err)
	}
	mr.FastForward(11 * time.Second) // the pause: its lock expires
	newer, err := locker.TryAcquire(ctx, resource, 10*time.Second)
	if err != nil {
		return fmt.Errorf("the newer holder's acquire: %w", err)
	}
	if err := store.Put(ctx, resource, newer.Token(), []byte("report by the newer holder")); err != nil {
		return fmt.Errorf("the newer holder's write: %w", err)
	}
	if err := newer.Release(ctx); err != nil {
		return fmt.Errorf("the newer holder's release: %w", err)
	}
	if err := store.Put(ctx, resource, paused.Token(), []byte("late report")); !errors.Is(err, fencedlock.ErrStaleToken) {
		return fmt.Errorf("the paused holder's write was not refused as stale: %v", err)
	}
	if err := paused.Release(ctx); !errors.Is(err, fencedlock.ErrLockLost) {
		return fmt.Errorf("the paused holder's release did not find the lock lost: %v", err)
	}
	return nil
}

// scrape gets url once and returns its fencedlock_ lines.
func scrape(ctx context.Context, url string) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping %s: %s", url, resp.Status)
	}
	var lines []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "fencedlock_") {
			lines = append(lines, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", url, err)
	}
	return lines, nil
}

// check compares the scraped figures with what the program did.
func check(lines []string) error {
	acquired := workers*rounds + 3 // the workers', the paused holder's, the newer one's and the leader's
	want := map[string]string{
		`fencedlock_acquire_duration_seconds_count{fencedlock_call="do",fencedlock_outcome="acquired"}`:       fmt.Sprint(workers * rounds),
		`fencedlock_acquire_duration_seconds_count{fencedlock_call="try",fencedlock_outcome="acquired"}`:      "2",
		`fencedlock_acquire_duration_seconds_count{fencedlock_call="try",fencedlock_outcome="not_acquired"}`:  "1",
		`fencedlock_acquire_duration_seconds_count{fencedlock_call="acquire",fencedlock_outcome="timeout"}`:   "1",
		`fencedlock_acquire_duration_seconds_count{fencedlock_call="campaign",fencedlock_outcome="acquired"}`: "1",
		`fencedlock_waiters{fencedlock_call="acquire"}`:                                                       "0",
		`fencedlock_waiters{fencedlock_call="do"}`:                                                            "0",
		`fencedlock_lock_held`:                                             "0",
		`fencedlock_lock_hold_duration_seconds_count`:                      fmt.Sprint(acquired),
		`fencedlock_lock_lost_total`:                                       "1",
		`fencedlock_lock_refresh_failures_total`:                           "0",
		`fencedlock_store_writes_total{fencedlock_outcome="accepted"}`:     fmt.Sprint(workers*rounds + 1),
		`fencedlock_store_writes_total{fencedlock_outcome="stale"}`:        "1",
		`fencedlock_store_fences_total{fencedlock_outcome="stale"}`:        "0",
		`fencedlock_election_leader{fencedlock_election="` + office + `"}`: "0",
		`fencedlock_election_terms_total{fencedlock_outcome="resigned"}`:   "1",
		`fencedlock_election_terms_total{fencedlock_outcome="lost"}`:       "0",
	}
	got := map[string]string{}
	for _, line := range lines {
		if i := strings.LastIndexByte(line, ' '); i > 0 {
			got[line[:i]] = line[i+1:]
		}
	}
	var errs []error
	for series, value := range want {
		if got[series] != value {
			errs = append(errs, fmt.Errorf("%s is %q, want %s", series, got[series], value))
		}
	}
	return errors.Join(errs...)
}
