package fencedlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
	"github.com/fencedlock/fencedlock/observe"
)

// The order queue's lost update: A writes [1001] and pauses past its TTL;
// B acquires and reads [1001]; A wakes and writes [1001,1002]; B writes
// [1001,1003]. B's read is fenced (Update), so A's write is refused
// instead of being acknowledged and then lost.
func TestStaleWriteBetweenReadAndWriteIsRefused(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		for _, s := range bothStores(b) {
			s := s
			t.Run(s.name, func(t *testing.T) {
				ctx := testCtx(t)
				l := newLocker(b)
				res := "order-queue-" + s.name
				a := mustTryAcquire(t, ctx, l, res, 10*time.Second)
				require.NoError(t, s.store.Put(ctx, res, a.Token(), []byte("1001")))
				b.FastForward(t, 11*time.Second) // A pauses past its TTL
				bl := mustTryAcquire(t, ctx, l, res, 10*time.Second)
				var aErr error
				err := fencedlock.Update(ctx, s.store, res, bl.Token(), func(v []byte, found bool) ([]byte, error) {
					require.True(t, found)
					require.Equal(t, "1001", string(v))
					// A wakes between B's read and B's write.
					aErr = s.store.Put(ctx, res, a.Token(), []byte("1001,1002"))
					return append(v, ",1003"...), nil
				})
				require.NoError(t, err)
				requireStale(t, aErr, res, a.Token(), bl.Token())
				requireValue(t, ctx, s.store, res, "1001,1003", bl.Token())
			})
		}
	})
}

// observedStores returns bothStores and each wrapped by ObserveStore.
func observedStores(b *redistest.Backend) []namedStore {
	stores := bothStores(b)
	for _, s := range bothStores(b) {
		stores = append(stores, namedStore{"Observed" + s.name, fencedlock.ObserveStore(s.store, observe.Func(func(ctx context.Context, _ observe.Event) context.Context { return ctx }))})
	}
	return stores
}

// Update's contract: fn sees the value and whether one was written, its
// result is written with the token, a token below the fence never calls
// fn, and fn's error writes nothing but leaves the fence raised.
func TestUpdate(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		for _, s := range observedStores(b) {
			s := s
			t.Run(s.name, func(t *testing.T) {
				ctx := testCtx(t)
				st := s.store
				u := s.name + ":u"

				// Nothing written: found is false, and the result is stored.
				calls := 0
				require.NoError(t, fencedlock.Update(ctx, st, u, 10, func(v []byte, found bool) ([]byte, error) {
					calls++
					assert.False(t, found)
					assert.Empty(t, v)
					return []byte("a"), nil
				}))
				require.Equal(t, 1, calls)
				requireValue(t, ctx, st, u, "a", 10)

				// An equal token reads and writes again.
				require.NoError(t, fencedlock.Update(ctx, st, u, 10, func(v []byte, found bool) ([]byte, error) {
					assert.True(t, found)
					return append(v, 'b'), nil
				}))
				requireValue(t, ctx, st, u, "ab", 10)

				// fn's error: returned as it is, nothing written, fence raised.
				boom := errors.New("boom")
				err := fencedlock.Update(ctx, st, u, 20, func(v []byte, found bool) ([]byte, error) {
					assert.Equal(t, "ab", string(v))
					return []byte("never"), boom
				})
				require.ErrorIs(t, err, boom)
				requireValue(t, ctx, st, u, "ab", 10)
				requireStale(t, st.Put(ctx, u, 15, []byte("x")), u, 15, 20)

				// Below the fence: fn is not called.
				err = fencedlock.Update(ctx, st, u, 19, func([]byte, bool) ([]byte, error) {
					t.Error("fn called with a stale token")
					return nil, nil
				})
				requireStale(t, err, u, 19, 20)
				requireValue(t, ctx, st, u, "ab", 10)

				// A newer writer between the read and the write: Update's
				// Put is refused.
				err = fencedlock.Update(ctx, st, u, 20, func(v []byte, _ bool) ([]byte, error) {
					require.NoError(t, st.Put(ctx, u, 30, []byte("newer")))
					return append(v, 'c'), nil
				})
				requireStale(t, err, u, 20, 30)
				requireValue(t, ctx, st, u, "newer", 30)

				// Bad input.
				ok := func([]byte, bool) ([]byte, error) { return nil, nil }
				assert.ErrorIs(t, fencedlock.Update(ctx, st, u, 0, ok), fencedlock.ErrInvalidToken)
				assert.ErrorIs(t, fencedlock.Update(ctx, st, "", 40, ok), fencedlock.ErrInvalidArgument)
				assert.ErrorIs(t, fencedlock.Update(ctx, st, u, 40, nil), fencedlock.ErrInvalidArgument)
				assert.ErrorIs(t, fencedlock.Update(ctx, nil, u, 40, ok), fencedlock.ErrInvalidArgument)
				requireStale(t, st.Put(ctx, u, 25, []byte("x")), u, 25, 30)
			})
		}
	})
}

// Fence raises the fence without a value; Get keeps returning the token
// that wrote the value.
func TestFence(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		for _, s := range observedStores(b) {
			s := s
			t.Run(s.name, func(t *testing.T) {
				ctx := testCtx(t)
				st := s.store
				f := s.name + ":f"
				require.NoError(t, st.Fence(ctx, f, 5))
				_, _, err := st.Get(ctx, f)
				require.ErrorIs(t, err, fencedlock.ErrNotFound, "a fence alone holds no value")
				requireStale(t, st.Put(ctx, f, 4, []byte("x")), f, 4, 5)
				requireStale(t, st.Fence(ctx, f, 4), f, 4, 5)
				require.NoError(t, st.Fence(ctx, f, 5), "an equal token passes")
				require.NoError(t, st.Put(ctx, f, 5, []byte("v5")))
				require.NoError(t, st.Fence(ctx, f, 9))
				requireValue(t, ctx, st, f, "v5", 5)
				requireStale(t, st.Put(ctx, f, 8, []byte("x")), f, 8, 9)
				requireStale(t, st.Fence(ctx, f, 6), f, 6, 9)
				requireValue(t, ctx, st, f, "v5", 5)
				require.NoError(t, st.Put(ctx, f, 9, []byte("v9")))
				requireValue(t, ctx, st, f, "v9", 9)

				assert.ErrorIs(t, st.Fence(ctx, f, 0), fencedlock.ErrInvalidToken)
				assert.ErrorIs(t, st.Fence(ctx, "", 10), fencedlock.ErrInvalidArgument)
				assert.ErrorIs(t, st.Fence(ctx, string(make([]byte, fencedlock.MaxResourceLen+1)), 10), fencedlock.ErrInvalidArgument)
				done, cancel := context.WithCancel(ctx)
				cancel()
				assert.Error(t, st.Fence(done, f, 10))
				require.NoError(t, st.Put(ctx, f, 9, []byte("still 9")), "the fence stayed at 9")
			})
		}
	})
}

// tenantMemory and tenantRedis wrap a store of the package, embedded, and
// keep each resource under a tenant's name: their own Put, Get and Fence
// are the way to the embedded store's data.
type tenantMemory struct {
	*fencedlock.MemoryStore
	tenant string
}

type tenantRedis struct {
	*fencedlock.RedisStore
	tenant string
}

func (s tenantMemory) Put(ctx context.Context, r string, t fencedlock.Token, v []byte) error {
	return s.MemoryStore.Put(ctx, s.tenant+"/"+r, t, v)
}

func (s tenantMemory) Get(ctx context.Context, r string) ([]byte, fencedlock.Token, error) {
	return s.MemoryStore.Get(ctx, s.tenant+"/"+r)
}

func (s tenantMemory) Fence(ctx context.Context, r string, t fencedlock.Token) error {
	return s.MemoryStore.Fence(ctx, s.tenant+"/"+r, t)
}

func (s tenantRedis) Put(ctx context.Context, r string, t fencedlock.Token, v []byte) error {
	return s.RedisStore.Put(ctx, s.tenant+"/"+r, t, v)
}

func (s tenantRedis) Get(ctx context.Context, r string) ([]byte, fencedlock.Token, error) {
	return s.RedisStore.Get(ctx, s.tenant+"/"+r)
}

func (s tenantRedis) Fence(ctx context.Context, r string, t fencedlock.Token) error {
	return s.RedisStore.Fence(ctx, s.tenant+"/"+r, t)
}

// A store that embeds MemoryStore or RedisStore and has Put, Get and
// Fence of its own: Update fences and reads through its methods, not the
// embedded store's, so it reads what was written through the wrapper,
// and a stale write after its read is refused.
func TestUpdateGoesThroughAWrappersMethods(t *testing.T) {
	be := redistest.Real(t)
	ctx := testCtx(t)
	for name, s := range map[string]fencedlock.Store{
		"MemoryStore": tenantMemory{new(fencedlock.MemoryStore), "t1"},
		"RedisStore":  tenantRedis{newRedisStore(be), "t1"},
	} {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, s.Put(ctx, "orders", 5, []byte("1001")))
			err := fencedlock.Update(ctx, s, "orders", 6, func(v []byte, found bool) ([]byte, error) {
				assert.True(t, found, "the value written through the wrapper")
				assert.Equal(t, "1001", string(v))
				// A stale holder writes between the read and the write.
				var stale *fencedlock.StaleTokenError
				assert.ErrorAs(t, s.Put(ctx, "orders", 5, []byte("1001,1002")), &stale, "a stale write after the fenced read")
				return append(v, ",1003"...), nil
			})
			require.NoError(t, err)
			v, token, err := s.Get(ctx, "orders")
			require.NoError(t, err)
			assert.Equal(t, "1001,1003", string(v))
			assert.Equal(t, fencedlock.Token(6), token)
		})
	}
}
