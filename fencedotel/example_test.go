package fencedotel_test

import (
	"context"
	"fmt"
	"log"
	"sort"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/fencedotel"
)

// One Observer for the Locker and the store: a Do that updates the store
// with its token records an acquire, a hold, an accepted fence (Update's
// fenced read) and an accepted write. The counters, and the gauges, show
// zero from the start for every outcome (and call) they can have. A real program passes its own
// MeterProvider, or none to use the global one.
func Example() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()
	ctx := context.Background()

	reader := sdkmetric.NewManualReader()
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer meters.Shutdown(ctx)
	obs, err := fencedotel.NewObserver(fencedotel.WithMeterProvider(meters))
	if err != nil {
		log.Fatal(err)
	}
	locker := fencedlock.New(client, fencedlock.WithObserver(obs))
	store := fencedlock.ObserveStore(fencedlock.NewRedisStore(client), obs)

	err = locker.Do(ctx, "report", 10*time.Second, func(ctx context.Context, lock *fencedlock.Lock) error {
		return fencedlock.Update(ctx, store, "report", lock.Token(), func(old []byte, found bool) ([]byte, error) {
			return []byte("done"), nil
		})
	})
	if err != nil {
		log.Fatal(err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch data := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, dp := range data.DataPoints {
					lines = append(lines, fmt.Sprintf("%s [%s] %s count=%d", m.Name, m.Unit, exampleAttrs(dp.Attributes), dp.Count))
				}
			case metricdata.Sum[int64]:
				for _, dp := range data.DataPoints {
					lines = append(lines, fmt.Sprintf("%s [%s] %s value=%d", m.Name, m.Unit, exampleAttrs(dp.Attributes), dp.Value))
				}
			}
		}
	}
	sort.Strings(lines)
	for _, line := range lines {
		fmt.Println(line)
	}
	// Output:
	// fencedlock.acquire.duration [s] {fencedlock.call=do,fencedlock.outcome=acquired} count=1
	// fencedlock.election.terms [{term}] {fencedlock.outcome=lost} value=0
	// fencedlock.election.terms [{term}] {fencedlock.outcome=resigned} value=0
	// fencedlock.lock.held [{lock}] {} value=0
	// fencedlock.lock.hold.duration [s] {} count=1
	// fencedlock.lock.lost [{lock}] {} value=0
	// fencedlock.lock.refresh.failures [{refresh}] {} value=0
	// fencedlock.store.fences [{fence}] {fencedlock.outcome=accepted} value=1
	// fencedlock.store.fences [{fence}] {fencedlock.outcome=error} value=0
	// fencedlock.store.fences [{fence}] {fencedlock.outcome=stale} value=0
	// fencedlock.store.writes [{write}] {fencedlock.outcome=accepted} value=1
	// fencedlock.store.writes [{write}] {fencedlock.outcome=error} value=0
	// fencedlock.store.writes [{write}] {fencedlock.outcome=stale} value=0
	// fencedlock.waiters [{waiter}] {fencedlock.call=acquire} value=0
	// fencedlock.waiters [{waiter}] {fencedlock.call=campaign} value=0
	// fencedlock.waiters [{waiter}] {fencedlock.call=do} value=0
}

func exampleAttrs(set attribute.Set) string {
	return "{" + set.Encoded(attribute.DefaultEncoder()) + "}"
}

// Spans: the acquire, the fence and the write of an Update, and the
// release of a Do, each a child of the span in the caller's ctx.
func Example_tracing() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer client.Close()

	spans := tracetest.NewSpanRecorder()
	tracers := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tracers.Shutdown(context.Background())
	obs, err := fencedotel.NewObserver(fencedotel.WithTracerProvider(tracers))
	if err != nil {
		log.Fatal(err)
	}
	locker := fencedlock.New(client, fencedlock.WithObserver(obs))
	store := fencedlock.ObserveStore(fencedlock.NewRedisStore(client), obs)

	ctx, job := tracers.Tracer("example").Start(context.Background(), "nightly-report")
	var token fencedlock.Token
	err = locker.Do(ctx, "report", 10*time.Second, func(ctx context.Context, lock *fencedlock.Lock) error {
		token = lock.Token()
		return fencedlock.Update(ctx, store, "report", lock.Token(), func(old []byte, found bool) ([]byte, error) {
			return []byte("done"), nil
		})
	})
	job.End()
	if err != nil {
		log.Fatal(err)
	}

	for _, s := range spans.Ended() {
		if s.SpanContext().SpanID() == job.SpanContext().SpanID() {
			continue
		}
		child := s.Parent().SpanID() == job.SpanContext().SpanID()
		v, _ := exampleAttr(s, fencedotel.AttrToken)
		fmt.Printf("%s: child of the job's span %v, the lock's token %v\n", s.Name(), child, v.AsInt64() == int64(token))
	}
	// Output:
	// fencedlock.acquire: child of the job's span true, the lock's token true
	// fencedlock.store.fence: child of the job's span true, the lock's token true
	// fencedlock.store.put: child of the job's span true, the lock's token true
	// fencedlock.release: child of the job's span true, the lock's token true
}

func exampleAttr(s sdktrace.ReadOnlySpan, key attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}
