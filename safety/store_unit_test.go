package safety

import (
	"context"
	"errors"
	"fmt"
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

// Fences over HTTP: the handler raises the store's fence, a lower Put or
// Fence comes back as a *StaleTokenError with the fence as Current, a Get
// returns the value with the token that wrote it, and Update runs through
// it (Fence, Get, Put). The ledger records the fences in effect order, and
// checker A and the deliveries account for them.
func TestStoreServerFences(t *testing.T) {
	led := &ledger{inner: fencedlock.NewMemoryStore()}
	srv := startStoreServer(t, led)
	s := newHTTPStore(srv.Listener.Addr().String())
	t.Cleanup(s.close)
	ctx := context.Background()

	if err := s.Fence(ctx, "r", 3); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctx, "r"); !errors.Is(err, fencedlock.ErrNotFound) {
		t.Fatalf("get of a resource only fenced: %v, want ErrNotFound", err)
	}
	if err := s.Put(ctx, "r", 5, []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := s.Fence(ctx, "r", 7); err != nil {
		t.Fatal(err)
	}
	if v, tok, err := s.Get(ctx, "r"); err != nil || string(v) != "a" || tok != 5 {
		t.Fatalf("get after the fence: %q %d %v, want a, the writer's token 5", v, tok, err)
	}
	var stale *fencedlock.StaleTokenError
	if err := s.Put(ctx, "r", 6, []byte("b")); !errors.As(err, &stale) || stale.Token != 6 || stale.Current != 7 {
		t.Fatalf("put below the fence: %v, want a *StaleTokenError 6 < 7", err)
	}
	if err := s.Fence(ctx, "r", 6); !errors.As(err, &stale) || stale.Token != 6 || stale.Current != 7 || stale.Resource != "r" {
		t.Fatalf("fence below the fence: %v, want a *StaleTokenError 6 < 7", err)
	}
	if err := s.Fence(ctx, "r", 0); !errors.Is(err, fencedlock.ErrInvalidToken) {
		t.Fatalf("fence with a zero token: %v, want ErrInvalidToken", err)
	}
	err := fencedlock.Update(ctx, s, "r", 8, func(v []byte, found bool) ([]byte, error) {
		if !found || string(v) != "a" {
			t.Errorf("Update read %q, %v; want a", v, found)
		}
		return append(v, 'x'), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := fencedlock.Update(ctx, s, "r", 7, func([]byte, bool) ([]byte, error) {
		t.Error("fn called with a stale token")
		return nil, nil
	}); !errors.As(err, &stale) || stale.Current != 8 {
		t.Fatalf("Update with a stale token: %v, want a *StaleTokenError with current 8", err)
	}
	if v, tok, err := s.Get(ctx, "r"); err != nil || string(v) != "ax" || tok != 8 {
		t.Fatalf("get after Update: %q %d %v", v, tok, err)
	}

	entries := led.snapshot()
	var kinds []string
	for _, e := range entries {
		k := "put"
		if e.Fence {
			k = "fence"
		}
		if !e.Accepted {
			k += "-refused"
		}
		kinds = append(kinds, fmt.Sprintf("%s %d", k, e.Token))
	}
	want := "[fence 3 put 5 fence 7 put-refused 6 fence-refused 6 fence 8 put 8 fence-refused 7]"
	if got := fmt.Sprint(kinds); got != want {
		t.Errorf("ledger %s, want %s", got, want)
	}
	if r := checkLedger(entries); !r.ok() || r.Accepted != 2 || r.Rejected != 1 || r.FencesAccepted != 3 || r.FencesRejected != 2 {
		t.Errorf("checker A: %+v", r)
	}
}

// The negative control's store accepts a Fence and keeps no fence: a
// later Put with a lower token is accepted.
func TestUnfencedStoreKeepsNoFence(t *testing.T) {
	ctx := context.Background()
	s := &unfencedStore{}
	if err := s.Fence(ctx, "r", 9); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ctx, "r"); !errors.Is(err, fencedlock.ErrNotFound) {
		t.Fatalf("get of a resource only fenced: %v, want ErrNotFound", err)
	}
	if err := s.Put(ctx, "r", 5, []byte("a")); err != nil {
		t.Fatalf("put below the fence: %v, want it accepted", err)
	}
	if v, tok, err := s.Get(ctx, "r"); err != nil || string(v) != "a" || tok != 5 {
		t.Fatalf("get: %q %d %v", v, tok, err)
	}
}

// flakyStore fails the Puts, Fences and Gets it is told to, around a
// MemoryStore: failPut fails the next Put, failFence the next Fence,
// after applying it (applyFailed) or without; failGet fails every Get
// while set.
type flakyStore struct {
	inner       fencedlock.Store
	failPut     bool
	failFence   bool
	applyFailed bool
	failGet     bool
}

var errFlaky = errors.New("flaky store: connection reset")

func (s *flakyStore) Put(ctx context.Context, resource string, token fencedlock.Token, value []byte) error {
	if s.failPut {
		s.failPut = false
		if s.applyFailed {
			if err := s.inner.Put(ctx, resource, token, value); err != nil {
				return err
			}
		}
		return errFlaky
	}
	return s.inner.Put(ctx, resource, token, value)
}

func (s *flakyStore) Fence(ctx context.Context, resource string, token fencedlock.Token) error {
	if s.failFence {
		s.failFence = false
		if s.applyFailed {
			if err := s.inner.Fence(ctx, resource, token); err != nil {
				return err
			}
		}
		return errFlaky
	}
	return s.inner.Fence(ctx, resource, token)
}

func (s *flakyStore) Get(ctx context.Context, resource string) ([]byte, fencedlock.Token, error) {
	if s.failGet {
		return nil, 0, errFlaky
	}
	return s.inner.Get(ctx, resource)
}

// The ledger's store-error path: a write that fails with the read-back
// failing too is recorded as an error, and checker A neither blames the
// refusals it may explain nor stops checking the refusals after it.
func TestCheckerAStoreErrors(t *testing.T) {
	ctx := context.Background()
	flaky := &flakyStore{inner: fencedlock.NewMemoryStore()}
	led := &ledger{inner: flaky}
	put := func(token fencedlock.Token, value string) error {
		return led.Put(ctx, "r", token, []byte(value))
	}
	if err := put(10, "a"); err != nil {
		t.Fatal(err)
	}
	// Applied, but the store says it failed and cannot be read back.
	flaky.failPut, flaky.applyFailed, flaky.failGet = true, true, true
	if err := put(12, "b"); err == nil {
		t.Fatal("want the store's error")
	}
	flaky.failGet = false
	// Refused against the failed write, which had landed: explained.
	if err := put(11, "c"); !errors.Is(err, fencedlock.ErrStaleToken) {
		t.Fatalf("put 11: %v, want stale", err)
	}
	// Failed without being applied, and the read-back says so: not an
	// error, not accepted.
	flaky.failPut, flaky.applyFailed = true, false
	if err := put(13, "d"); err == nil {
		t.Fatal("want the store's error")
	}
	if err := put(14, "e"); err != nil {
		t.Fatal(err)
	}
	entries := led.snapshot()
	if len(entries) != 5 || entries[1].Err == "" || entries[3].Err == "" || entries[3].Accepted {
		t.Fatalf("ledger: %+v", entries)
	}
	r := checkLedger(entries)
	if !r.ok() || r.Errors != 2 || r.Accepted != 2 || r.Rejected != 1 || len(r.Stale) != 1 {
		t.Errorf("checker A: %+v", r)
	}
	// The final value is the last accepted write; the failed writes
	// below it can no longer land.
	final := []op{{Resource: "r", Kind: opGet, Final: true, Outcome: outOK, Value: "e", Token: 14}}
	if bad := checkFinalReads(r, final); len(bad) != 0 {
		t.Errorf("final read: %v", bad)
	}
	final[0].Value, final[0].Token = "b", 12
	if bad := checkFinalReads(r, final); len(bad) != 1 {
		t.Errorf("final read of an overwritten value: %v, want a mismatch", bad)
	}

	// After the error, a refusal the rule does not explain is still
	// caught: the store error does not blind checker A for good.
	entries = append(entries, ledgerEntry{Resource: "r", Token: 13, Value: "f", Current: 12})
	if r := checkLedger(entries); r.BadRejections != 1 {
		t.Errorf("checker A after a store error: %+v, want 1 bad rejection", r)
	}
}

// The ledger's Fence: a failed fence is recorded with its error, and
// checker A lets it have landed (a later refusal reports it) or not.
func TestLedgerRecordsFailedFences(t *testing.T) {
	ctx := context.Background()
	flaky := &flakyStore{inner: fencedlock.NewMemoryStore()}
	led := &ledger{inner: flaky}
	if err := led.Put(ctx, "r", 5, []byte("a")); err != nil {
		t.Fatal(err)
	}
	flaky.failFence, flaky.applyFailed = true, true // applied, answered with an error
	if err := led.Fence(ctx, "r", 8); !errors.Is(err, errFlaky) {
		t.Fatalf("fence: %v, want the store's error", err)
	}
	if err := led.Put(ctx, "r", 6, []byte("b")); !errors.Is(err, fencedlock.ErrStaleToken) {
		t.Fatalf("put below the failed fence that landed: %v, want stale", err)
	}
	flaky.failFence, flaky.applyFailed = true, false // not applied
	if err := led.Fence(ctx, "r", 9); !errors.Is(err, errFlaky) {
		t.Fatalf("fence: %v, want the store's error", err)
	}
	if err := led.Put(ctx, "r", 8, []byte("c")); err != nil {
		t.Fatal(err)
	}
	entries := led.snapshot()
	if len(entries) != 5 || !entries[1].Fence || entries[1].Err == "" || !entries[3].Fence || entries[3].Err == "" {
		t.Fatalf("ledger: %+v", entries)
	}
	r := checkLedger(entries)
	if !r.ok() || r.FenceErrors != 2 || r.Rejected != 1 || r.Accepted != 2 {
		t.Errorf("checker A: %+v", r)
	}
	final := []op{{Resource: "r", Kind: opGet, Final: true, Outcome: outOK, Value: "c", Token: 8}}
	if bad := checkFinalReads(r, final); len(bad) != 0 {
		t.Errorf("final read: %v", bad)
	}
	// The fence that landed raised the fence, not the value: up to the
	// refusal that reported it, the value is still the first write.
	before := []op{{Resource: "r", Kind: opGet, Final: true, Outcome: outOK, Value: "a", Token: 5}}
	if bad := checkFinalReads(checkLedger(entries[:3]), before); len(bad) != 0 {
		t.Errorf("final read after the fence that landed: %v", bad)
	}
}
