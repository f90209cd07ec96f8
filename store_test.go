package fencedlock_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/history"
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

		// A RedisStore takes every uint64 token and compares them exactly,
		// above 2^53 too, where a float64 would round neighbours together.
		for _, top := range []fencedlock.Token{1<<53 + 1, 1<<63 - 1, 1 << 63, math.MaxUint64} {
			res := fmt.Sprintf("top-%d", top)
			require.NoError(t, rs.Put(ctx, res, top-1, []byte("below")))
			require.NoError(t, rs.Put(ctx, res, top, []byte("top")))
			requireStale(t, rs.Put(ctx, res, top-1, []byte("under")), res, top-1, top)
			requireValue(t, ctx, rs, res, "top", top)
		}

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
			{"zero", func(k string) error { return b.Client.HSet(ctx, k, "t", "0", "v", "old").Err() }, true},
			{"leading zero", func(k string) error { return b.Client.HSet(ctx, k, "t", "007", "v", "old").Err() }, true},
			{"2^64", func(k string) error { return b.Client.HSet(ctx, k, "t", "18446744073709551616", "v", "old").Err() }, true},
			{"21 digits", func(k string) error { return b.Client.HSet(ctx, k, "t", "100000000000000000000", "v", "old").Err() }, true},
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

// storeHistory records the calls of many goroutines to one Store as a
// history for the fenced-register checker, internal/history. Call and
// Return are ticks of one atomic clock, taken just before the call and
// just after it returned.
type storeHistory struct {
	clock atomic.Int64
	mu    sync.Mutex
	ops   []history.Op // guarded by mu
}

func (h *storeHistory) add(op history.Op) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

// put calls s.Put and records it. It returns errors other than a stale
// token, which are not recorded.
func (h *storeHistory) put(ctx context.Context, s fencedlock.Store, resource string, token fencedlock.Token, value string) (history.Op, error) {
	op := history.Op{Kind: history.Put, Resource: resource, Token: token, Value: value}
	op.Call = h.clock.Add(1)
	err := s.Put(ctx, resource, token, []byte(value))
	op.Return = h.clock.Add(1)
	var se *fencedlock.StaleTokenError
	switch {
	case err == nil:
		op.Outcome = history.OK
	case errors.As(err, &se):
		op.Outcome, op.Current, op.Refusal = history.Stale, se.Current, se
	default:
		return op, err
	}
	h.add(op)
	return op, nil
}

// get calls s.Get and records it.
func (h *storeHistory) get(ctx context.Context, s fencedlock.Store, resource string) error {
	op := history.Op{Kind: history.Get, Resource: resource}
	op.Call = h.clock.Add(1)
	v, tok, err := s.Get(ctx, resource)
	op.Return = h.clock.Add(1)
	switch {
	case err == nil:
		op.Outcome, op.Value, op.Token = history.OK, string(v), tok
	case errors.Is(err, fencedlock.ErrNotFound):
		op.Outcome = history.NotFound
	default:
		return err
	}
	h.add(op)
	return nil
}

// fencedWorkload drives a Store the way fenced holders do: acquire, write a
// few times, sometimes pause (lose the lock, then write late once another
// holder has written with a higher token), release; with reads all along.
// It returns the history and the late writes made after a higher write had
// been accepted.
func fencedWorkload(t *testing.T, l *fencedlock.Locker, s fencedlock.Store, tag string) ([]history.Op, []history.Op) {
	t.Helper()
	ctx := testCtx(t)
	const workers, rounds = 4, 10
	resources := []string{tag + "-a", tag + "-b"}
	h := &storeHistory{}

	var highMu sync.Mutex
	high := map[string]fencedlock.Token{} // highest token of a returned accepted Put; guarded by highMu
	put := func(res string, tok fencedlock.Token, value string) (history.Op, error) {
		op, err := h.put(ctx, s, res, tok, value)
		if err == nil && op.Outcome == history.OK {
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
	var late []history.Op // guarded by lateMu

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
				pollUntil(300*time.Millisecond, func() bool { return higher(res, lock.Token()) })
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
				ops, late := fencedWorkload(t, l, s.store, s.name)
				require.NotEmpty(t, late, "no holder wrote late after a higher token: the history tests nothing")
				for _, op := range late {
					assert.Equal(t, history.Stale, op.Outcome, "late write %v was accepted", op)
				}
				var puts, stale, reads int
				for _, op := range ops {
					switch {
					case op.Kind == history.Put && op.Outcome == history.OK:
						puts++
					case op.Outcome == history.Stale:
						stale++
					case op.Kind == history.Get && op.Outcome == history.OK:
						reads++
					}
				}
				assert.Positive(t, puts)
				assert.Positive(t, reads)
				assert.GreaterOrEqual(t, stale, len(late))
				assert.Empty(t, history.Check(ops), "the history breaks the fenced register")
			})
		}
	})
}

// unfencedStore keeps the last write whatever its token: the store the
// fencing rule exists to replace.
type unfencedStore struct {
	mu   sync.Mutex
	data map[string]history.Op // guarded by mu
}

func (s *unfencedStore) Put(_ context.Context, resource string, token fencedlock.Token, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.data == nil {
		s.data = map[string]history.Op{}
	}
	s.data[resource] = history.Op{Token: token, Value: string(value)}
	return nil
}

// Fence accepts every token and fences nothing.
func (s *unfencedStore) Fence(context.Context, string, fencedlock.Token) error { return nil }

func (s *unfencedStore) Get(_ context.Context, resource string) ([]byte, fencedlock.Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.data[resource]
	if !ok {
		return nil, 0, fencedlock.ErrNotFound
	}
	return []byte(e.Value), e.Token, nil
}

// The checker must be able to fail: the same workload on a store without
// the fence breaks the register.
func TestFencedHistoryCheckerCatchesUnfencedStore(t *testing.T) {
	b := redistest.Mini(t)
	ops, late := fencedWorkload(t, newLocker(b), &unfencedStore{}, "unfenced")
	require.NotEmpty(t, late)
	bad := history.Check(ops)
	require.NotEmpty(t, bad, "an unfenced store passed the fenced-register check")
	// The writes alone break it: a lower token accepted after a higher
	// one had been.
	var puts []history.Op
	for _, op := range ops {
		if op.Kind == history.Put {
			puts = append(puts, op)
		}
	}
	assert.NotEmpty(t, history.Check(puts), "no lower token accepted after a higher one was reported")
	for _, op := range late {
		assert.Equal(t, history.OK, op.Outcome)
	}
	t.Logf("%d violations, the first: %s", len(bad), bad[0])
}
