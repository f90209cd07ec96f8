package fencedlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencedlock/fencedlock"
	"github.com/fencedlock/fencedlock/internal/redistest"
	"github.com/fencedlock/fencedlock/observe"
)

// embedding is a Store of a user's that embeds one of the library's:
// Update takes a Fence, a Get and a Put through it.
type embedding struct{ fencedlock.Store }

// A RedisStore on a ClusterClient made with ReadOnly (which sends
// read-only commands to replicas) reads the primary: a holder's fenced
// read, by hand (Fence, Get, Put) or by Update through any Store, sees
// the acknowledged write of the holder before it while the replica lags,
// so that write is not lost.
func TestRedisStoreReadsThePrimaryWithAClientThatReadsReplicas(t *testing.T) {
	ctx := testCtx(t)
	master := redistest.Start(t)
	require.NoError(t, master.Client(t).ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err())
	p := redistest.NewProxy(t, master.Addr)
	host, port, _ := strings.Cut(p.Addr(), ":")
	replica := redistest.Start(t, "--replicaof", host, port)
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, redistest.WaitInSync(wctx, master.Client(t), replica.Client(t)))

	cc := redis.NewClusterClient(&redis.ClusterOptions{
		ReadOnly: true,
		ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
			return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: master.Addr}, {Addr: replica.Addr}}}}, nil
		},
	})
	t.Cleanup(func() { cc.Close() })
	store := fencedlock.NewRedisStore(cc)
	defer p.Resume()
	observed := fencedlock.ObserveStore(store, observe.Func(func(ctx context.Context, _ observe.Event) context.Context { return ctx }))

	type appendFn = func([]byte, bool) ([]byte, error)
	for _, c := range []struct {
		name string
		rmw  func(resource string, token fencedlock.Token, fn appendFn) error
	}{
		{"Fence, Get and Put", func(r string, tok fencedlock.Token, fn appendFn) error {
			if err := store.Fence(ctx, r, tok); err != nil {
				return err
			}
			v, _, err := store.Get(ctx, r)
			if err != nil && !errors.Is(err, fencedlock.ErrNotFound) {
				return err
			}
			nv, err := fn(v, err == nil)
			if err != nil {
				return err
			}
			return store.Put(ctx, r, tok, nv)
		}},
		{"Update through a Store that embeds it", func(r string, tok fencedlock.Token, fn appendFn) error {
			return fencedlock.Update(ctx, embedding{store}, r, tok, fn)
		}},
		{"Update through ObserveStore", func(r string, tok fencedlock.Token, fn appendFn) error {
			return fencedlock.Update(ctx, observed, r, tok, fn)
		}},
		{"Update", func(r string, tok fencedlock.Token, fn appendFn) error {
			return fencedlock.Update(ctx, store, r, tok, fn)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := "orders " + c.name
			require.NoError(t, store.Put(ctx, r, 4, []byte("[1]")))
			require.NoError(t, redistest.WaitInSync(wctx, master.Client(t), replica.Client(t)))
			p.Pause() // the replica lags; the master takes every write
			require.NoError(t, c.rmw(r, 5, func(v []byte, _ bool) ([]byte, error) { return append(v, "[2]"...), nil }))
			require.NoError(t, c.rmw(r, 6, func(v []byte, _ bool) ([]byte, error) { return append(v, "[3]"...), nil }))
			v, tok, err := store.Get(ctx, r)
			require.NoError(t, err)
			assert.Equal(t, "[1][2][3]", string(v), "Get while the replica lags")
			assert.Equal(t, fencedlock.Token(6), tok)
			p.Resume()
		})
	}
}

// Update through ObserveStore fences and reads in one round trip, as on
// the RedisStore it wraps: two in all, with the Put.
func TestUpdateThroughObserveStoreFencesAndReadsInOneRoundTrip(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b *redistest.Backend) {
		ctx := testCtx(t)
		trips := &roundTrips{}
		c := redis.NewClient(b.Client.Options())
		c.AddHook(trips)
		t.Cleanup(func() { c.Close() })
		var fences int
		observed := fencedlock.ObserveStore(fencedlock.NewRedisStore(c, fencedlock.WithStorePrefix(b.Prefix)), observe.Func(func(ctx context.Context, e observe.Event) context.Context {
			if e.Kind == observe.StoreFenceEnd {
				fences++
			}
			return ctx
		}))
		require.NoError(t, observed.Put(ctx, "r", 4, []byte("a")))
		// Load the scripts first, so that a first EVALSHA's NOSCRIPT and
		// EVAL do not count.
		require.NoError(t, fencedlock.Update(ctx, observed, "r", 5, func(v []byte, _ bool) ([]byte, error) { return v, nil }))
		before := trips.n.Load()
		fences = 0
		require.NoError(t, fencedlock.Update(ctx, observed, "r", 6, func(v []byte, found bool) ([]byte, error) {
			assert.True(t, found)
			return append(v, 'b'), nil
		}))
		assert.EqualValues(t, 2, trips.n.Load()-before, "round trips of Update")
		assert.Equal(t, 1, fences, "fences reported")
	})
}
