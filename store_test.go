package fencedlock_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
)

// One holder writes many times with one token.
func TestSameTokenWritesTwice(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l := newLocker(b)
		lock := mustTryAcquire(t, ctx, l, "r", longTTL)
		for _, s := range bothStores(b) {
			s := s
			t.Run(s.name, func(t *testing.T) {
				require.NoError(t, s.store.Put(ctx, "r", lock.Token(), []byte("first")))
				requireValue(t, ctx, s.store, "r", "first", lock.Token())
				require.NoError(t, s.store.Put(ctx, "r", lock.Token(), []byte("second")))
				requireValue(t, ctx, s.store, "r", "second", lock.Token())
				// A higher token (the next holder) may write too.
				require.NoError(t, s.store.Put(ctx, "r", lock.Token()+1, []byte("third")))
				requireValue(t, ctx, s.store, "r", "third", lock.Token()+1)
				requireStale(t, s.store.Put(ctx, "r", lock.Token(), []byte("late")), "r", lock.Token(), lock.Token()+1)
			})
		}
	})
}

func TestGetMissingIsNotFound(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		for _, s := range bothStores(b) {
			v, tok, err := s.store.Get(ctx, "nothing-here")
			assert.ErrorIs(t, err, fencedlock.ErrNotFound, s.name)
			assert.Nil(t, v, s.name)
			assert.Zero(t, tok, s.name)
		}
	})
}

// Bad input gets an error naming the problem, never a panic or a token,
// and writes nothing.
func TestBadInput(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		l := newLocker(b)
		rs := newRedisStore(b)
		ms := fencedlock.NewMemoryStore()
		lock := mustTryAcquire(t, ctx, l, "held", longTTL)
		keysBefore := testKeys(t, b)

		type call struct {
			name    string
			fn      func() error
			want    error
			mention string
		}
		calls := []call{
			{"TryAcquire empty resource", func() error { return noLock(l.TryAcquire(ctx, "", longTTL)) }, fencedlock.ErrInvalidArgument, "resource"},
			{"Acquire empty resource", func() error { return noLock(l.Acquire(ctx, "", longTTL)) }, fencedlock.ErrInvalidArgument, "resource"},
			{"Advance empty resource", func() error { return l.Advance(ctx, "", 5) }, fencedlock.ErrInvalidArgument, "resource"},
			{"RedisStore.Put empty resource", func() error { return rs.Put(ctx, "", 5, []byte("v")) }, fencedlock.ErrInvalidArgument, "resource"},
			{"RedisStore.Get empty resource", func() error { _, _, err := rs.Get(ctx, ""); return err }, fencedlock.ErrInvalidArgument, "resource"},
			{"MemoryStore.Put empty resource", func() error { return ms.Put(ctx, "", 5, []byte("v")) }, fencedlock.ErrInvalidArgument, "resource"},
			{"MemoryStore.Get empty resource", func() error { _, _, err := ms.Get(ctx, ""); return err }, fencedlock.ErrInvalidArgument, "resource"},

			{"TryAcquire empty hash tag", func() error { return noLock(l.TryAcquire(ctx, "}x", longTTL)) }, fencedlock.ErrInvalidArgument, "hash tag"},
			{"Acquire empty hash tag", func() error { return noLock(l.Acquire(ctx, "}", longTTL)) }, fencedlock.ErrInvalidArgument, "hash tag"},
			{"Advance empty hash tag", func() error { return l.Advance(ctx, "}x", 5) }, fencedlock.ErrInvalidArgument, "hash tag"},
			{"RedisStore.Put empty hash tag", func() error { return rs.Put(ctx, "}x", 5, []byte("v")) }, fencedlock.ErrInvalidArgument, "hash tag"},
			{"RedisStore.Get empty hash tag", func() error { _, _, err := rs.Get(ctx, "}x"); return err }, fencedlock.ErrInvalidArgument, "hash tag"},

			{"RedisStore.Put zero token", func() error { return rs.Put(ctx, "r", 0, []byte("v")) }, fencedlock.ErrInvalidToken, "token"},
			{"MemoryStore.Put zero token", func() error { return ms.Put(ctx, "r", 0, []byte("v")) }, fencedlock.ErrInvalidToken, "token"},
			{"RedisStore.Put token above MaxRedisStoreToken", func() error {
				return rs.Put(ctx, "r", fencedlock.MaxRedisStoreToken+1, []byte("v"))
			}, fencedlock.ErrInvalidToken, "token"},
			{"RedisStore.Put max uint64 token", func() error { return rs.Put(ctx, "r", math.MaxUint64, []byte("v")) }, fencedlock.ErrInvalidToken, "token"},
		}
		for _, ttl := range []time.Duration{0, -time.Second, 999 * time.Microsecond, math.MinInt64} {
			ttl := ttl
			calls = append(calls,
				call{fmt.Sprintf("TryAcquire ttl %v", ttl), func() error { return noLock(l.TryAcquire(ctx, "r", ttl)) }, fencedlock.ErrInvalidArgument, "ttl"},
				call{fmt.Sprintf("Acquire ttl %v", ttl), func() error { return noLock(l.Acquire(ctx, "r", ttl)) }, fencedlock.ErrInvalidArgument, "ttl"},
				call{fmt.Sprintf("Refresh ttl %v", ttl), func() error { return lock.Refresh(ctx, ttl) }, fencedlock.ErrInvalidArgument, "ttl"},
			)
		}
		for _, c := range calls {
			c := c
			t.Run(c.name, func(t *testing.T) {
				err := noPanic(c.fn)
				require.Error(t, err)
				assert.ErrorIs(t, err, c.want)
				assert.Contains(t, err.Error(), c.mention)
			})
		}

		// Nothing was written, and the held lock kept its TTL.
		assert.Equal(t, keysBefore, testKeys(t, b))
		ttl, err := lock.TTL(ctx)
		require.NoError(t, err)
		assert.Greater(t, ttl, longTTL-5*time.Second, "a refused Refresh changed the TTL")
		for _, s := range []fencedlock.Store{rs, ms} {
			_, _, err := s.Get(ctx, "r")
			assert.ErrorIs(t, err, fencedlock.ErrNotFound, "a refused Put wrote")
		}

		// The largest token a RedisStore takes is compared exactly.
		require.NoError(t, rs.Put(ctx, "max", fencedlock.MaxRedisStoreToken, []byte("top")))
		requireStale(t, rs.Put(ctx, "max", fencedlock.MaxRedisStoreToken-1, []byte("under")), "max", fencedlock.MaxRedisStoreToken-1, fencedlock.MaxRedisStoreToken)
		requireValue(t, ctx, rs, "max", "top", fencedlock.MaxRedisStoreToken)

		// Nil options are ignored.
		nl := fencedlock.New(b.Client, nil, fencedlock.WithPrefix(b.Prefix), nil)
		got, err := nl.Acquire(ctx, "nil-opts", longTTL, nil)
		require.NoError(t, err)
		require.NoError(t, got.Release(ctx))
		ns := fencedlock.NewRedisStore(b.Client, nil, fencedlock.WithStorePrefix(b.Prefix))
		assert.Equal(t, rs.Key("x"), ns.Key("x"))
	})
}

// A RedisStore value key holding a token the library did not write is
// reported, and left as it is.
func TestCorruptRedisStoreValue(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		s := newRedisStore(b)
		tests := []struct {
			name       string
			set        func(key string) error
			getCorrupt bool // Get must report it too
		}{
			{"letters", func(k string) error { return b.Client.HSet(ctx, k, "t", "abc", "v", "old").Err() }, true},
			{"negative", func(k string) error { return b.Client.HSet(ctx, k, "t", "-1", "v", "old").Err() }, true},
			{"fraction", func(k string) error { return b.Client.HSet(ctx, k, "t", "1.5", "v", "old").Err() }, true},
			{"exponent", func(k string) error { return b.Client.HSet(ctx, k, "t", "1e3", "v", "old").Err() }, true},
			{"hex", func(k string) error { return b.Client.HSet(ctx, k, "t", "0x10", "v", "old").Err() }, true},
			{"empty", func(k string) error { return b.Client.HSet(ctx, k, "t", "", "v", "old").Err() }, true},
			{"2^53", func(k string) error { return b.Client.HSet(ctx, k, "t", "9007199254740992", "v", "old").Err() }, false},
			{"string type", func(k string) error { return b.Client.Set(ctx, k, "old", 0).Err() }, true},
		}
		for _, tc := range tests {
			tc := tc
			t.Run(tc.name, func(t *testing.T) {
				res := "corrupt-" + strings.ReplaceAll(tc.name, " ", "-")
				key := s.Key(res)
				require.NoError(t, tc.set(key))
				before := keySnapshot(t, b, key)

				err := noPanic(func() error { return s.Put(ctx, res, 5, []byte("new")) })
				if assert.Error(t, err) {
					assert.ErrorIs(t, err, fencedlock.ErrCorrupt, "Put: %v", err)
					assert.Contains(t, err.Error(), key)
				}
				assert.Equal(t, before, keySnapshot(t, b, key), "Put changed a corrupt value key")

				if tc.getCorrupt {
					var v []byte
					var tok fencedlock.Token
					err := noPanic(func() (err error) { v, tok, err = s.Get(ctx, res); return err })
					assert.ErrorIs(t, err, fencedlock.ErrCorrupt, "Get: %v", err)
					assert.Nil(t, v)
					assert.Zero(t, tok)
				}
			})
		}
	})
}

type ltOpKind int

const (
	ltPutOp ltOpKind = iota
	ltGetOp
)

type ltOutcome int

const (
	ltAccepted ltOutcome = iota // Put stored
	ltStale                     // Put refused with a *StaleTokenError
	ltRead                      // Get returned a value
	ltNotFound                  // Get found nothing
)

// ltOp is one call to a Store. invoke and complete come from one atomic
// clock, taken just before the call and just after it returned, so
// a.complete < b.invoke means a returned before b was called.
type ltOp struct {
	kind     ltOpKind
	resource string
	token    fencedlock.Token // Put: the writer's; Get: the one returned
	value    string           // Put: written (unique); Get: returned
	outcome  ltOutcome
	stale    fencedlock.StaleTokenError // for ltStale: what the store reported

	invoke, complete int64
}

func (o ltOp) String() string {
	kind := "Put"
	if o.kind == ltGetOp {
		kind = "Get"
	}
	return fmt.Sprintf("%s(%s, token %d, %q)@[%d,%d]", kind, o.resource, o.token, o.value, o.invoke, o.complete)
}

// ltHistory records the calls of many goroutines to one Store.
type ltHistory struct {
	clock atomic.Int64
	mu    sync.Mutex
	ops   []ltOp // guarded by mu
}

func (h *ltHistory) add(op ltOp) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

// put calls s.Put and records it. It returns errors other than a stale
// token, which are not recorded.
func (h *ltHistory) put(ctx context.Context, s fencedlock.Store, resource string, token fencedlock.Token, value string) (ltOp, error) {
	op := ltOp{kind: ltPutOp, resource: resource, token: token, value: value}
	op.invoke = h.clock.Add(1)
	err := s.Put(ctx, resource, token, []byte(value))
	op.complete = h.clock.Add(1)
	var se *fencedlock.StaleTokenError
	switch {
	case err == nil:
		op.outcome = ltAccepted
	case errors.As(err, &se):
		op.outcome, op.stale = ltStale, *se
	default:
		return op, err
	}
	h.add(op)
	return op, nil
}

// get calls s.Get and records it.
func (h *ltHistory) get(ctx context.Context, s fencedlock.Store, resource string) error {
	op := ltOp{kind: ltGetOp, resource: resource}
	op.invoke = h.clock.Add(1)
	v, tok, err := s.Get(ctx, resource)
	op.complete = h.clock.Add(1)
	switch {
	case err == nil:
		op.outcome, op.value, op.token = ltRead, string(v), tok
	case errors.Is(err, fencedlock.ErrNotFound):
		op.outcome = ltNotFound
	default:
		return err
	}
	h.add(op)
	return nil
}

// ltCheckFenced checks a history against the fenced register: each
// resource holds one value and the token that wrote it, a Put is accepted
// exactly when its token is not below the stored one, and every call takes
// effect at one instant between its invocation and its return. It returns
// one line per violation. Values written must be unique.
//
//   - An accepted Put's token is not below that of any Put accepted before
//     it was called (the stored token never falls).
//   - A refused Put reports its own resource and token, and a Current above
//     its token that an accepted Put called before the refusal returned
//     had written.
//   - A Get returns a value and token that one accepted Put W wrote, W
//     called before the Get returned, and no accepted Put that returned
//     before the Get was called either came after W or had a higher token.
//   - A Get finds nothing only if no Put was accepted before it was called.
func ltCheckFenced(ops []ltOp) []string {
	var bad []string
	byResource := map[string][]ltOp{}
	for _, op := range ops {
		byResource[op.resource] = append(byResource[op.resource], op)
	}
	for _, rops := range byResource {
		var accepted []ltOp
		writer := map[string]ltOp{}
		for _, op := range rops {
			if op.kind == ltPutOp && op.outcome == ltAccepted {
				accepted = append(accepted, op)
				writer[op.value] = op
			}
		}
		for _, op := range rops {
			switch {
			case op.kind == ltPutOp && op.outcome == ltAccepted:
				for _, q := range accepted {
					if q.complete < op.invoke && q.token > op.token {
						bad = append(bad, fmt.Sprintf("%v accepted after %v had been", op, q))
					}
				}
			case op.kind == ltPutOp && op.outcome == ltStale:
				if op.stale.Resource != op.resource || op.stale.Token != op.token {
					bad = append(bad, fmt.Sprintf("%v refused with %+v, naming another write", op, op.stale))
				}
				if op.stale.Current <= op.token {
					bad = append(bad, fmt.Sprintf("%v refused though the store holds %d", op, op.stale.Current))
				}
				found := false
				for _, w := range accepted {
					if w.token == op.stale.Current && w.invoke < op.complete {
						found = true
					}
				}
				if !found {
					bad = append(bad, fmt.Sprintf("%v refused with current %d, which no earlier accepted Put wrote", op, op.stale.Current))
				}
			case op.kind == ltGetOp && op.outcome == ltRead:
				w, ok := writer[op.value]
				if !ok {
					bad = append(bad, fmt.Sprintf("%v returned a value no accepted Put wrote", op))
					continue
				}
				if w.token != op.token {
					bad = append(bad, fmt.Sprintf("%v returned the value of %v with another token", op, w))
				}
				if w.invoke > op.complete {
					bad = append(bad, fmt.Sprintf("%v returned the value of %v, called after it", op, w))
				}
				for _, q := range accepted {
					if q.value != w.value && q.complete < op.invoke && (q.token > op.token || w.complete < q.invoke) {
						bad = append(bad, fmt.Sprintf("%v returned the value of %v, overwritten by %v before it", op, w, q))
					}
				}
			case op.kind == ltGetOp && op.outcome == ltNotFound:
				for _, q := range accepted {
					if q.complete < op.invoke {
						bad = append(bad, fmt.Sprintf("%v found nothing after %v", op, q))
						break
					}
				}
			}
		}
	}
	sort.Strings(bad)
	return bad
}

// ltWorkload drives a Store the way fenced holders do: acquire, write a
// few times, sometimes pause (lose the lock, then write late once another
// holder has written with a higher token), release; with reads all along.
// It returns the history and the late writes made after a higher write had
// been accepted.
func ltWorkload(t *testing.T, l *fencedlock.Locker, s fencedlock.Store, tag string) ([]ltOp, []ltOp) {
	t.Helper()
	ctx := testCtx(t)
	const workers, rounds = 4, 10
	resources := []string{tag + "-a", tag + "-b"}
	h := &ltHistory{}

	var highMu sync.Mutex
	high := map[string]fencedlock.Token{} // highest token of a returned accepted Put; guarded by highMu
	put := func(res string, tok fencedlock.Token, value string) (ltOp, error) {
		op, err := h.put(ctx, s, res, tok, value)
		if err == nil && op.outcome == ltAccepted {
			highMu.Lock()
			if tok > high[res] {
				high[res] = tok
			}
			highMu.Unlock()
		}
		return op, err
	}
	higher := func(res string, tok fencedlock.Token) bool {
		highMu.Lock()
		defer highMu.Unlock()
		return high[res] > tok
	}

	var lateMu sync.Mutex
	var late []ltOp // guarded by lateMu

	stopReader := make(chan struct{})
	var readerDone sync.WaitGroup
	readerDone.Add(1)
	go func() {
		defer readerDone.Done()
		for i := 0; ; i++ {
			select {
			case <-stopReader:
				return
			default:
			}
			if err := h.get(ctx, s, resources[i%len(resources)]); err != nil {
				t.Errorf("reader: %v", err)
				return
			}
			time.Sleep(200 * time.Microsecond)
		}
	}()

	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		w := w
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				res := resources[(w+i)%len(resources)]
				lock, err := l.Acquire(ctx, res, longTTL, fencedlock.WithRetryDelay(time.Millisecond, 4*time.Millisecond))
				if err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
				for p := 0; p <= (w+i)%3; p++ {
					if _, err := put(res, lock.Token(), fmt.Sprintf("w%d-r%d-p%d", w, i, p)); err != nil {
						t.Errorf("worker %d put: %v", w, err)
					}
					if err := h.get(ctx, s, res); err != nil {
						t.Errorf("worker %d get: %v", w, err)
					}
				}
				pause := (w == 0 && i == 0) || (w*7+i)%4 == 1
				if !pause {
					if err := lock.Release(ctx); err != nil {
						t.Errorf("worker %d release: %v", w, err)
					}
					continue
				}
				// The pause: the lock is lost (released here, so the others
				// need not wait out a TTL) while this holder still believes
				// it holds it, and it writes once someone wrote after it.
				if err := lock.Release(ctx); err != nil {
					t.Errorf("worker %d release: %v", w, err)
				}
				deadline := time.Now().Add(300 * time.Millisecond)
				for !higher(res, lock.Token()) && time.Now().Before(deadline) {
					time.Sleep(200 * time.Microsecond)
				}
				waited := higher(res, lock.Token())
				op, err := put(res, lock.Token(), fmt.Sprintf("w%d-r%d-late", w, i))
				if err != nil {
					t.Errorf("worker %d late put: %v", w, err)
				} else if waited {
					lateMu.Lock()
					late = append(late, op)
					lateMu.Unlock()
				}
				if err := lock.Release(ctx); !errors.Is(err, fencedlock.ErrReleased) || errors.Is(err, fencedlock.ErrLockLost) {
					t.Errorf("worker %d: late Release: %v, want ErrReleased and not ErrLockLost", w, err)
				}
				if err := h.get(ctx, s, res); err != nil {
					t.Errorf("worker %d get: %v", w, err)
				}
			}
		}()
	}
	wg.Wait()
	close(stopReader)
	readerDone.Wait()
	for _, res := range resources {
		require.NoError(t, h.get(ctx, s, res))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ops, late
}

func TestFencedHistory(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		l := newLocker(b)
		for _, s := range bothStores(b) {
			s := s
			t.Run(s.name, func(t *testing.T) {
				ops, late := ltWorkload(t, l, s.store, s.name)
				require.NotEmpty(t, late, "no holder wrote late after a higher token: the history tests nothing")
				for _, op := range late {
					assert.Equal(t, ltStale, op.outcome, "late write %v was accepted", op)
				}
				var puts, stale, reads int
				for _, op := range ops {
					switch op.outcome {
					case ltAccepted:
						puts++
					case ltStale:
						stale++
					case ltRead:
						reads++
					}
				}
				assert.Positive(t, puts)
				assert.Positive(t, reads)
				assert.GreaterOrEqual(t, stale, len(late))
				assert.Empty(t, ltCheckFenced(ops), "the history breaks the fenced register")
			})
		}
	})
}

// ltUnfencedStore keeps the last write whatever its token: the store the
// fencing rule exists to replace.
type ltUnfencedStore struct {
	mu   sync.Mutex
	data map[string]ltOp // guarded by mu
}

func (s *ltUnfencedStore) Put(_ context.Context, resource string, token fencedlock.Token, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.data == nil {
		s.data = map[string]ltOp{}
	}
	s.data[resource] = ltOp{token: token, value: string(value)}
	return nil
}

func (s *ltUnfencedStore) Get(_ context.Context, resource string) ([]byte, fencedlock.Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.data[resource]
	if !ok {
		return nil, 0, fencedlock.ErrNotFound
	}
	return []byte(e.value), e.token, nil
}

// The checker must be able to fail: the same workload on a store without
// the fence breaks the register.
func TestFencedHistoryCheckerCatchesUnfencedStore(t *testing.T) {
	b := redistest.Mini(t)
	ops, late := ltWorkload(t, newLocker(b), &ltUnfencedStore{}, "unfenced")
	require.NotEmpty(t, late)
	bad := ltCheckFenced(ops)
	require.NotEmpty(t, bad, "an unfenced store passed the fenced-register check")
	lowerAccepted := 0
	for _, v := range bad {
		if strings.Contains(v, "accepted after") {
			lowerAccepted++
		}
	}
	assert.Positive(t, lowerAccepted, "no lower token accepted after a higher one was reported")
	for _, op := range late {
		assert.Equal(t, ltAccepted, op.outcome)
	}
	t.Logf("%d violations, the first: %s", len(bad), bad[0])
}

// Each rule of the checker rejects a history that breaks it, and accepts
// the one that keeps them all.
func TestFencedHistoryCheckerRules(t *testing.T) {
	put := func(tok fencedlock.Token, value string, inv, comp int64) ltOp {
		return ltOp{kind: ltPutOp, resource: "r", token: tok, value: value, outcome: ltAccepted, invoke: inv, complete: comp}
	}
	stale := func(tok, cur fencedlock.Token, value string, inv, comp int64) ltOp {
		return ltOp{kind: ltPutOp, resource: "r", token: tok, value: value, outcome: ltStale,
			stale: fencedlock.StaleTokenError{Resource: "r", Token: tok, Current: cur}, invoke: inv, complete: comp}
	}
	get := func(tok fencedlock.Token, value string, inv, comp int64) ltOp {
		return ltOp{kind: ltGetOp, resource: "r", token: tok, value: value, outcome: ltRead, invoke: inv, complete: comp}
	}
	notFound := func(inv, comp int64) ltOp {
		return ltOp{kind: ltGetOp, resource: "r", outcome: ltNotFound, invoke: inv, complete: comp}
	}
	tests := []struct {
		name string
		ops  []ltOp
		ok   bool
	}{
		{"valid", []ltOp{notFound(1, 2), put(5, "a", 3, 4), put(5, "b", 5, 6), get(5, "b", 7, 8),
			put(7, "c", 9, 12), get(5, "b", 10, 11), stale(5, 7, "d", 13, 14), get(7, "c", 15, 16)}, true},
		{"overlapping calls may take effect in either order", []ltOp{put(5, "a", 1, 6), put(7, "b", 2, 5), get(5, "a", 3, 8)}, true},
		{"lower token accepted after a higher one", []ltOp{put(7, "a", 1, 2), put(5, "b", 3, 4)}, false},
		{"refused though not stale", []ltOp{put(5, "a", 1, 2), stale(6, 5, "b", 3, 4)}, false},
		{"refused with a current never written", []ltOp{put(5, "a", 1, 2), stale(3, 9, "b", 3, 4)}, false},
		{"refusal names another token", []ltOp{put(9, "a", 1, 2),
			{kind: ltPutOp, resource: "r", token: 3, value: "b", outcome: ltStale, stale: fencedlock.StaleTokenError{Resource: "r", Token: 4, Current: 9}, invoke: 3, complete: 4}}, false},
		{"read of a value never written", []ltOp{put(5, "a", 1, 2), get(5, "zzz", 3, 4)}, false},
		{"read with the wrong token", []ltOp{put(5, "a", 1, 2), get(6, "a", 3, 4)}, false},
		{"read of a value written later", []ltOp{get(5, "a", 1, 2), put(5, "a", 3, 4)}, false},
		{"stale read, same token", []ltOp{put(5, "a", 1, 2), put(5, "b", 3, 4), get(5, "a", 5, 6)}, false},
		{"stale read, higher token", []ltOp{put(5, "a", 1, 3), put(7, "b", 2, 4), get(5, "a", 5, 6)}, false},
		{"not found after a write", []ltOp{put(5, "a", 1, 2), notFound(3, 4)}, false},
	}
	for _, tc := range tests {
		bad := ltCheckFenced(tc.ops)
		if tc.ok {
			assert.Empty(t, bad, tc.name)
		} else {
			assert.NotEmpty(t, bad, tc.name)
		}
	}
}
