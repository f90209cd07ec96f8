package safety

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// The store path the scenarios rely on, without Redis: the HTTP client
// gets the store's answers (a 409 becomes a *StaleTokenError with the
// store's token), and a write held in the network past its client's
// timeout is still applied when it arrives, and refused when a newer
// token was written meanwhile. The ledger records all of it, and
// checkDeliveries counts the late delivery.
func TestStoreServerAppliesLateWrites(t *testing.T) {
	led := &ledger{inner: fencedlock.NewMemoryStore()}
	srv := startStoreServer(t, led)
	proxy := redistest.NewProxy(t, srv.Listener.Addr().String())
	slow, fast := newHTTPStore(proxy.Addr()), newHTTPStore(proxy.Addr())
	t.Cleanup(slow.close)
	t.Cleanup(fast.close)
	ctx := context.Background()
	rec := &recorder{}
	put := func(s *httpStore, token fencedlock.Token, value string) error {
		o := op{Client: 1, Resource: "r", Kind: opPut, Token: token, Value: value, Call: now()}
		err := s.Put(ctx, "r", token, []byte(value))
		o.endPut(err)
		rec.add(o)
		return err
	}

	if _, _, err := fast.Get(ctx, "r"); !errors.Is(err, fencedlock.ErrNotFound) {
		t.Fatalf("get before any write: %v, want ErrNotFound", err)
	}
	if err := put(fast, 5, "a"); err != nil {
		t.Fatal(err)
	}
	// Warm slow's connection so that its write is one chunk of its own.
	if _, _, err := slow.Get(ctx, "r"); err != nil {
		t.Fatal(err)
	}

	hold := storeHTTPTimeout + 400*time.Millisecond
	proxy.HoldRequests(1, hold)
	if err := put(slow, 6, "late"); err == nil || errors.Is(err, fencedlock.ErrStaleToken) {
		t.Fatalf("held write: %v, want a timeout", err)
	}
	// The newer holder writes while the old write is held.
	if err := put(fast, 7, "b"); err != nil {
		t.Fatal(err)
	}
	// A stale write now gets the store's token back.
	err := put(fast, 6, "c")
	var stale *fencedlock.StaleTokenError
	if !errors.As(err, &stale) || stale.Token != 6 || stale.Current != 7 {
		t.Fatalf("stale write: %v, want a *StaleTokenError 6 < 7", err)
	}

	deadline := time.Now().Add(5 * time.Second)
	for proxy.Answered() < 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	srv.Close() // waits for the late write's handler
	entries := led.snapshot()
	if len(entries) != 4 {
		t.Fatalf("ledger: %+v, want 4 writes", entries)
	}
	late := entries[3]
	if late.Value != "late" || late.Accepted || late.Current != 7 {
		t.Errorf("the late write: %+v, want it refused against token 7", late)
	}
	if r := checkLedger(entries); !r.ok() || r.Accepted != 2 || r.Rejected != 2 {
		t.Errorf("checker A: %+v", r)
	}
	if r := checkDeliveries(rec.snapshot(), entries); !r.ok() || r.Late != 1 || r.LateRejected != 1 {
		t.Errorf("deliveries: %+v", r)
	}
}
